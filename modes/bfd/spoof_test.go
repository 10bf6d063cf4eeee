package bfd

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

// upPair is a (local discriminator 1) and b (2) after the three-way
// handshake at t0.
func upPair(g Gomega) (a, b *Session) {
	a, b = NewSession(fast, 1), NewSession(fast, 2)
	exchange(g, a, b, t0, 10)
	st, _ := a.State()
	g.Expect(st).To(Equal(Up))
	return a, b
}

// TestUpSessionIgnoresPacketsNotFromItsPeer: once up, only a packet that
// names both discriminators the handshake agreed on changes the session; a
// single spoofed packet from the router's address must not take a member's
// routes away.
func TestUpSessionIgnoresPacketsNotFromItsPeer(t *testing.T) {
	for _, tc := range []struct {
		name       string
		in         Control
		wantState  State
		wantRemote uint32
	}{
		{"admin down without your discriminator, a stranger's my discriminator",
			Control{State: AdminDown, DetectMult: 3, MyDisc: 0xdead, YourDisc: 0}, Up, 2},
		{"down without your discriminator, the peer's my discriminator",
			Control{State: Down, DetectMult: 3, MyDisc: 2, YourDisc: 0}, Up, 2},
		{"down with the wrong my discriminator",
			Control{State: Down, DetectMult: 3, MyDisc: 0xdead, YourDisc: 1}, Up, 2},
		{"down addressed to another session",
			Control{State: Down, DetectMult: 3, MyDisc: 2, YourDisc: 7}, Up, 2},
		{"a genuine admin down takes it down",
			Control{State: AdminDown, DetectMult: 3, MyDisc: 2, YourDisc: 1}, Down, 2},
		{"a genuine down takes it down",
			Control{State: Down, DetectMult: 3, MyDisc: 2, YourDisc: 1}, Down, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			a, _ := upPair(g)
			now := t0.Add(100 * time.Millisecond)
			a.Receive(tc.in, now)
			st, _ := a.State()
			g.Expect(st).To(Equal(tc.wantState))
			_, remote := a.Discriminators()
			g.Expect(remote).To(Equal(tc.wantRemote), "the peer's discriminator is kept")
			if tc.wantState == Up {
				g.Expect(a.lastRx).To(Equal(t0), "an ignored packet does not push the detection time back")
			}
		})
	}
}

// TestPollAnswersAreRateLimited: a Final answers a Poll at once, but not
// every Poll of a flood: each would be a packet sent to the router.
func TestPollAnswersAreRateLimited(t *testing.T) {
	g := NewWithT(t)
	a, _ := upPair(g)
	poll := Control{State: Up, Poll: true, DetectMult: 3, MyDisc: 2, YourDisc: 1,
		DesiredMinTx: 300 * time.Millisecond, RequiredMinRx: 300 * time.Millisecond}
	now := t0.Add(200 * time.Millisecond) // the handshake's Poll is older than the gap
	var finals []int
	// 100 Polls, 1 ms apart.
	for i := range 100 {
		at := now.Add(time.Duration(i) * time.Millisecond)
		a.Receive(poll, at)
		if p, _ := a.Tick(at, 1); p != nil && p.Final {
			finals = append(finals, i)
		}
	}
	g.Expect(finals).To(Equal([]int{0}), "the first Poll answered at once, then one Final per %v", fast.RequiredMinRx/2)

	// The peer repeats its Poll on its periodic packets: it gets its Final.
	later := now.Add(300 * time.Millisecond)
	a.Receive(poll, later)
	p, _ := a.Tick(later, 1)
	g.Expect(p).NotTo(BeNil())
	g.Expect(p.Final).To(BeTrue(), "a Poll at the peer's periodic rate is answered")
}
