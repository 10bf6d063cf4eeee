package agent

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/caplb/caplb/modes/election"
)

// withBusyDrain: quiesce.drain 500 ms, then quiesce.busyDrain 10 s.
func withBusyDrain(s *testSetup) {
	s.cfg.Quiesce.Drain.Duration, s.cfg.Quiesce.BusyDrain.Duration = 500*time.Millisecond, 10*time.Second
}

// TestLoopTwoKindsOfIOInOneTurn: a draining holder with quiesce.busyDrain
// whose majority contact lapses needs a direct-ping round and the busy
// connections in the same turn. The turn must apply what the last step
// decides: a panic there would end the agent, and with it the connections
// busyDrain was keeping.
func TestLoopTwoKindsOfIOInOneTurn(t *testing.T) {
	g := NewWithT(t)
	a, ml, dp, _ := newTestAgent(t, 0, withBusyDrain)
	t0 := claimAsMostPreferred(t, a, ml)
	ml.contact = t0.Add(900 * time.Millisecond)
	quiesce(a, t0.Add(time.Second), quiesceRequest{source: "admin", reason: "admin request"})
	ml.set(0, true, election.Meta{Eligible: true, Holding: true}) // b took over
	dp.busy = 2
	step(a, t0.Add(1100*time.Millisecond))
	g.Expect(a.Status().Waiting).To(ContainSubstring("draining: b announces the VIPs"))

	// Past the drain, and contact is 700 ms old (contactTimeout 500 ms):
	// the step asks for a ping round, then for the busy connections.
	before := ml.confirms
	g.Expect(func() { step(a, t0.Add(1700*time.Millisecond)) }).NotTo(Panic())
	g.Expect(ml.confirms).To(Equal(before+1), "one direct-ping round")
	g.Expect(a.st.holding).To(BeTrue(), "busy connections keep the VIP: %+v", a.Status())
	g.Expect(a.Status().Waiting).To(ContainSubstring("2 connection(s) here still carry requests"), "the last step's decision is applied")
	g.Expect(dp.announce).To(BeTrue())
	g.Expect(dp.quiet).To(BeTrue())

	// The connections moved: the next such turn releases.
	dp.busy = 0
	g.Expect(func() { step(a, t0.Add(1800*time.Millisecond)) }).NotTo(Panic())
	g.Expect(a.st.holding).To(BeFalse())
	g.Expect(dp.announce).To(BeFalse())
	g.Expect(a.Status().LastTransition.Reason).To(ContainSubstring("handed over to b"))
}

// scriptedStep is a step that asks for the I/O kinds of its script in
// order, one per call, then decides (holding); it records what it was given.
type scriptedStep struct {
	script []need
	calls  int
}

func (s *scriptedStep) step(in inputs) (loopState, output) {
	s.calls++
	var out output
	if s.calls <= len(s.script) {
		switch s.script[s.calls-1] {
		case needConfirmation:
			out.needConfirmation = true
		case needProbe:
			out.needProbe = true
		case needBusy:
			out.needBusy = true
		}
		return loopState{}, out
	}
	out.sync = in.busy != nil && in.confirmation != nil
	return loopState{holding: true}, out
}

// TestTurn: a turn does every kind of I/O its step asks for, in the step's
// order, each at most once, and ends with the last step's output; a step
// that asks again for a kind it was given (a bug) ends the turn, reported,
// instead of looping or panicking.
func TestTurn(t *testing.T) {
	for _, tc := range []struct {
		name     string
		script   []need
		done     []need
		repeated need
		decided  bool
	}{
		{name: "busy, then confirmation", script: []need{needBusy, needConfirmation},
			done: []need{needBusy, needConfirmation}, decided: true},
		{name: "every kind", script: []need{needProbe, needConfirmation, needBusy},
			done: []need{needProbe, needConfirmation, needBusy}, decided: true},
		{name: "busy asked twice: applied as it is", script: []need{needBusy, needConfirmation, needBusy},
			done: []need{needBusy, needConfirmation}, repeated: needBusy},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			s := &scriptedStep{script: tc.script}
			var done []need
			var in inputs
			g.Expect(func() {
				_, next, out, repeated := turn(in, s.step, func(n need, _ output, in *inputs) {
					done = append(done, n)
					one := 1
					switch n {
					case needConfirmation:
						in.confirmation = &confirmation{reached: 2, needed: 2}
					case needProbe:
						in.probe = &probeOutcome{}
					case needBusy:
						in.busy = &one
					}
				})
				g.Expect(done).To(Equal(tc.done))
				g.Expect(repeated).To(Equal(tc.repeated))
				g.Expect(next.holding).To(Equal(tc.decided), "the last step's state")
				g.Expect(out.sync).To(Equal(tc.decided), "the last step saw every answer")
				g.Expect(s.calls).To(Equal(len(tc.done)+1), "one step per kind, plus one")
			}).NotTo(Panic())
		})
	}
}
