package agent

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"

	agentv1 "github.com/caplb/caplb/api/agent/v1alpha1"

	"github.com/caplb/caplb/modes/election"
)

// ioAnswers are the canned outcomes of a turn's I/O.
type ioAnswers struct {
	reached int // of 2 needed, in a direct-ping round
	probe   probeOutcome
	busy    int
}

// driveTurn runs one turn of the pure step with canned I/O and returns the
// kinds of I/O it asked for, in order.
func driveTurn(r rules, st loopState, in inputs, ans ioAnswers) ([]need, loopState, output, need) {
	var asked []need
	_, next, out, repeated := turn(in, func(in inputs) (loopState, output) { return r.step(st, in) },
		func(n need, _ output, in *inputs) {
			asked = append(asked, n)
			switch n {
			case needConfirmation:
				in.confirmation = &confirmation{reached: ans.reached, needed: 2}
			case needProbe:
				p := ans.probe
				in.probe = &p
			case needBusy:
				b := ans.busy
				in.busy = &b
			}
		})
	return asked, next, out, repeated
}

// TestStepIOKinds: the I/O each situation needs in one turn, pairs
// included. Pairs with the bootstrap probe cannot happen (a bootstrap node
// neither confirms contact nor drains): the cases with both situations'
// inputs show it.
func TestStepIOKinds(t *testing.T) {
	busyDrain := func(c *agentv1.AgentConfiguration) {
		c.Quiesce.Drain.Duration, c.Quiesce.BusyDrain.Duration = 5*time.Second, 10*time.Second
	}
	bootstrapProbe := func(c *agentv1.AgentConfiguration) {
		busyDrain(c)
		c.Membership.Dynamic = true
	}
	// A holder quiescing, its successor announcing for 6 s (past the drain),
	// with majority contact 600 ms old (past contactTimeout).
	draining := with2(owner(), func(s *loopState) {
		s.quiescing, s.handingOver, s.successor, s.successorAt = true, true, "b", t0.Add(-6*time.Second)
	})
	lapsed := with(moment(t0, self, peer("b", true, holdingPeer), peer("c", true, eligiblePeer)),
		func(in *inputs) { in.confirmedAt = t0.Add(-600 * time.Millisecond) })
	// A takeover: self elected, nobody of the membership holds or held the VIP.
	silent := func(c *agentv1.AgentConfiguration) { c.ARP.ClaimWhenSilent = true }
	unheld := moment(t0, self, peer("b", true, eligiblePeer), peer("c", true, eligiblePeer))
	bootstrap := inputs{now: t0, healthy: true, linkUp: true, election: true, view: election.View{Self: "self"},
		confirmedAt: t0.Add(-600 * time.Millisecond)}
	for _, tc := range []struct {
		name    string
		tweak   func(*agentv1.AgentConfiguration)
		probe   bool
		st      loopState
		in      inputs
		ans     ioAnswers
		asked   []need
		holding bool
		reason  string
	}{
		{name: "confirmation, then busy: a draining holder whose contact lapsed, a majority answers",
			tweak: busyDrain, st: draining, in: lapsed, ans: ioAnswers{reached: 2, busy: 2},
			asked: []need{needConfirmation, needBusy}, holding: true, reason: "2 connection(s) here still carry requests"},
		{name: "confirmation, then busy, none busy: released",
			tweak: busyDrain, st: draining, in: lapsed, ans: ioAnswers{reached: 2},
			asked: []need{needConfirmation, needBusy}, reason: "handed over to b"},
		{name: "confirmation only: no majority answers, released without counting",
			tweak: busyDrain, st: draining, in: lapsed, ans: ioAnswers{reached: 1, busy: 2},
			asked: []need{needConfirmation}, reason: "no direct answer from a majority"},
		{name: "busy only: contact fresh",
			tweak: busyDrain, st: draining, in: moment(t0, self, peer("b", true, holdingPeer)), ans: ioAnswers{busy: 2},
			asked: []need{needBusy}, holding: true, reason: "still carry requests"},
		{name: "busy only: a withdrawn BGP member",
			tweak: bgpBusyDrain, st: withdrawnFor(6 * time.Second), in: inputs{now: t0, healthy: true, linkUp: true},
			asked: []need{needBusy}},
		{name: "probe only: a bootstrap node with contact lapsed and busyDrain set",
			tweak: bootstrapProbe, probe: true, st: loopState{}, in: bootstrap,
			asked: []need{needProbe}, holding: true, reason: "nobody answers for the VIP"},
		{name: "takeover: a probe first; another host answers: withheld",
			tweak: silent, probe: true, st: settled(), in: unheld, ans: ioAnswers{reached: 2, probe: probeOutcome{res: probeResult{answered: true}}},
			asked: []need{needProbe}, reason: "another host answers ARP for the VIP"},
		{name: "takeover: the VIP silent: probe, then the direct-ping round, then the claim",
			tweak: silent, probe: true, st: settled(), in: unheld, ans: ioAnswers{reached: 2},
			asked: []need{needProbe, needConfirmation}, holding: true},
		{name: "takeover: a probing competitor: withheld",
			tweak: silent, probe: true, st: settled(), in: unheld, ans: ioAnswers{reached: 2, probe: probeOutcome{res: probeResult{competing: true}}},
			asked: []need{needProbe}, reason: "another host probes for the VIP"},
		{name: "takeover: no prober wired: never claims",
			tweak: silent, st: settled(), in: unheld, ans: ioAnswers{reached: 2},
			reason: "no ARP prober runs here"},
		{name: "takeover done: a member held the VIP (it answers ARP while it drains): no probe",
			tweak: silent, probe: true, st: settled(), in: with(unheld, func(in *inputs) { in.view.LastHolder = "b" }),
			ans:   ioAnswers{reached: 2, probe: probeOutcome{res: probeResult{answered: true}}},
			asked: []need{needConfirmation}, holding: true},
		{name: "takeover: the fail-open claim probes too",
			tweak: silent, probe: true, st: settled(),
			in:    with(moment(t0, self, peer("b", true, downPeer), peer("c", true, downPeer)), func(in *inputs) { in.healthy = false }),
			ans:   ioAnswers{reached: 2, probe: probeOutcome{res: probeResult{answered: true}}},
			asked: []need{needProbe}, reason: "fail-open claim withheld: another host answers ARP"},
		{name: "nothing: a bootstrap node quiescing with busyDrain set",
			tweak: bootstrapProbe, probe: true, st: loopState{quiescing: true, quiesceBy: map[string]string{"admin": "x"}}, in: bootstrap,
			reason: "not eligible: quiescing"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			r := stepRules(t, tc.tweak)
			r.probeBootstrap = tc.probe && r.cfg.Membership.Dynamic
			r.canProbe = tc.probe
			asked, st, out, repeated := driveTurn(r, tc.st, tc.in, tc.ans)
			g.Expect(asked).To(Equal(tc.asked))
			g.Expect(repeated).To(Equal(needNothing), "no kind asked for twice")
			g.Expect(out.need()).To(Equal(needNothing), "the turn ends decided")
			g.Expect(st.holding).To(Equal(tc.holding), "waiting: %q, last: %q", st.waitingReason, st.lastReason)
			g.Expect(out.desired.Announce).To(Equal(tc.holding))
			if tc.reason != "" {
				g.Expect(st.waitingReason + " | " + st.lastReason).To(ContainSubstring(tc.reason))
			}
		})
	}
}
