//go:build linux

// Package arp_test runs the real caplb agent in a network-namespace lab
// (e2e/lab): three nodes with stand-in API servers on a bridge, and a client.
// Root only; it skips with a reason otherwise.
package arp_test

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
