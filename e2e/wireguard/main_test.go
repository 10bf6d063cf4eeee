//go:build linux

// Package wireguard_test runs the WireGuard backend in a network-namespace lab (wglab): two
// gateways on a public segment, three members behind an nftables NAT router, each with a
// stand-in API server whose certificate is shaped like kubeadm's, and a client on the public
// side doing HTTPS with the cluster CA. Root only; it skips with a reason otherwise (and fails
// under CI=1 when a prerequisite is missing).
package wireguard_test

import (
	"fmt"
	"os"
	"os/exec"
	"testing"

	"github.com/caplb/caplb/e2e/lab"
	"github.com/caplb/caplb/e2e/lab/wglab"
)

// bins is set once by TestMain, before any test runs, and only read afterwards.
var bins wglab.Binaries

func TestMain(m *testing.M) {
	if os.Geteuid() != 0 {
		os.Exit(m.Run()) // every test skips with the reason
	}
	b, cleanup, err := wglab.BuildBinaries()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bins = b
	code := m.Run()
	cleanup()
	os.Exit(code)
}

// startLab skips unless root and nft are there (fails instead under CI) and starts the lab.
func startLab(t *testing.T, o wglab.Options) *wglab.Lab {
	t.Helper()
	needNFT(t)
	l := lab.NewT(t, "wg")
	w, err := wglab.Start(l, bins, o)
	if err != nil {
		t.Fatalf("wireguard lab: %v", err)
	}
	return w
}

// needNFT skips unless root and nft are there (fails instead under CI).
func needNFT(t *testing.T) {
	t.Helper()
	lab.SkipUnlessRoot(t)
	if _, err := exec.LookPath("nft"); err != nil {
		if _, err := os.Stat("/usr/sbin/nft"); err != nil {
			lab.SkipOrFailInCI(t, "needs nft for the NAT router: run `make nftables`")
		}
	}
}

func needConntrack(t *testing.T) {
	t.Helper()
	lab.SkipUnlessRoot(t)
	if _, err := exec.LookPath("conntrack"); err != nil {
		if _, err := os.Stat("/usr/sbin/conntrack"); err != nil {
			lab.SkipOrFailInCI(t, "needs conntrack to flush the NAT's mappings: run `make conntrack`")
		}
	}
}
