//go:build linux

// Package bgp_test runs the BGP VIP lab: a real FRR router (bgpd + zebra, ECMP) peered with
// nodes that each run a stand-in API server and the real `caplb agent` in bgp mode, and a
// client behind the router. Root only; `make frr` installs FRR.
package bgp_test

import (
	"fmt"
	"os"
	"testing"

	"github.com/caplb/caplb/e2e/lab"
)

// binaries are built once per test process (TestMain) and shared by every lab.
type binaries struct{ agent, standin string }

// bins is set once by TestMain, before any test runs, and only read afterwards.
var bins binaries

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	// Only the lab tests need the binaries, and they skip without root or FRR.
	if _, err := os.Stat("/usr/lib/frr/bgpd"); err == nil && os.Geteuid() == 0 {
		b, cleanup, err := lab.BuildBinaries()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer cleanup()
		bins = binaries{agent: b.Agent, standin: b.Standin}
	}
	return m.Run()
}
