//go:build linux

package flows

import (
	"io"
	"net"
	"net/netip"
	"sync"
	"testing"

	. "github.com/onsi/gomega"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/caplb/caplb/e2e/lab"
)

// TestVIPSocketsMatchFullDump: the kernel-filtered dump returns exactly the sockets a full dump
// filtered here would (IPv4 VIPs on IPv4 and dual-stack listeners, an IPv6 VIP, not the node's
// other addresses), with the same tcp_info counters.
func TestVIPSocketsMatchFullDump(t *testing.T) {
	g := NewWithT(t)
	l := lab.NewT(t, "flw-diag")
	ns, err := l.AddNamespace("s")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(ns.Do(noDAD)).To(Succeed())
	for _, p := range []string{"10.7.0.1/32", "10.7.0.2/32", "10.7.0.3/32", "fd00:7::1/128"} {
		g.Expect(ns.AddAddr("lo", netip.MustParsePrefix(p))).To(Succeed())
	}
	vips := []netip.Addr{netip.MustParseAddr("10.7.0.1"), netip.MustParseAddr("10.7.0.2"), netip.MustParseAddr("fd00:7::1")}
	var (
		mu   sync.Mutex
		keep []io.Closer
	)
	hold := func(c io.Closer) {
		mu.Lock()
		defer mu.Unlock()
		keep = append(keep, c)
	}
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range keep {
			_ = c.Close()
		}
	})
	g.Expect(ns.Do(func() error {
		// A dual-stack listener (IPv4 clients on AF_INET6 sockets) and an IPv4-only one.
		for _, l := range [][2]string{{"tcp", ":7001"}, {"tcp4", "0.0.0.0:7002"}} {
			ln, err := net.Listen(l[0], l[1])
			if err != nil {
				return err
			}
			hold(ln)
			go func() {
				for {
					c, err := ln.Accept()
					if err != nil {
						return
					}
					hold(c)
					_, _ = c.Write([]byte("hello"))
				}
			}()
		}
		for _, to := range []string{"10.7.0.1:7001", "10.7.0.1:7002", "10.7.0.2:7001", "10.7.0.3:7001", "[fd00:7::1]:7001", "10.7.0.3:7002"} {
			c, err := net.Dial("tcp", to)
			if err != nil {
				return err
			}
			hold(c)
			if _, err := c.Write([]byte("request")); err != nil {
				return err
			}
		}
		return nil
	})).To(Succeed())

	type counters struct{ received, sent uint64 }
	read := func() (filtered, full map[[2]uint32]counters) {
		filtered, full = map[[2]uint32]counters{}, map[[2]uint32]counters{}
		g.Expect(ns.Do(func() error {
			socks, err := vipSocketsIn(vips, statesAll, true)
			if err != nil {
				return err
			}
			for _, s := range socks {
				filtered[s.InetDiagMsg.ID.Cookie] = counters{s.TCPInfo.Bytes_received, s.TCPInfo.Bytes_sent}
			}
			isVIP := map[netip.Addr]bool{}
			for _, v := range vips {
				isVIP[v] = true
			}
			for _, fam := range []uint8{unix.AF_INET, unix.AF_INET6} {
				all, err := netlink.SocketDiagTCPInfo(fam)
				if err != nil {
					return err
				}
				for _, s := range all {
					a, _ := netip.AddrFromSlice(s.InetDiagMsg.ID.Source)
					if isVIP[a.Unmap()] && s.InetDiagMsg.State != tcpListen {
						full[s.InetDiagMsg.ID.Cookie] = counters{s.TCPInfo.Bytes_received, s.TCPInfo.Bytes_sent}
					}
				}
			}
			return nil
		})).To(Succeed())
		return filtered, full
	}
	g.Eventually(func(g Gomega) {
		filtered, full := read()
		// Both sides of the connections to a VIP (on lo a client's source is the address it
		// dials), none of those to 10.7.0.3.
		g.Expect(full).NotTo(BeEmpty())
		g.Expect(filtered).To(Equal(full))
		for _, c := range filtered {
			g.Expect(c.received+c.sent).To(BeNumerically(">", 0), "tcp_info read")
		}
	}).Should(Succeed())
}
