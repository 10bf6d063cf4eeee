//go:build linux

package lifecycle

import (
	"fmt"
	"slices"
	"time"

	"github.com/caplb/caplb/e2e/lifecycle/observe"
	"github.com/caplb/caplb/e2e/lifecycle/observe/clients"
)

// TakeOverFigures are what a kube-vip takeover is judged by (make bench-takeover's JSON).
type TakeOverFigures struct {
	// DuplicateAnswerIntervals counts the runs of holder samples (every 10 ms, the kernels'
	// addresses: a kernel with the VIP answers ARP for it) in which a kube-vip machine and
	// another machine held the VIP at once; DuplicateMSMax is the longest.
	DuplicateAnswerIntervals int     `json:"duplicate_answer_intervals"`
	DuplicateMSMax           float64 `json:"duplicate_ms_max"`
	// GapMS is the longest time no machine held the VIP (the hand-over: kube-vip dropped it,
	// caplb's member waited for silence and claimed).
	GapMS float64 `json:"gap_ms"`
	// MaxGapMS is the prober's longest stretch without a successful request.
	MaxGapMS float64 `json:"max_gap_ms"`
	// FailedRequests are the prober's (new and kept-alive connections); FailedNewConnections
	// those on a new connection; FailedOutsideHandOver every prober request or client-go write
	// that failed outside the hand-over (TakeOverGoals).
	FailedRequests        int `json:"failed_requests"`
	FailedNewConnections  int `json:"failed_new_connections"`
	FailedOutsideHandOver int `json:"failed_outside_hand_over"`
	FailedWrites          int `json:"failed_writes"`
	EtcdRefusals          int `json:"etcd_refusals"`
	LeaderLosses          int `json:"leader_losses"`
	LostEvents            int `json:"informer_lost_events"`
	// Missed are the goals the run missed (TakeOverGoals); none: all met.
	Missed []string `json:"-"`
}

// WindowAfterHandOver is how long after caplb first held the VIP alone a request that fails may
// still have begun and belong to the hand-over: sent while kube-vip dropped the VIP, it is
// reset once its retransmission reaches caplb's node, or times out.
const WindowAfterHandOver = 3 * time.Second

// TakeOverGoals computes a takeover run's figures and the goals it missed. Guarded: the
// hand-over happened; no duplicate answer; the VIP silent for under 1 s; no leader loss, no
// lost event; nothing failed outside the hand-over (from the fence to WindowAfterHandOver after
// caplb held the VIP alone) — kube-vip drops the VIP without a drain, so a request in flight
// then may fail (docs/migrate-from-kube-vip.md) — and of client-go's writes at most the one in
// flight. The control (Unguarded) must show the duplicates the guard prevents, or the guarded
// zero proves nothing.
func TakeOverGoals(obs Observed, s *TakeOverScenario) TakeOverFigures {
	f := takeOverFigures(obs, s.KubeVIPMachines)
	miss := func(format string, a ...any) { f.Missed = append(f.Missed, fmt.Sprintf(format, a...)) }
	if s.Unguarded {
		if f.DuplicateAnswerIntervals == 0 {
			miss("the control (no takeOver) showed no duplicate answer: the lab cannot tell the guard works")
		}
		return f
	}
	if s.HandOver.IsZero() {
		miss("caplb never held the VIP alone")
	}
	if f.DuplicateAnswerIntervals > 0 {
		miss("%d intervals with kube-vip and another machine holding the VIP (longest %.0f ms; want 0)", f.DuplicateAnswerIntervals, f.DuplicateMSMax)
	}
	if f.GapMS >= 1000 {
		miss("the VIP had no holder for %.0f ms (want < 1000)", f.GapMS)
	}
	if f.LeaderLosses > 0 {
		miss("the leader-elected loop lost its Lease %d time(s) (want 0)", f.LeaderLosses)
	}
	if f.LostEvents > 0 {
		miss("%d informer events lost (want 0)", f.LostEvents)
	}
	if f.FailedWrites > 1 {
		miss("%d client-go writes failed (want at most the one in flight at the hand-over)", f.FailedWrites)
	}
	// A request belongs to the hand-over when it was in flight then: it began no later than
	// WindowAfterHandOver after caplb held the VIP alone and ended after the fence (a reset
	// ends it at once, a timeout seconds later).
	inHandOver := func(began, ended time.Time) bool {
		return !s.HandOver.IsZero() && !ended.Before(s.Fenced) && !began.After(s.HandOver.Add(WindowAfterHandOver))
	}
	var first string
	note := func(began, ended time.Time, what string) {
		if !inHandOver(began, ended) {
			f.FailedOutsideHandOver++
			if first == "" {
				first = fmt.Sprintf("%s, ended %s", what, ended.Format("15:04:05.000"))
			}
		}
	}
	for _, x := range obs.Failures {
		if !x.Interrupted {
			note(x.At, x.At.Add(x.Latency), fmt.Sprintf("%s request: %s", x.Kind, x.Err))
		}
	}
	if c := obs.Clients; c == nil {
		miss("client-go never ran through the VIP")
	} else {
		for _, at := range c.FailedAt {
			// The writer records when a write returned; it began at most its timeout before.
			note(at.Add(-clients.WriteTimeout), at, "write: "+c.FirstFailure)
		}
	}
	if f.FailedOutsideHandOver > 0 {
		miss("%d requests failed outside the hand-over (fence %s, caplb alone %s; want 0), first %s", f.FailedOutsideHandOver,
			s.Fenced.Format("15:04:05.000"), s.HandOver.Format("15:04:05.000"), first)
	}
	return f
}

// takeOverFigures computes the figures of a takeover run; kubeVIP names the machines that ran
// kube-vip.
func takeOverFigures(obs Observed, kubeVIP []string) TakeOverFigures {
	f := TakeOverFigures{MaxGapMS: obs.Result.MaxGapMS, FailedRequests: obs.Result.FailedRequests}
	if h := obs.Result.HolderLessMSMax; h != nil {
		f.GapMS = *h
	}
	if c := obs.Clients; c != nil {
		f.FailedWrites, f.EtcdRefusals, f.LeaderLosses, f.LostEvents = c.FailedWrites, c.EtcdRefusals, c.LeaderLosses, c.LostEvents
	}
	f.DuplicateAnswerIntervals, f.DuplicateMSMax = duplicateRuns(obs.Input.Timeline.Holders, kubeVIP)
	for _, s := range obs.Failures {
		if !s.Interrupted && s.Kind == observe.Fresh {
			f.FailedNewConnections++
		}
	}
	return f
}

// duplicateRuns counts the runs of samples in which a kube-vip machine held the VIP beside
// another machine, and the longest (from its first sample to the first sample after it).
func duplicateRuns(samples []observe.HolderSample, kubeVIP []string) (runs int, maxMS float64) {
	dup := func(s observe.HolderSample) bool {
		if s.Err != "" || len(s.Holders) < 2 {
			return false
		}
		return slices.ContainsFunc(s.Holders, func(h string) bool { return slices.Contains(kubeVIP, h) })
	}
	for i := 0; i < len(samples); i++ {
		if !dup(samples[i]) {
			continue
		}
		j := i
		for j < len(samples) && dup(samples[j]) {
			j++
		}
		runs++
		end := samples[len(samples)-1].At
		if j < len(samples) {
			end = samples[j].At
		}
		maxMS = max(maxMS, float64(end.Sub(samples[i].At).Microseconds())/1000)
		i = j
	}
	return runs, maxMS
}
