//go:build linux

package main

import (
	"bytes"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/caplb/caplb/e2e/lifecycle/observe/clients"
	"github.com/caplb/caplb/e2e/realcp"
)

func TestPrintFaults(t *testing.T) {
	g := NewWithT(t)
	e := faultsEntry{BootSeconds: 80,
		HardKill: summarizeHardKill([]hardKillTrial{{Victim: "cp-1", NewConnectionMS: 301, KeptConnectionMS: 1300, ClientGo: clients.Result{Writes: 7, FailedWrites: 2}}}),
		QuorumLoss: summarizeQuorumLoss([]quorumLossTrial{{QuorumLoss: realcp.QuorumLoss{DownSeconds: 24, Loss: realcp.HolderCounts{Samples: 400}, APIAnswered: true},
			ClientGo: clients.Result{Writes: 55, FailedWrites: 4, LeaderLosses: 1, StoreMatches: true}}}, 10*time.Second),
	}
	var b bytes.Buffer
	printFaults(&b, e)
	g.Expect(b.String()).To(SatisfyAll(
		ContainSubstring("hard_kill (1 trials)"),
		MatchRegexp(`new connection answered after kill \(ms\)\s+301\s+301\s+301\s+p99 < 1000`),
		MatchRegexp(`client-go writes / failed / etcd refused\s+7 / 2 / 0`),
		ContainSubstring("quorum_loss (1 trials"),
		MatchRegexp(`leader losses\s+1\s+expected 1: etcd down > renew deadline`),
		MatchRegexp(`API server answered at the VIP \(super-admin\)\s+1 of 1`),
	))
	g.Expect(b.String()).NotTo(ContainSubstring("error"))
}
