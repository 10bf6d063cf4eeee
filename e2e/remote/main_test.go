//go:build linux

// Package remote_test runs remote Node targets with real packets: the caplb manager (on a test
// management API server, with CAPI's reconcilers) reaches an externally managed workload cluster
// (a second API server) only through its kubeconfig Secret, and the real caplb agents in a
// network-namespace ARP lab learn their membership from their own Node in that workload cluster
// and serve the VIP to a client. Root only; it skips with a reason otherwise. Its lab is named
// "remotenode": it does not collide with the arp suite's labs.
package remote_test

import (
	"fmt"
	"os"
	"testing"

	"github.com/caplb/caplb/e2e/lab"
)

// bins are built once per test binary by TestMain, before any test runs, and only read afterwards.
var bins binaries

// binaries names the lab's programs as the tests use them.
type binaries struct{ agent, standin string }

func TestMain(m *testing.M) {
	if os.Geteuid() != 0 {
		// Every test skips with the reason; nothing to build.
		os.Exit(m.Run())
	}
	b, cleanup, err := lab.BuildBinaries()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bins = binaries{agent: b.Agent, standin: b.Standin}
	code := m.Run()
	cleanup()
	os.Exit(code)
}
