//go:build linux

package flows

import (
	"errors"
	"net"
	"net/netip"
	"os"
	"runtime"
	"strconv"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

// TestResetConnections resets the connections to an address, on IPv4 sockets and on the
// v4-mapped IPv6 sockets of a server listening on [::], and leaves the listeners and other
// addresses' connections alone. 127.0.0.77 stands for the VIP: nothing else on the host uses it.
func TestResetConnections(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (CAP_NET_ADMIN for SOCK_DESTROY)")
	}
	cases := []struct{ name, network, listen string }{
		{"ipv4 socket", "tcp4", "127.0.0.77:0"},
		{"v4-mapped on a dual-stack listener", "tcp", "[::]:0"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			ln, err := net.Listen(tc.network, tc.listen)
			g.Expect(err).NotTo(HaveOccurred())
			defer ln.Close()
			port := ln.Addr().(*net.TCPAddr).Port
			go func() {
				for {
					c, err := ln.Accept()
					if err != nil {
						return
					}
					go func() { b := make([]byte, 1); _, _ = c.Read(b) }() // hold it open
				}
			}()
			vip := netip.MustParseAddr("127.0.0.77")
			c, err := net.Dial("tcp4", net.JoinHostPort(vip.String(), itoa(port)))
			g.Expect(err).NotTo(HaveOccurred())
			defer c.Close()
			other, err := net.Dial("tcp4", net.JoinHostPort("127.0.0.1", itoa(port)))
			if tc.network == "tcp" { // the dual-stack listener also serves 127.0.0.1
				g.Expect(err).NotTo(HaveOccurred())
				defer other.Close()
			}
			g.Eventually(func() (int, error) { return ResetConnections(vip, 0) }, 2*time.Second, 20*time.Millisecond).
				Should(BeNumerically(">=", 1), "the server's side of the connection is reset")
			_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
			_, err = c.Read(make([]byte, 1))
			g.Expect(errors.Is(err, syscall.ECONNRESET)).To(BeTrue(), "the client sees a reset at once, not a timeout: %v", err)
			if other != nil {
				_ = other.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
				_, err = other.Read(make([]byte, 1))
				g.Expect(errors.Is(err, os.ErrDeadlineExceeded)).To(BeTrue(), "another address's connection stays: %v", err)
			}
			// The listener still accepts.
			c2, err := net.Dial("tcp4", net.JoinHostPort(vip.String(), itoa(port)))
			g.Expect(err).NotTo(HaveOccurred())
			c2.Close()
		})
	}
}

func itoa(i int) string { return strconv.Itoa(i) }

// TestResetWaitsForTheAnswer: a connection with a request in flight (the server read it and has
// not answered) is reset only after the answer went out, so the client gets its answer and then
// the reset; an idle connection is reset at once; patience bounds the wait for a server that
// never answers. Resetting at once lost the answer: client-go does not resend a write.
func TestResetWaitsForTheAnswer(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (CAP_NET_ADMIN for SOCK_DESTROY)")
	}
	g := NewWithT(t)
	vip := netip.MustParseAddr("127.0.0.78")
	ln, err := net.Listen("tcp4", "127.0.0.78:0")
	g.Expect(err).NotTo(HaveOccurred())
	defer ln.Close()
	requests := make(chan net.Conn, 4)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				// A greeting first, as a TLS handshake's server flight comes before the request.
				if _, err := c.Write([]byte("h")); err != nil {
					return
				}
				b := make([]byte, 1)
				if _, err := c.Read(b); err == nil {
					requests <- c
				}
			}()
		}
	}()
	addr := ln.Addr().String()
	dial := func() net.Conn {
		c, err := net.Dial("tcp4", addr)
		g.Expect(err).NotTo(HaveOccurred())
		_, err = c.Read(make([]byte, 1))
		g.Expect(err).NotTo(HaveOccurred(), "the greeting")
		// tcp_info counts in milliseconds: the request comes a few after the greeting, as it
		// does after a real handshake (the same millisecond is covered by the patience case).
		time.Sleep(5 * time.Millisecond)
		return c
	}
	inFlight := dial()
	defer inFlight.Close()
	_, err = inFlight.Write([]byte("q"))
	g.Expect(err).NotTo(HaveOccurred())
	var server net.Conn
	g.Eventually(requests, 2*time.Second).Should(Receive(&server), "the server read the request")
	idle := dial()
	defer idle.Close()

	type result struct {
		n   int
		err error
	}
	done := make(chan result, 1)
	go func() { n, err := ResetConnections(vip, 5*time.Second); done <- result{n, err} }()
	// The idle connection goes at once; the one in flight waits for its answer.
	_ = idle.SetReadDeadline(time.Now().Add(2 * time.Second))
	_, err = idle.Read(make([]byte, 1))
	g.Expect(errors.Is(err, syscall.ECONNRESET)).To(BeTrue(), "the idle connection is reset at once: %v", err)
	g.Consistently(done, 200*time.Millisecond, 10*time.Millisecond).ShouldNot(Receive(), "waiting for the answer")
	_, err = server.Write([]byte("a"))
	g.Expect(err).NotTo(HaveOccurred())
	var r result
	g.Eventually(done, 2*time.Second).Should(Receive(&r), "reset once answered")
	g.Expect(r.err).NotTo(HaveOccurred())
	g.Expect(r.n).To(Equal(2), "the server side of both connections")
	_ = inFlight.SetReadDeadline(time.Now().Add(2 * time.Second))
	b := make([]byte, 1)
	n, err := inFlight.Read(b)
	g.Expect(n).To(Equal(1), "the answer arrived before the reset (%v)", err)
	_, err = inFlight.Read(b)
	g.Expect(errors.Is(err, syscall.ECONNRESET)).To(BeTrue(), "then the reset: %v", err)

	// A server that never answers: patience ends the wait.
	stuck := dial()
	defer stuck.Close()
	_, _ = stuck.Write([]byte("q"))
	g.Eventually(requests, 2*time.Second).Should(Receive(&server))
	start := time.Now()
	n, err = ResetConnections(vip, 300*time.Millisecond)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(n).To(BeNumerically(">=", 1))
	g.Expect(time.Since(start)).To(BeNumerically(">=", 300*time.Millisecond), "it waited its patience")
	g.Expect(time.Since(start)).To(BeNumerically("<", 2*time.Second))
	// The server's side must stay open until here: a collected net.Conn closes its socket.
	runtime.KeepAlive(server)
}
