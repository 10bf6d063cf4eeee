package wireguard

import (
	"bytes"
	"io"
	"net"
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

// warmOf is the number of warm connections the gateway holds to node.
func (l *loopLab) warmOf(node string) int {
	n := 0
	for _, m := range l.gw.Status().Members {
		if m.Node == node {
			n += m.Warm
		}
	}
	return n
}

func TestLoopbackWarmConnectionsServeClientsAndLeaveWithTheMember(t *testing.T) {
	g := NewWithT(t)
	l := startLoopLab(t)
	l.startMember(t, "m1", l.startStandin(t, "m1"))
	g.Eventually(func() bool { return l.healthy("m1") }, 15*time.Second, 20*time.Millisecond).Should(BeTrue())

	// Idle: nothing dialled ahead. A client connection fills the pool behind it.
	g.Expect(l.warmOf("m1")).To(Equal(0))
	g.Expect(l.get()).To(Equal("m1"))
	g.Eventually(func() int { return l.warmOf("m1") }, 5*time.Second, 10*time.Millisecond).Should(Equal(2))
	for range 20 {
		g.Expect(l.get()).To(Equal("m1"))
	}
	g.Expect(l.warmOf("m1")).To(BeNumerically("<=", 2))

	// Quiesced: its warm connections are closed and none is dialled again.
	g.Expect(l.gw.Quiesce("m1", true)).To(BeTrue())
	g.Eventually(func() int { return l.warmOf("m1") }, 5*time.Second, 10*time.Millisecond).Should(Equal(0))
	_, err := l.get()
	g.Expect(err).To(HaveOccurred()) // no eligible member: the client connection is closed
	g.Consistently(func() int { return l.warmOf("m1") }, 300*time.Millisecond).Should(Equal(0))

	// Back in rotation: clients refill it; unused, the pool empties after warmMaxAge.
	g.Expect(l.gw.Quiesce("m1", false)).To(BeTrue())
	g.Expect(l.get()).To(Equal("m1"))
	g.Eventually(func() int { return l.warmOf("m1") }, 5*time.Second, 10*time.Millisecond).Should(Equal(2))
	g.Eventually(func() int { return l.warmOf("m1") }, warmMaxAge+3*time.Second, 50*time.Millisecond).Should(Equal(0))
}

// silentServer accepts connections and reads what they send without ever answering (a member
// that died after its warm connection was dialled), or closes them at once (closeAtOnce: a
// member whose API server went away).
func silentServer(t *testing.T, closeAtOnce bool) (addr string, got chan []byte) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	got = make(chan []byte, 16)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			if closeAtOnce {
				_ = c.Close()
				continue
			}
			go func() {
				defer c.Close()
				b := make([]byte, 4096)
				if n, _ := io.ReadAtLeast(c, b, 1); n > 0 {
					got <- b[:n]
				}
				_, _ = io.Copy(io.Discard, c)
			}()
		}
	}()
	return ln.Addr().String(), got
}

// plantWarm replaces every member's warm connections with one connection to addr and stops
// refills, so the next client connection takes it.
func (l *loopLab) plantWarm(t *testing.T, addr string) {
	t.Helper()
	p := l.gw.pool
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, b := range p.backends {
		for _, w := range b.warm {
			_ = w.c.Close()
		}
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		b.warm = []warmConn{{c: c, born: time.Now()}}
		b.warmDialing = 1 << 20 // a refill is "under way": none is started
	}
}

func TestLoopbackWarmConnectionToADeadMemberIsReplayedOnAnother(t *testing.T) {
	for _, tc := range []struct {
		name        string
		closeAtOnce bool
	}{
		{"member silent", false},
		{"member closed the connection", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			l := startLoopLab(t)
			l.startMember(t, "m1", l.startStandin(t, "m1"))
			l.startMember(t, "m2", l.startStandin(t, "m2"))
			g.Eventually(func() bool { return l.healthy("m1") && l.healthy("m2") }, 15*time.Second, 20*time.Millisecond).Should(BeTrue())

			addr, got := silentServer(t, tc.closeAtOnce)
			for range 4 {
				l.plantWarm(t, addr)
				// The client's handshake went to the dead connection, and was answered by a
				// member all the same.
				name, err := l.get()
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(name).To(BeElementOf("m1", "m2"))
				g.Expect(l.warmOf("m1")+l.warmOf("m2")).To(Equal(1), "the client took one planted connection")
				if !tc.closeAtOnce {
					var first []byte
					g.Eventually(got, 5*time.Second).Should(Receive(&first))
					g.Expect(bytes.HasPrefix(first, []byte{0x16, 0x03})).To(BeTrue(), "a TLS handshake record, got % x", first[:min(len(first), 8)])
				}
			}
			// Neither member was marked failed for it: a slow answer is its health checks' call.
			for _, m := range l.gw.Status().Members {
				g.Expect(m.DialFailed).To(BeZero(), m.Node)
			}
		})
	}
}
