//go:build linux

package arp

import (
	"errors"
	"net"
	"net/netip"
	"os"
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
			g.Eventually(func() (int, error) { return resetConnections(vip) }, 2*time.Second, 20*time.Millisecond).
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
