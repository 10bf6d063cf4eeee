package wireguard

import (
	"io"
	"net"
	"net/netip"
	"runtime"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
)

func TestProcTCPParsing(t *testing.T) {
	// Lines as a little-endian Linux prints them: 10.231.0.2:6443 listening, two connections
	// to it (one ESTABLISHED, one SYN_RECV), one TIME_WAIT, one on another port; in tcp6 the
	// tunnel address fd63:6c62:7767::2 with one ESTABLISHED and one CLOSE_WAIT, and a
	// v4-mapped ::ffff:10.231.0.2 ESTABLISHED from a dual-stack listener.
	tcp4 := `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000:192B 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1 0000000000000000 100 0 0 10 0
   1: 0200E70A:192B 0100E70A:9C40 01 00000000:00000000 00:00000000 00000000     0        0 2 1 0000000000000000 20 4 30 10 -1
   2: 0200E70A:192B 0100E70A:9C41 03 00000000:00000000 00:00000000 00000000     0        0 3 1 0000000000000000 20 4 30 10 -1
   3: 0200E70A:192B 0100E70A:9C42 06 00000000:00000000 00:00000000 00000000     0        0 0 3 0000000000000000
   4: 0200E70A:2802 0100E70A:9C43 01 00000000:00000000 00:00000000 00000000     0        0 4 1 0000000000000000 20 4 30 10 -1
`
	tcp6 := `  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000000000000000000000000000:192B 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 5 1 0000000000000000 100 0 0 10 0
   1: 626C63FD000067770000000002000000:192B 626C63FD000067770000000001000000:9C40 01 00000000:00000000 00:00000000 00000000     0        0 6 1 0000000000000000 20 4 30 10 -1
   2: 626C63FD000067770000000002000000:192B 626C63FD000067770000000001000000:9C41 08 00000000:00000000 00:00000000 00000000     0        0 7 1 0000000000000000 20 4 30 10 -1
   3: 0000000000000000FFFF00000200E70A:192B 0000000000000000FFFF00000100E70A:9C44 01 00000000:00000000 00:00000000 00000000     0        0 8 1 0000000000000000 20 4 30 10 -1
`
	if runtime.GOARCH != "amd64" && runtime.GOARCH != "arm64" {
		t.Skip("the fixture is little-endian /proc text")
	}
	conns, listeners := countTCPConnections, countTCPListeners
	tests := []struct {
		name  string
		count func(io.Reader, netip.AddrPort) (int, error)
		text  string
		ap    string
		want  int
	}{
		{"connections: IPv4 tunnel address", conns, tcp4, "10.231.0.2:6443", 2},
		{"connections: IPv4 other port", conns, tcp4, "10.231.0.2:10242", 1},
		{"connections: IPv6 tunnel address", conns, tcp6, "[fd63:6c62:7767::2]:6443", 2},
		{"connections: IPv4 via a dual-stack listener", conns, tcp6, "10.231.0.2:6443", 1},
		{"connections: nobody", conns, tcp6, "[fd63:6c62:7767::3]:6443", 0},
		{"listeners: IPv4 address, 0.0.0.0 listener", listeners, tcp4, "10.231.0.2:6443", 1},
		{"listeners: IPv4 address, dual-stack :: listener", listeners, tcp6, "10.231.0.2:6443", 1},
		{"listeners: IPv6 address, :: listener", listeners, tcp6, "[fd63:6c62:7767::2]:6443", 1},
		{"listeners: IPv6 address, IPv4-only listener", listeners, tcp4, "[fd63:6c62:7767::2]:6443", 0},
		{"listeners: other port", listeners, tcp4, "10.231.0.2:10242", 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			n, err := tc.count(strings.NewReader(tc.text), netip.MustParseAddrPort(tc.ap))
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(n).To(Equal(tc.want))
		})
	}
	_, err := countTCPConnections(strings.NewReader("header\n 0: 0200E70:192B 0 01\n"), netip.MustParseAddrPort("10.231.0.2:6443"))
	NewWithT(t).Expect(err).To(MatchError(ContainSubstring("not 8 or 32 hex digits")))
}

// The kernel's own /proc text: real connections on loopback are counted, by address and port.
func TestOpenTCPConnectionsCountsRealSockets(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc/net/tcp: Linux only")
	}
	for _, network := range []string{"tcp4", "tcp6"} {
		t.Run(network, func(t *testing.T) {
			g := NewWithT(t)
			host := "127.0.0.1"
			if network == "tcp6" {
				host = "::1"
			}
			ln, err := net.Listen(network, net.JoinHostPort(host, "0"))
			if err != nil {
				t.Skipf("no %s loopback here: %v", network, err)
			}
			defer ln.Close()
			ap := netip.MustParseAddrPort(ln.Addr().String())
			g.Expect(openTCPConnections(ap)).To(Equal(0), "a listener is not a connection")
			var conns []net.Conn
			for range 3 {
				c, err := net.Dial(network, ln.Addr().String())
				g.Expect(err).NotTo(HaveOccurred())
				conns = append(conns, c)
			}
			// Not accepted yet: they wait in the listener's queue, and count.
			g.Expect(openTCPConnections(ap)).To(Equal(3))
			g.Expect(listenersFor(ap)).To(Equal(1))
			other := netip.AddrPortFrom(netip.MustParseAddr("fd63:6c62:7767::2"), ap.Port())
			if network == "tcp4" {
				other = netip.AddrPortFrom(netip.MustParseAddr("10.231.0.2"), ap.Port())
			}
			g.Expect(listenersFor(other)).To(Equal(0), "a loopback listener takes no tunnel connection")
			for _, c := range conns {
				c.Close()
			}
		})
	}
}
