package election

import (
	"net"
	"net/netip"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

// TestAnswersSilent: a member is silent after two probe intervals without an
// answer, and stays silent through one answer after that silence (a link up
// for a moment between two downs) until its answers span half a probe
// interval; a member never heard is not silent (nothing to miss).
func TestAnswersSilent(t *testing.T) {
	const probe = 100 * time.Millisecond
	t0 := time.Now()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	record := func(ms ...int) Answers {
		var a Answers
		for _, m := range ms {
			a = a.record(at(m), probe)
		}
		return a
	}
	for _, tc := range []struct {
		name    string
		answers Answers
		now     int
		silent  bool
	}{
		{"never heard", Answers{}, 1000, false},
		{"answering every round", record(0, 100, 200, 300), 350, false},
		{"one round missed", record(0, 100), 290, false},
		{"two rounds missed", record(0, 100), 300, true},
		{"one answer after a silence", record(0, 100, 350), 360, true},
		{"one answer after a silence, then silent again", record(0, 100, 350), 700, true},
		{"two answers in one moment after a silence", record(0, 100, 350, 351), 360, true},
		{"the next round answered too", record(0, 100, 350, 450), 460, false},
		{"first answers ever", record(500), 510, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			NewWithT(t).Expect(tc.answers.Silent(at(tc.now), probe)).To(Equal(tc.silent))
		})
	}
}

// TestAnswersUnreachable: a member is unreachable when its latest handshake
// failed after its last answer (or its answers only just resumed), or when
// it has answered nothing for FrozenAfter; a starved member, whose kernel
// completes handshakes while its process answers no ping, is not.
func TestAnswersUnreachable(t *testing.T) {
	const probe = 100 * time.Millisecond
	t0 := time.Now()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	for _, tc := range []struct {
		name        string
		answers     Answers
		now         int
		unreachable bool
		gone        bool
	}{
		{"never heard", Answers{Unanswered: at(100)}, 1000, false, false},
		{"answering pings", Answers{Last: at(300)}, 350, false, false},
		{"silent, no handshake tried yet", Answers{Last: at(0)}, 300, false, false},
		{"silent, the handshake failed: gone", Answers{Last: at(0), Unanswered: at(200)}, 300, true, true},
		{"silent, the handshake completed: starved", Answers{Last: at(0), Unanswered: at(100), Listening: at(200)}, 300, false, false},
		{"silent, handshakes completed, then one failed: gone", Answers{Last: at(0), Listening: at(100), Unanswered: at(200)}, 300, true, true},
		{"a handshake failed before the last answer", Answers{Last: at(200), Unanswered: at(100)}, 250, false, false},
		{"one answer after a failed handshake does not end it (a flap)", Answers{Last: at(350), Resumed: at(350), Unanswered: at(200)}, 360, true, true},
		{"answers resumed for two rounds", Answers{Last: at(450), Resumed: at(350), Unanswered: at(200)}, 460, false, false},
		{"starved, but frozen for FrozenAfter: gone", Answers{Last: at(0), Listening: at(2900)}, 3000, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			g.Expect(tc.answers.Unreachable(at(tc.now), probe)).To(Equal(tc.unreachable), "unreachable")
			g.Expect(tc.answers.Gone(at(tc.now), probe)).To(Equal(tc.gone), "gone")
		})
	}
}

// TestHandshakeNeedsOnlyTheKernel: the premise of Answers.Listening. A
// listening socket whose process never accepts (a starved agent) completes
// handshakes; a port nobody listens on (the agent died) refuses them.
func TestHandshakeNeedsOnlyTheKernel(t *testing.T) {
	g := NewWithT(t)
	m := &Membership{cfg: Config{ProbeInterval: 100 * time.Millisecond, ProbeTimeout: 50 * time.Millisecond, Label: "lb"}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	g.Expect(err).NotTo(HaveOccurred())
	addr := netip.MustParseAddrPort(ln.Addr().String())
	for range 3 {
		g.Expect(m.handshake(addr)).To(BeTrue(), "completed by the kernel, never accepted")
	}
	g.Expect(ln.Close()).To(Succeed())
	g.Expect(m.handshake(addr)).To(BeFalse(), "refused once the listener is gone")
}

// TestKernelVerdictIsDatedAtItsStart: a failed handshake counts from the
// moment it started, so that a ping answered while it was under way (the
// handshake runs beside the ping tries) stays the member's latest word; a
// completed one counts from its end.
func TestKernelVerdictIsDatedAtItsStart(t *testing.T) {
	g := NewWithT(t)
	m := &Membership{cfg: Config{ProbeInterval: 100 * time.Millisecond, ProbeTimeout: 50 * time.Millisecond}}
	g.Expect(m.handshakeTimeout()).To(Equal(100 * time.Millisecond))
	addr := fullListener(t)

	before := time.Now()
	g.Expect(m.askKernel("m2", addr)).To(BeTrue(), "the first handshake fills the accept queue")
	g.Expect(m.Answers("m2").Listening).To(BeTemporally(">=", before))

	// The queue is full: the kernel drops the next SYN, and the handshake
	// times out. A ping is answered 30 ms into it.
	started := time.Now()
	go func() {
		time.Sleep(30 * time.Millisecond)
		m.answers.record("m2", time.Now(), m.cfg.ProbeInterval)
	}()
	g.Expect(m.askKernel("m2", addr)).To(BeFalse(), "timed out")
	g.Expect(time.Since(started)).To(BeNumerically(">=", m.handshakeTimeout()))
	a := m.Answers("m2")
	g.Expect(a.Unanswered).To(BeTemporally("~", started, 10*time.Millisecond))
	g.Expect(a.Last).To(BeTemporally(">", a.Unanswered))
	g.Expect(a.Unreachable(time.Now(), m.cfg.ProbeInterval)).To(BeFalse(),
		"a ping answered after the handshake began: the member is not unreachable")
}

// fullListener listens on loopback with a backlog of 0 and never accepts, so
// that the one connection its queue holds fills it and the kernel drops
// later SYNs, as on a path that went.
func fullListener(t *testing.T) netip.AddrPort {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, 1}), uint16(sa.(*syscall.SockaddrInet4).Port))
}
