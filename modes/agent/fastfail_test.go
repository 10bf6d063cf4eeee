package agent

import (
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/caplb/caplb/modes/election"
)

// answerML adds direct-ping answer times to fakeML: at holds each member's
// latest answer, resumed the first after a silence, unanswered its latest
// failed handshake and listening its latest completed one.
type answerML struct {
	*fakeML
	mu                    sync.Mutex
	at, resumed           map[string]time.Time
	unanswered, listening map[string]time.Time
}

func (f *answerML) Answers(name string) election.Answers {
	f.mu.Lock()
	defer f.mu.Unlock()
	return election.Answers{Last: f.at[name], Resumed: f.resumed[name], Unanswered: f.unanswered[name], Listening: f.listening[name]}
}

// newAnswerAgent is newTestAgent (members b, self, c) with direct-ping
// answers, and b gossiping that it holds the VIP.
func newAnswerAgent(t *testing.T) (*Agent, *fakeML, *answerML) {
	t.Helper()
	var am *answerML
	a, ml, _, _ := newTestAgent(t, 1, func(s *testSetup) {
		am = &answerML{fakeML: s.ml, at: map[string]time.Time{}, resumed: map[string]time.Time{},
			unanswered: map[string]time.Time{}, listening: map[string]time.Time{}}
		s.parts.ml = am
	})
	ml.set(0, true, election.Meta{Eligible: true, Holding: true})
	return a, ml, am
}

// TestSilentHolder: a holder silent to us alone is reported (Meta.Silent)
// but not dropped; once a majority reports it silent, the next member claims
// without waiting for gossip to declare the holder dead; a holder that
// answers again is not reported.
func TestSilentHolder(t *testing.T) {
	g := NewWithT(t)
	a, ml, am := newAnswerAgent(t) // members: b, self, c
	t0 := time.Now()
	am.at["b"], am.at["c"] = t0, t0.Add(550*time.Millisecond)
	am.unanswered["b"] = t0.Add(200 * time.Millisecond) // its listener is gone too
	step(a, t0)
	step(a, t0.Add(600*time.Millisecond)) // settled; b last answered 600 ms ago, c 50 ms ago
	g.Expect(ml.self.Silent).To(Equal("b"), "no answer from the holder for 600 ms")
	g.Expect(a.st.holding).To(BeFalse(), "only this member reports the holder silent")

	ml.set(1, true, election.Meta{Eligible: true, Silent: "b"}) // c agrees
	am.at["c"] = time.Time{}                                    // but we never heard from c
	step(a, t0.Add(620*time.Millisecond))
	g.Expect(ml.self.Silent).To(BeEmpty(), "not hearing the others either: this member may be the stalled one")
	g.Expect(a.st.holding).To(BeFalse())

	am.at["c"] = t0.Add(600 * time.Millisecond)
	step(a, t0.Add(650*time.Millisecond))
	g.Expect(ml.self.Silent).To(Equal("b"))
	g.Expect(a.st.holding).To(BeTrue(), "a majority reports the holder silent: claim")

	a2, ml2, am2 := newAnswerAgent(t)
	ml2.set(1, true, election.Meta{Eligible: true, Silent: "b"})
	now := time.Now()
	am2.at["b"], am2.at["c"] = now.Add(-150*time.Millisecond), now
	step(a2, now.Add(-600*time.Millisecond))
	step(a2, now)
	g.Expect(ml2.self.Silent).To(BeEmpty(), "the holder answered 150 ms ago")
	g.Expect(a2.st.holding).To(BeFalse())
}

// TestSilentHolderFlap: a holder whose link comes up for a moment between
// two downs answers one ping; that answer does not end its silence, so the
// majority's reports stand and the next member claims on the clock the
// first down started (before, the one answer reset every observer's clock:
// a whole detection more after the second down). A holder that is really
// back answers the next round too, and is no longer reported.
func TestSilentHolderFlap(t *testing.T) {
	g := NewWithT(t)
	a, ml, am := newAnswerAgent(t) // members: b, self, c
	t0 := time.Now()
	am.at["b"], am.at["c"] = t0, t0.Add(550*time.Millisecond)
	am.unanswered["b"] = t0.Add(300 * time.Millisecond) // the link is down: no handshake either
	step(a, t0)
	step(a, t0.Add(500*time.Millisecond)) // settled, b silent for 500 ms
	g.Expect(ml.self.Silent).To(Equal("b"))
	g.Expect(a.st.holding).To(BeFalse(), "only this member reports the holder silent so far")

	// b's link is up for a moment: one ping gets through, to us and to c.
	blip := t0.Add(560 * time.Millisecond)
	am.at["b"], am.resumed["b"] = blip, blip
	am.at["c"] = blip
	ml.set(1, true, election.Meta{Eligible: true, Silent: "b"}) // c still reports b
	step(a, blip.Add(5*time.Millisecond))
	g.Expect(ml.self.Silent).To(Equal("b"), "one answer after a silence does not end it")
	g.Expect(a.st.holding).To(BeTrue(), "a majority still reports the holder silent: claim")

	// A holder that is really back answers the next ping round too.
	a2, ml2, am2 := newAnswerAgent(t)
	ml2.set(1, true, election.Meta{Eligible: true, Silent: "b"})
	now := time.Now()
	am2.at["c"] = now
	am2.resumed["b"], am2.at["b"] = now.Add(-100*time.Millisecond), now
	step(a2, now.Add(-600*time.Millisecond))
	step(a2, now)
	g.Expect(ml2.self.Silent).To(BeEmpty(), "the holder answered two rounds since its silence")
	g.Expect(a2.st.holding).To(BeFalse())
}

// TestLinkDownReleases: an owner whose VIP interface goes down releases at
// once (no hand-over: nobody can be reached); back up, it stays ineligible
// for linkHoldDown.
func TestLinkDownReleases(t *testing.T) {
	g := NewWithT(t)
	link := &linkWatch{}
	a, ml, dp, _ := newTestAgent(t, 0, func(s *testSetup) { s.parts.link = link })
	t0 := claimAsMostPreferred(t, a, ml)
	t1 := t0.Add(700 * time.Millisecond)
	link.set(false, t1)
	step(a, t1)
	g.Expect(a.st.holding).To(BeFalse())
	g.Expect(dp.announce).To(BeFalse())
	g.Expect(a.st.lastReason).To(Equal("VIP interface down"))
	g.Expect(ml.self.Eligible).To(BeFalse())

	t2 := t1.Add(200 * time.Millisecond)
	link.set(true, t2)
	step(a, t2.Add(linkHoldDown/2))
	g.Expect(ml.self.Eligible).To(BeFalse(), "held down after the link came back")
	g.Expect(a.st.holding).To(BeFalse())
	step(a, t2.Add(linkHoldDown))
	g.Expect(ml.self.Eligible).To(BeTrue())
}

// TestStarvedHolderKept: a holder that answers no ping while its kernel
// still completes handshakes with its gossip listener is starved of CPU (a
// member booting beside it on the same cores), not gone: nobody reports it
// silent and nobody claims, even with a majority's reports or memberlist's
// verdict against it, until it has answered no ping for FrozenAfter.
func TestStarvedHolderKept(t *testing.T) {
	g := NewWithT(t)
	a, ml, am := newAnswerAgent(t) // members: b (holding), self, c
	t0 := time.Now()
	am.at["b"], am.at["c"] = t0, t0.Add(550*time.Millisecond)
	am.unanswered["b"] = t0.Add(200 * time.Millisecond)
	am.listening["b"] = t0.Add(450 * time.Millisecond) // the latest handshake completed
	ml.set(1, true, election.Meta{Eligible: true, Silent: "b"})
	step(a, t0)
	step(a, t0.Add(600*time.Millisecond))
	g.Expect(ml.self.Silent).To(BeEmpty(), "silent to pings, but its kernel answers: not reported")
	g.Expect(a.st.holding).To(BeFalse(), "no claim beside a starved holder")

	// Memberlist declares it dead: gossip no longer shows it, only as the last holder.
	ml.set(0, false, election.Meta{})
	ml.lastHolder = "b"
	step(a, t0.Add(700*time.Millisecond))
	g.Expect(a.st.holding).To(BeFalse(), "gossip's verdict alone does not take the VIP from a holder whose kernel answers")
	g.Expect(a.st.waitingReason).To(ContainSubstring("starved of CPU, not gone"))

	// Its listener is gone now (the process died): claim.
	am.unanswered["b"] = t0.Add(750 * time.Millisecond)
	step(a, t0.Add(800*time.Millisecond))
	g.Expect(a.st.holding).To(BeTrue(), "a failed handshake after the last completed one: gone")

	// A frozen process (its kernel still answers) loses the VIP after FrozenAfter.
	a2, ml2, am2 := newAnswerAgent(t)
	ml2.set(0, false, election.Meta{})
	ml2.lastHolder = "b"
	now := time.Now()
	am2.at["c"] = now
	am2.listening["b"] = now
	am2.at["b"] = now.Add(-election.FrozenAfter(100*time.Millisecond) / 2)
	step(a2, now.Add(-600*time.Millisecond))
	step(a2, now)
	g.Expect(a2.st.holding).To(BeFalse(), "not answering pings for a while yet")
	am2.at["b"] = now.Add(-election.FrozenAfter(100 * time.Millisecond))
	step(a2, now.Add(10*time.Millisecond))
	g.Expect(a2.st.holding).To(BeTrue(), "no ping answered for FrozenAfter: taken over")
}
