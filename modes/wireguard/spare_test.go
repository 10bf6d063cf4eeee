package wireguard

import (
	"io"
	"net"
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

// acceptor is a TCP server that records its accepted connections.
type acceptor struct {
	ln    net.Listener
	conns chan net.Conn
}

func newAcceptor(t *testing.T) *acceptor {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	a := &acceptor{ln: ln, conns: make(chan net.Conn, 16)}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			a.conns <- c
		}
	}()
	t.Cleanup(func() { _ = ln.Close() })
	return a
}

func (a *acceptor) next(t *testing.T) net.Conn {
	t.Helper()
	select {
	case c := <-a.conns:
		t.Cleanup(func() { _ = c.Close() })
		return c
	case <-time.After(5 * time.Second):
		t.Fatal("no connection accepted")
		return nil
	}
}

// spareOf waits until s holds a spare and returns it.
func spareOf(t *testing.T, s *spareDialer) net.Conn {
	t.Helper()
	var c net.Conn
	NewWithT(t).Eventually(func() net.Conn {
		s.mu.Lock()
		defer s.mu.Unlock()
		c = s.spare
		return c
	}, 5*time.Second, time.Millisecond).ShouldNot(BeNil())
	return c
}

func TestSpareDialerHandsOutTheSpareAndDialsTheNext(t *testing.T) {
	g := NewWithT(t)
	a := newAcceptor(t)
	s := newSpareDialer(a.ln.Addr().String(), time.Second, time.Minute)
	defer s.close()

	s.refill()
	spare := spareOf(t, s)
	srv := a.next(t)

	c, err := s.dial()
	g.Expect(err).NotTo(HaveOccurred())
	defer c.Close()
	g.Expect(c).To(BeIdenticalTo(spare))
	// It is a working connection to the server that accepted it.
	_, err = c.Write([]byte("x"))
	g.Expect(err).NotTo(HaveOccurred())
	buf := make([]byte, 1)
	g.Expect(io.ReadFull(srv, buf)).To(Equal(1))
	g.Expect(spareOf(t, s)).NotTo(BeIdenticalTo(spare)) // refilled
}

func TestSpareDialerSkipsASpareTheServerClosed(t *testing.T) {
	g := NewWithT(t)
	a := newAcceptor(t)
	s := newSpareDialer(a.ln.Addr().String(), time.Second, time.Minute)
	defer s.close()
	s.refill()
	spare := spareOf(t, s)
	_ = a.next(t).Close() // e.g. the API server's handshake timeout, or a restart
	g.Eventually(func() bool { return alive(spare) }, 5*time.Second, time.Millisecond).Should(BeFalse())

	c, err := s.dial()
	g.Expect(err).NotTo(HaveOccurred())
	defer c.Close()
	g.Expect(c).NotTo(BeIdenticalTo(spare))
	g.Expect(alive(c)).To(BeTrue())
}

func TestSpareDialerClosesAnUnusedSpareAtMaxAge(t *testing.T) {
	g := NewWithT(t)
	a := newAcceptor(t)
	s := newSpareDialer(a.ln.Addr().String(), time.Second, 100*time.Millisecond)
	defer s.close()
	s.refill()
	spareOf(t, s)
	srv := a.next(t)
	// The server sees the spare closed, and no new one is dialled while nobody dials.
	_ = srv.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err := srv.Read(make([]byte, 1))
	g.Expect(err).To(MatchError(io.EOF))
	g.Consistently(a.conns, 300*time.Millisecond).ShouldNot(Receive())
	s.mu.Lock()
	g.Expect(s.spare).To(BeNil())
	s.mu.Unlock()
}

func TestSpareDialerCloseClosesTheSpareAndStopsRefilling(t *testing.T) {
	g := NewWithT(t)
	a := newAcceptor(t)
	s := newSpareDialer(a.ln.Addr().String(), time.Second, time.Minute)
	s.refill()
	spareOf(t, s)
	srv := a.next(t)
	s.close()
	_ = srv.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err := srv.Read(make([]byte, 1))
	g.Expect(err).To(MatchError(io.EOF))
	c, err := s.dial() // still dials, but leaves no spare behind
	g.Expect(err).NotTo(HaveOccurred())
	defer c.Close()
	a.next(t)
	g.Consistently(a.conns, 200*time.Millisecond).ShouldNot(Receive())
}
