//go:build linux

package main

import (
	"math"
	"slices"
	"time"

	"github.com/caplb/caplb/e2e/lifecycle/observe/clients"
	"github.com/caplb/caplb/e2e/realcp"
)

// Goals of the fault pass (issue 20), printed and written beside the figures.
const (
	hardKillGoal   = "new connection p99 < 1000 ms, 0 leader losses, 0 lost events"
	quorumLossGoal = "an owner in every sample from the kill until every API server is ready again, exactly one once every agent failed, 0 lost events"
	newConnGoalMS  = 1000
)

// faultsEntry is the fault pass in the bench JSON, beside the per-backend rollout objects.
type faultsEntry struct {
	Scenario  string `json:"scenario"`
	APIServer string `json:"apiserver"`
	Backend   string `json:"backend"`
	// BootSeconds is the lab's boot (three kubeadm machines, agents); a rebuild between hard
	// kills costs rebuild_seconds instead.
	BootSeconds float64            `json:"boot_seconds"`
	HardKill    *hardKillFigures   `json:"hard_kill,omitempty"`
	QuorumLoss  *quorumLossFigures `json:"quorum_loss,omitempty"`
	Error       string             `json:"error,omitempty"`
}

// dist is a figure over the trials (nearest rank).
type dist struct {
	P50 float64 `json:"p50"`
	P99 float64 `json:"p99"`
	Max float64 `json:"max"`
}

func distOf(v []float64) dist {
	if len(v) == 0 {
		return dist{}
	}
	s := slices.Sorted(slices.Values(v))
	return dist{P50: percentile(s, 0.5), P99: percentile(s, 0.99), Max: s[len(s)-1]}
}

// percentile by nearest rank, as the other benchmarks.
func percentile(sorted []float64, p float64) float64 {
	rank := int(math.Ceil(p*float64(len(sorted)))) - 1
	return sorted[max(rank, 0)]
}

// clientTotals are client-go's figures summed over the trials.
type clientTotals struct {
	Writes       int `json:"writes"`
	FailedWrites int `json:"failed_requests"`
	// EtcdRefusals: writes an API server answered with its etcd's refusal (clients.Result).
	EtcdRefusals int `json:"etcd_refusals"`
	LostEvents   int `json:"informer_lost_events"`
	LeaderLosses int `json:"leader_losses"`
	Relists      int `json:"relists"`
	StreamsReset int `json:"streams_reset"`
	// StoreMismatches counts trials whose informer did not converge to the writer's last state.
	StoreMismatches int `json:"store_mismatches"`
}

func (t *clientTotals) add(r clients.Result) {
	t.Writes += r.Writes
	t.FailedWrites += r.FailedWrites
	t.EtcdRefusals += r.EtcdRefusals
	t.LostEvents += r.LostEvents
	t.LeaderLosses += r.LeaderLosses
	t.Relists += r.Relists
	t.StreamsReset += r.StreamsReset
	if !r.StoreMatches {
		t.StoreMismatches++
	}
}

// trialClients is a trial's client-go result without the failures' timestamps (the counts are
// the figure; the JSON stays readable).
func trialClients(r clients.Result) clients.Result {
	r.FailedAt, r.EtcdRefusedAt = nil, nil
	return r
}

type hardKillTrial struct {
	Victim           string  `json:"victim"`
	NewConnectionMS  float64 `json:"new_connection_ms"`
	KeptConnectionMS float64 `json:"kept_connection_ms"`
	// RebuildSeconds: the killed machine's replacement before the next trial (0 after the last).
	RebuildSeconds float64        `json:"rebuild_seconds,omitempty"`
	ClientGo       clients.Result `json:"client_go"`
	Error          string         `json:"error,omitempty"`
}

func newHardKillTrial(k realcp.HardKill, r clients.Result) hardKillTrial {
	return hardKillTrial{Victim: k.Victim, NewConnectionMS: ms(k.NewConnection), KeptConnectionMS: ms(k.KeptConnection), ClientGo: trialClients(r)}
}

type hardKillFigures struct {
	Trials int `json:"trials"`
	// NewConnectionMS: kill → first answer on a new connection through the VIP;
	// KeptConnectionMS: kill → client-go's first success on its kept HTTP/2 connection.
	NewConnectionMS  dist            `json:"new_connection_ms"`
	KeptConnectionMS dist            `json:"kept_connection_ms"`
	RebuildSeconds   dist            `json:"rebuild_seconds"`
	ClientGo         clientTotals    `json:"client_go"`
	Goal             string          `json:"goal"`
	GoalMet          bool            `json:"goal_met"`
	PerTrial         []hardKillTrial `json:"per_trial"`
}

// summarizeHardKill: trials that failed count in the client totals and fail the goal, not in
// the timings (they have none).
func summarizeHardKill(trials []hardKillTrial) *hardKillFigures {
	f := &hardKillFigures{PerTrial: trials, Goal: hardKillGoal}
	var fresh, kept, rebuild []float64
	failed := false
	for _, t := range trials {
		f.ClientGo.add(t.ClientGo)
		if t.Error != "" {
			failed = true
			continue
		}
		f.Trials++
		fresh, kept = append(fresh, t.NewConnectionMS), append(kept, t.KeptConnectionMS)
		if t.RebuildSeconds > 0 {
			rebuild = append(rebuild, t.RebuildSeconds)
		}
	}
	f.NewConnectionMS, f.KeptConnectionMS, f.RebuildSeconds = distOf(fresh), distOf(kept), distOf(rebuild)
	f.GoalMet = !failed && f.Trials > 0 && f.NewConnectionMS.P99 < newConnGoalMS && f.ClientGo.LeaderLosses == 0 && f.ClientGo.LostEvents == 0
	return f
}

type quorumLossTrial struct {
	realcp.QuorumLoss
	// WriteRecoverySeconds is from the etcd restart to the first client-go write (the clients'
	// writer, every 20 ms) that returned a success after it; -1: none did.
	WriteRecoverySeconds float64        `json:"write_recovery_seconds"`
	ClientGo             clients.Result `json:"client_go"`
	Error                string         `json:"error,omitempty"`
}

func newQuorumLossTrial(q realcp.QuorumLoss, r *clients.Run, res clients.Result) quorumLossTrial {
	t := quorumLossTrial{QuorumLoss: q, WriteRecoverySeconds: -1, ClientGo: trialClients(res)}
	if d := r.FirstWriteAfter(q.Restarted); !q.Restarted.IsZero() && d >= 0 {
		t.WriteRecoverySeconds = math.Round(d.Seconds()*100) / 100
	}
	return t
}

type quorumLossFigures struct {
	Trials          int  `json:"trials"`
	EtcdDownSeconds dist `json:"etcd_down_seconds"`
	// Loss: samples from the kill to the restart; Steady: once every agent saw its API server
	// fail; Return: from the restart until every API server was ready. Sums over the trials.
	Loss   realcp.HolderCounts `json:"loss"`
	Steady realcp.HolderCounts `json:"steady"`
	Return realcp.HolderCounts `json:"return"`
	// APIAnswered counts the trials in which an API server answered at the VIP during the loss
	// (kubeadm's super-admin.conf, as a recovery tool).
	APIAnswered          int          `json:"api_answered_trials"`
	WriteRecoverySeconds dist         `json:"write_recovery_seconds"`
	ClientGo             clientTotals `json:"client_go"`
	// LeaderLossesExpected: one per trial whose etcd was down longer than the renew deadline
	// (10 s): no Lease can be renewed without etcd. Not a failure of the VIP.
	LeaderLossesExpected int               `json:"leader_losses_expected"`
	Goal                 string            `json:"goal"`
	GoalMet              bool              `json:"goal_met"`
	PerTrial             []quorumLossTrial `json:"per_trial"`
}

func summarizeQuorumLoss(trials []quorumLossTrial, renewDeadline time.Duration) *quorumLossFigures {
	f := &quorumLossFigures{PerTrial: trials, Goal: quorumLossGoal}
	var down, recovery []float64
	failed := false
	for _, t := range trials {
		f.ClientGo.add(t.ClientGo)
		if t.Error != "" {
			failed = true
			continue
		}
		f.Trials++
		down = append(down, t.DownSeconds)
		if t.WriteRecoverySeconds >= 0 {
			recovery = append(recovery, t.WriteRecoverySeconds)
		}
		f.Loss, f.Steady, f.Return = f.Loss.Add(t.Loss), f.Steady.Add(t.Steady), f.Return.Add(t.Return)
		if t.APIAnswered {
			f.APIAnswered++
		}
		if t.DownSeconds > renewDeadline.Seconds() {
			f.LeaderLossesExpected++
		}
	}
	f.EtcdDownSeconds, f.WriteRecoverySeconds = distOf(down), distOf(recovery)
	f.GoalMet = !failed && f.Trials > 0 && f.Loss.NoOwner == 0 && f.Return.NoOwner == 0 && f.Steady.TwoOwners == 0 &&
		f.ClientGo.LostEvents == 0
	return f
}

func ms(d time.Duration) float64 { return math.Round(float64(d)/float64(time.Millisecond)*10) / 10 }

// missed names each fault whose goal was not met; the bench's exit status follows it.
func (e faultsEntry) missed() []string {
	var out []string
	if e.HardKill != nil && !e.HardKill.GoalMet {
		out = append(out, "hard_kill: "+e.HardKill.Goal)
	}
	if e.QuorumLoss != nil && !e.QuorumLoss.GoalMet {
		out = append(out, "quorum_loss: "+e.QuorumLoss.Goal)
	}
	return out
}
