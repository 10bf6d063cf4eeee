//go:build linux

package main

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/caplb/caplb/e2e/lifecycle/observe/clients"
	"github.com/caplb/caplb/e2e/realcp"
)

func TestDistOf(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   []float64
		want dist
	}{
		{"none", nil, dist{}},
		{"one", []float64{7}, dist{P50: 7, P99: 7, Max: 7}},
		{"five, unsorted: nearest rank", []float64{300, 100, 500, 200, 400}, dist{P50: 300, P99: 500, Max: 500}},
		{"four: p50 is the second", []float64{4, 1, 3, 2}, dist{P50: 2, P99: 4, Max: 4}},
	} {
		t.Run(tc.name, func(t *testing.T) { NewWithT(t).Expect(distOf(tc.in)).To(Equal(tc.want)) })
	}
}

func TestParseFaults(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    []string
		wantErr bool
	}{
		{"hard_kill,quorum_loss", []string{"hard_kill", "quorum_loss"}, false},
		{"quorum_loss", []string{"quorum_loss"}, false},
		{"", nil, false},
		{"none", nil, false},
		{"hard_kill,flap", nil, true},
	} {
		t.Run(tc.in, func(t *testing.T) {
			g := NewWithT(t)
			got, err := parseFaults(tc.in)
			if tc.wantErr {
				g.Expect(err).To(HaveOccurred())
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(got).To(Equal(tc.want))
		})
	}
}

func TestSummarizeHardKill(t *testing.T) {
	ok := func(fresh, kept, rebuild float64, cg clients.Result) hardKillTrial {
		return hardKillTrial{Victim: "cp-1", NewConnectionMS: fresh, KeptConnectionMS: kept, RebuildSeconds: rebuild, ClientGo: cg}
	}
	clean := clients.Result{Writes: 100, FailedWrites: 2, StreamsReset: 1, StoreMatches: true}
	for _, tc := range []struct {
		name    string
		trials  []hardKillTrial
		check   func(Gomega, *hardKillFigures)
		goalMet bool
	}{
		{"fast and clean: goal met", []hardKillTrial{ok(300, 1300, 30, clean), ok(250, 1100, 28, clean), ok(400, 1500, 0, clean)},
			func(g Gomega, f *hardKillFigures) {
				g.Expect(f.Trials).To(Equal(3))
				g.Expect(f.NewConnectionMS).To(Equal(dist{P50: 300, P99: 400, Max: 400}))
				g.Expect(f.KeptConnectionMS.Max).To(Equal(1500.0))
				g.Expect(f.RebuildSeconds).To(Equal(dist{P50: 28, P99: 30, Max: 30}), "the last trial has no rebuild")
				g.Expect(f.ClientGo).To(Equal(clientTotals{Writes: 300, FailedWrites: 6, StreamsReset: 3}))
			}, true},
		{"a slow new connection misses the goal", []hardKillTrial{ok(300, 1300, 30, clean), ok(1200, 1500, 0, clean)}, nil, false},
		{"a leader loss misses the goal", []hardKillTrial{ok(300, 1300, 0, clients.Result{LeaderLosses: 1, StoreMatches: true})}, nil, false},
		{"a lost event misses the goal", []hardKillTrial{ok(300, 1300, 0, clients.Result{LostEvents: 1})},
			func(g Gomega, f *hardKillFigures) { g.Expect(f.ClientGo.StoreMismatches).To(Equal(1)) }, false},
		{"a failed trial: its clients count, its timings do not, the goal is missed",
			[]hardKillTrial{ok(300, 1300, 30, clean), {Error: "no answer", ClientGo: clean}},
			func(g Gomega, f *hardKillFigures) {
				g.Expect(f.Trials).To(Equal(1))
				g.Expect(f.NewConnectionMS.Max).To(Equal(300.0))
				g.Expect(f.ClientGo.Writes).To(Equal(200))
				g.Expect(f.PerTrial).To(HaveLen(2))
			}, false},
		{"no trial", nil, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			f := summarizeHardKill(tc.trials)
			g.Expect(f.GoalMet).To(Equal(tc.goalMet))
			g.Expect(f.Goal).To(Equal(hardKillGoal))
			if tc.check != nil {
				tc.check(g, f)
			}
		})
	}
}

func TestSummarizeQuorumLoss(t *testing.T) {
	trial := func(down float64, loss, steady, ret realcp.HolderCounts, answered bool, lost int) quorumLossTrial {
		return quorumLossTrial{QuorumLoss: realcp.QuorumLoss{DownSeconds: down, Loss: loss, Steady: steady, Return: ret,
			APIAnswered: answered}, WriteRecoverySeconds: down / 4, ClientGo: clients.Result{Writes: 50, FailedWrites: 5, LeaderLosses: 1, LostEvents: lost, StoreMatches: true}}
	}
	owned := realcp.HolderCounts{Samples: 400}
	for _, tc := range []struct {
		name    string
		trials  []quorumLossTrial
		check   func(Gomega, *quorumLossFigures)
		goalMet bool
	}{
		{"an owner throughout: goal met; failed writes and leader losses are expected", []quorumLossTrial{
			trial(22, realcp.HolderCounts{Samples: 440, TwoOwners: 3}, owned, realcp.HolderCounts{Samples: 100, TwoOwners: 20}, true, 0),
			trial(8, owned, owned, owned, false, 0),
		}, func(g Gomega, f *quorumLossFigures) {
			g.Expect(f.Trials).To(Equal(2))
			g.Expect(f.Loss).To(Equal(realcp.HolderCounts{Samples: 840, TwoOwners: 3}))
			g.Expect(f.Return.TwoOwners).To(Equal(20), "a hand-over's drain while quorum returns: reported, not a miss")
			g.Expect(f.APIAnswered).To(Equal(1))
			g.Expect(f.LeaderLossesExpected).To(Equal(1), "only the loss longer than the renew deadline")
			g.Expect(f.ClientGo.FailedWrites).To(Equal(10))
			g.Expect(f.EtcdDownSeconds).To(Equal(dist{P50: 8, P99: 22, Max: 22}))
			g.Expect(f.WriteRecoverySeconds).To(Equal(dist{P50: 2, P99: 5.5, Max: 5.5}))
		}, true},
		{"no owner during the loss misses the goal", []quorumLossTrial{trial(22, realcp.HolderCounts{Samples: 400, NoOwner: 1}, owned, owned, true, 0)}, nil, false},
		{"no owner while quorum returns misses the goal", []quorumLossTrial{trial(22, owned, owned, realcp.HolderCounts{Samples: 9, NoOwner: 2}, true, 0)}, nil, false},
		{"two owners once every agent failed misses the goal", []quorumLossTrial{trial(22, owned, realcp.HolderCounts{Samples: 300, TwoOwners: 300}, owned, true, 0)}, nil, false},
		{"a lost event misses the goal", []quorumLossTrial{trial(22, owned, owned, owned, true, 1)}, nil, false},
		{"a failed trial misses the goal", []quorumLossTrial{trial(22, owned, owned, owned, true, 0), {Error: "never ready"}},
			func(g Gomega, f *quorumLossFigures) { g.Expect(f.Trials).To(Equal(1)) }, false},
		{"writes that never succeeded again are no recovery time", []quorumLossTrial{trial(22, owned, owned, owned, true, 0),
			func() quorumLossTrial {
				t := trial(20, owned, owned, owned, true, 0)
				t.WriteRecoverySeconds = -1
				return t
			}()},
			func(g Gomega, f *quorumLossFigures) {
				g.Expect(f.WriteRecoverySeconds).To(Equal(dist{P50: 5.5, P99: 5.5, Max: 5.5}))
			}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			f := summarizeQuorumLoss(tc.trials, 10*time.Second)
			g.Expect(f.GoalMet).To(Equal(tc.goalMet))
			if tc.check != nil {
				tc.check(g, f)
			}
		})
	}
}

// The bench's exit status follows the fault goals: a missed one is named.
func TestFaultsMissed(t *testing.T) {
	g := NewWithT(t)
	g.Expect(faultsEntry{}.missed()).To(BeEmpty(), "no fault ran: nothing missed")
	e := faultsEntry{HardKill: &hardKillFigures{Goal: hardKillGoal, GoalMet: true}, QuorumLoss: &quorumLossFigures{Goal: quorumLossGoal}}
	g.Expect(e.missed()).To(Equal([]string{"quorum_loss: " + quorumLossGoal}))
	e.HardKill.GoalMet = false
	g.Expect(e.missed()).To(HaveLen(2))
}
