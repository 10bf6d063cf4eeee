//go:build linux

// Package arp_test runs the real caplb agent in a network-namespace lab
// (e2e/lab): three nodes with stand-in API servers on a bridge, and a client.
// Root only; it skips with a reason otherwise.
package arp_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/caplb/caplb/e2e/lab"
)

// binaries built once per test binary by TestMain.
type binaries struct{ agent, standin string }

var bins binaries

func TestMain(m *testing.M) {
	if os.Geteuid() != 0 {
		// Every test skips with the reason; nothing to build.
		os.Exit(m.Run())
	}
	dir, err := os.MkdirTemp("", "caplb-e2e-arp-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bins = binaries{agent: filepath.Join(dir, "caplb"), standin: filepath.Join(dir, "standin")}
	for pkg, out := range map[string]string{"./cmd/caplb-agent": bins.agent, "./e2e/lab/standin": bins.standin} {
		if err := lab.BuildBinary(pkg, out); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.RemoveAll(dir)
			os.Exit(1)
		}
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}
