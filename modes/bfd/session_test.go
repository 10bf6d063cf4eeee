package bfd

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

var t0 = time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)

var fast = Params{DesiredMinTx: 300 * time.Millisecond, RequiredMinRx: 300 * time.Millisecond, DetectMult: 3}

// exchange delivers what a sends now to b, and the reverse, until neither
// has anything due (at most n rounds).
func exchange(g Gomega, a, b *Session, now time.Time, n int) {
	for range n {
		pa, _ := a.Tick(now, 1)
		pb, _ := b.Tick(now, 1)
		if pa == nil && pb == nil {
			return
		}
		if pa != nil {
			c, err := Parse(pa.Marshal())
			g.Expect(err).NotTo(HaveOccurred())
			b.Receive(c, now)
		}
		if pb != nil {
			c, err := Parse(pb.Marshal())
			g.Expect(err).NotTo(HaveOccurred())
			a.Receive(c, now)
		}
	}
}

func TestThreeWayHandshakeAndDetection(t *testing.T) {
	g := NewWithT(t)
	a, b := NewSession(fast, 1), NewSession(fast, 2)
	exchange(g, a, b, t0, 10)
	sa, _ := a.State()
	sb, _ := b.State()
	g.Expect(sa).To(Equal(Up))
	g.Expect(sb).To(Equal(Up))
	g.Expect(a.DetectionTime()).To(Equal(900 * time.Millisecond))

	// Up: packets every 300 ms (jitter 1), no longer the slow second.
	p, _ := a.Tick(t0.Add(300*time.Millisecond), 1)
	g.Expect(p).NotTo(BeNil())
	g.Expect(p.DesiredMinTx).To(Equal(300 * time.Millisecond))

	// b stops sending: a is down once the detection time passed.
	_, changed := a.Tick(t0.Add(899*time.Millisecond), 1)
	g.Expect(changed).To(BeFalse())
	g.Expect(a.Next()).To(BeTemporally("<=", t0.Add(901*time.Millisecond)))
	_, changed = a.Tick(t0.Add(901*time.Millisecond), 1)
	g.Expect(changed).To(BeTrue())
	st, diag := a.State()
	g.Expect(st).To(Equal(Down))
	g.Expect(diag).To(Equal(DiagDetectionExpired))
	_, remote := a.Discriminators()
	g.Expect(remote).To(BeZero(), "the peer's discriminator is forgotten")
}

func TestSlowWhileNotUp(t *testing.T) {
	g := NewWithT(t)
	a := NewSession(fast, 1)
	p, _ := a.Tick(t0, 1)
	g.Expect(p).NotTo(BeNil())
	g.Expect(p.State).To(Equal(Down))
	g.Expect(p.DesiredMinTx).To(Equal(time.Second), "at least one second while not up (RFC 5880 6.8.3)")
	p, _ = a.Tick(t0.Add(999*time.Millisecond), 1)
	g.Expect(p).To(BeNil())
	p, _ = a.Tick(t0.Add(time.Second), 1)
	g.Expect(p).NotTo(BeNil())
}

func TestPeerSignalsDownAndPoll(t *testing.T) {
	for _, tc := range []struct {
		name      string
		in        Control
		wantState State
		wantDiag  Diag
		wantFinal bool
	}{
		{"the peer says down", Control{State: Down, DetectMult: 3, MyDisc: 2, YourDisc: 1, RequiredMinRx: time.Second}, Down, DiagNeighborDown, false},
		{"the peer says admin down", Control{State: AdminDown, DetectMult: 3, MyDisc: 2, YourDisc: 1, RequiredMinRx: time.Second}, Down, DiagNeighborDown, false},
		{"the peer polls: final at once", Control{State: Up, Poll: true, DetectMult: 3, MyDisc: 2, YourDisc: 1,
			DesiredMinTx: 300 * time.Millisecond, RequiredMinRx: 300 * time.Millisecond}, Up, DiagNone, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			a, b := NewSession(fast, 1), NewSession(fast, 2)
			exchange(g, a, b, t0, 10)
			// Past the handshake's Poll by more than the gap between
			// answered Polls.
			now := t0.Add(200 * time.Millisecond)
			a.Receive(tc.in, now)
			st, diag := a.State()
			g.Expect(st).To(Equal(tc.wantState))
			g.Expect(diag).To(Equal(tc.wantDiag))
			p, _ := a.Tick(now, 1)
			g.Expect(p).NotTo(BeNil(), "answered at once")
			g.Expect(p.Final).To(Equal(tc.wantFinal))
			g.Expect(p.Poll && p.Final).To(BeFalse(), "never P and F together")
		})
	}
}

func TestParse(t *testing.T) {
	good := Control{State: Up, DetectMult: 3, MyDisc: 7, YourDisc: 9, DesiredMinTx: 300 * time.Millisecond, RequiredMinRx: 250 * time.Millisecond, Final: true}
	g := NewWithT(t)
	c, err := Parse(good.Marshal())
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(c).To(Equal(good))
	for _, tc := range []struct {
		name   string
		mangle func([]byte) []byte
		want   string
	}{
		{"short", func(b []byte) []byte { return b[:20] }, "20 bytes"},
		{"version 0", func(b []byte) []byte { b[0] &= 0x1f; return b }, "version 0"},
		{"authentication", func(b []byte) []byte { b[1] |= 0x04; return b }, "authentication"},
		{"multipoint", func(b []byte) []byte { b[1] |= 0x01; return b }, "multipoint"},
		{"detect multiplier 0", func(b []byte) []byte { b[2] = 0; return b }, "detect multiplier 0"},
		{"no discriminator", func(b []byte) []byte { b[4], b[5], b[6], b[7] = 0, 0, 0, 0; return b }, "my discriminator 0"},
		{"up without your discriminator", func(b []byte) []byte { b[8], b[9], b[10], b[11] = 0, 0, 0, 0; return b }, "your discriminator 0"},
		{"length beyond the packet", func(b []byte) []byte { b[3] = 48; return b }, "length 48"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse(tc.mangle(good.Marshal()))
			NewWithT(t).Expect(err).To(MatchError(ContainSubstring(tc.want)))
		})
	}
}
