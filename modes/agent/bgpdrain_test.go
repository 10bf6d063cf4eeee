package agent

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"

	agentv1 "github.com/caplb/caplb/api/agent/v1alpha1"
)

func bgpBusyDrain(c *agentv1.AgentConfiguration) {
	c.Mode = agentv1.ModeBGP
	c.Quiesce.Drain.Duration, c.Quiesce.BusyDrain.Duration = 5*time.Second, 10*time.Second
}

// withdrawnFor is a BGP member that withdrew for a quiesce d ago.
func withdrawnFor(d time.Duration) loopState {
	st := loopState{quiescing: true, quiesceSince: t0.Add(-d), releasedAt: t0.Add(-d),
		quiesceBy: map[string]string{"machine": "pre-drain hook"}}
	return st
}

// TestStepBGPBusyDrain: a withdrawn BGP member counts its busy connections from the withdrawal
// until drain + busyDrain, and not otherwise.
func TestStepBGPBusyDrain(t *testing.T) {
	healthy := inputs{now: t0, healthy: true, linkUp: true}
	busy := func(n int) inputs { in := healthy; in.busy = &n; return in }
	runStepCases(t, []stepCase{
		{name: "withdrawn, within drain + busyDrain: asks for the count",
			tweak: bgpBusyDrain, st: withdrawnFor(time.Second), in: healthy, needBusy: true},
		{name: "with the count: stays withdrawn",
			tweak: bgpBusyDrain, st: withdrawnFor(6 * time.Second), in: busy(2)},
		{name: "after drain + busyDrain: does not ask",
			tweak: bgpBusyDrain, st: withdrawnFor(16 * time.Second), in: healthy},
		{name: "busyDrain off: does not ask",
			tweak: func(c *agentv1.AgentConfiguration) {
				c.Mode = agentv1.ModeBGP
				c.Quiesce.Drain.Duration = 5 * time.Second
			},
			st: withdrawnFor(time.Second), in: healthy},
		{name: "ARP mode is the holder's drain, not this",
			tweak: func(c *agentv1.AgentConfiguration) { c.Quiesce.BusyDrain.Duration = 10 * time.Second },
			st:    withdrawnFor(time.Second), in: healthy},
	})
}

// TestReportBGPBusyDrain: the withdrawn member reports quiesced — and so lets KCP remove its
// etcd member and its machine — only once no connection here carries requests, or busyDrain ran
// out.
func TestReportBGPBusyDrain(t *testing.T) {
	n := func(v int) *int { return &v }
	cases := []struct {
		name   string
		tweak  func(*agentv1.AgentConfiguration)
		st     loopState
		busy   *int
		want   bool
		reason string
	}{
		{"within the drain", bgpBusyDrain, withdrawnFor(time.Second), n(0), false, "; draining"},
		{"after the drain, busy connections", bgpBusyDrain, withdrawnFor(6 * time.Second), n(2), false,
			"; 2 connection(s) here still carry requests"},
		{"after the drain, none busy", bgpBusyDrain, withdrawnFor(6 * time.Second), n(0), true, "quiesced"},
		{"busyDrain ran out", bgpBusyDrain, withdrawnFor(16 * time.Second), nil, true, "quiesced"},
		{"busyDrain off", func(c *agentv1.AgentConfiguration) {
			c.Mode = agentv1.ModeBGP
			c.Quiesce.Drain.Duration = 5 * time.Second
		},
			withdrawnFor(6 * time.Second), nil, true, "quiesced"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			in := inputs{now: t0, healthy: true, busy: tc.busy}
			rep := stepRules(t, tc.tweak).report(tc.st, in)
			g.Expect(rep.Quiesced).To(Equal(tc.want), rep.Reason)
			g.Expect(rep.Reason).To(ContainSubstring(tc.reason))
		})
	}
}
