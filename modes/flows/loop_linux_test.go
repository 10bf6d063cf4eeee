//go:build linux

package flows

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	. "github.com/onsi/gomega"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/caplb/caplb/e2e/lab"
)

// Ports of the loop tests: nobody listens on noListenerPort; closerPort's servers close every
// connection at once, leaving their side orphaned in FIN_WAIT2.
const (
	noListenerPort = 6445
	closerPort     = 6444
)

// TestForwarderNoBounce: two members whose maps name each other as the owner of one flow (stale
// lists crossing) must not pass its segments back and forth: a segment sent on once is never
// sent on again, and a member with any socket for the flow (an orphaned FIN_WAIT2 one too) keeps
// the segment. One injected ACK is sent on at most twice in all.
func TestForwarderNoBounce(t *testing.T) {
	for _, tc := range []struct {
		name     string
		v6       bool
		finWait2 bool
	}{
		{"ipv4 no sockets", false, false},
		{"ipv6 no sockets", true, false},
		{"ipv4 FIN_WAIT2 on both", false, true},
		{"ipv6 FIN_WAIT2 on both", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			name := "flw-loop"
			if tc.v6 {
				name += "6"
			}
			if tc.finWait2 {
				name += "f"
			}
			s := newSegment(t, g, name, tc.v6)
			fwA := s.forwarderIn(t, g, s.a)
			client := netip.AddrPortFrom(s.clientIP, 41000)
			fl := Flow{Client: client, Service: netip.AddrPortFrom(s.vip, noListenerPort)}
			if tc.finWait2 {
				fl.Service = netip.AddrPortFrom(s.vip, closerPort)
				startCloser(t, g, s.a)
				startCloser(t, g, s.b)
				s.finWait2(g, s.aIP, s.a, fl)
				s.finWait2(g, s.bIP, s.b, fl)
			}
			g.Expect(fwA.Set(map[Flow]netip.Addr{fl: s.bIP})).To(Succeed())
			g.Expect(s.forwarderB.Set(map[Flow]netip.Addr{fl: s.aIP})).To(Succeed())
			arrivedA := addProbe(g, s.a, tc.v6, fl.Service.Port())
			s.route(g, s.aIP)

			sendACK(g, s.client, fl.Client, fl.Service)
			g.Eventually(arrivedA).WithTimeout(2*time.Second).WithPolling(10*time.Millisecond).
				Should(BeNumerically(">=", 1), "the ACK reaches A")
			forwarded := func() uint64 { return fwA.Forwarded() + s.forwarderB.Forwarded() }
			g.Consistently(forwarded).WithTimeout(time.Second).WithPolling(50*time.Millisecond).
				Should(BeNumerically("<=", 2), "the ACK is not passed back and forth")
			if tc.finWait2 {
				g.Expect(forwarded()).To(BeZero(), "A's FIN_WAIT2 socket takes the ACK")
			} else {
				g.Expect(fwA.Forwarded()).To(Equal(uint64(1)), "A sends the ACK on to B")
				g.Expect(s.forwarderB.Forwarded()).To(BeZero(), "B knows it was sent on and drops it")
			}
		})
	}
}

// forwarderIn creates a forwarder holding the segment's VIP in member ns.
func (s *segment) forwarderIn(t *testing.T, g Gomega, ns *lab.Netns) *Forwarder {
	t.Helper()
	var fw *Forwarder
	g.Expect(ns.Do(func() (err error) {
		if fw, err = NewForwarder(ForwarderConfig{}); err != nil {
			return err
		}
		return fw.SetVIPs([]netip.Addr{s.vip})
	})).To(Succeed())
	t.Cleanup(func() { _ = fw.Close() })
	return fw
}

// startCloser listens on closerPort in ns and closes every connection as soon as it is accepted:
// the server's side is then orphaned, in FIN_WAIT2 once the client acknowledged its FIN.
func startCloser(t *testing.T, g Gomega, ns *lab.Netns) {
	t.Helper()
	var ln net.Listener
	g.Expect(ns.Do(func() (err error) {
		ln, err = net.Listen("tcp", fmt.Sprintf(":%d", closerPort))
		return err
	})).To(Succeed())
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	}()
}

// finWait2 leaves member's side of fl in FIN_WAIT2 (an orphan: a timewait-kind socket) and the
// client's side gone without a trace: the client connects through via, reads the server's FIN,
// and aborts with its RST blackholed.
func (s *segment) finWait2(g Gomega, via netip.Addr, member *lab.Netns, fl Flow) {
	s.route(g, via)
	var c net.Conn
	g.Expect(s.client.Do(func() (err error) {
		d := net.Dialer{LocalAddr: net.TCPAddrFromAddrPort(fl.Client), Timeout: 5 * time.Second}
		c, err = d.Dial("tcp", fl.Service.String())
		return err
	})).To(Succeed())
	g.Expect(c.SetReadDeadline(time.Now().Add(5 * time.Second))).To(Succeed())
	_, err := c.Read(make([]byte, 1))
	g.Expect(err).To(MatchError(io.EOF), "the server's FIN arrives")
	g.Eventually(func() (uint8, error) { return tcpState(member, fl) }).WithTimeout(5*time.Second).WithPolling(10*time.Millisecond).
		Should(Equal(uint8(5)), "the server's side is in FIN_WAIT2")
	_, err = s.client.Run(context.Background(), "ip", "route", "replace", "blackhole", netip.PrefixFrom(s.vip, s.vip.BitLen()).String())
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(c.(*net.TCPConn).SetLinger(0)).To(Succeed())
	_ = c.Close() // its RST has no route
	g.Consistently(func() (uint8, error) { return tcpState(member, fl) }).WithTimeout(100*time.Millisecond).
		Should(Equal(uint8(5)), "the client's RST did not reach the server")
}

// tcpState is the state of fl's socket in ns as sock_diag reports it (0: none).
func tcpState(ns *lab.Netns, fl Flow) (uint8, error) {
	var state uint8
	err := ns.Do(func() error {
		for _, fam := range []uint8{unix.AF_INET, unix.AF_INET6} {
			socks, err := netlink.SocketDiagTCP(fam)
			if err != nil {
				return err
			}
			for _, sk := range socks {
				local, _ := netip.AddrFromSlice(sk.ID.Source)
				remote, _ := netip.AddrFromSlice(sk.ID.Destination)
				if netip.AddrPortFrom(local.Unmap(), sk.ID.SourcePort) == fl.Service &&
					netip.AddrPortFrom(remote.Unmap(), sk.ID.DestinationPort) == fl.Client {
					state = sk.State
				}
			}
		}
		return nil
	})
	return state, err
}

// addProbe counts, in a table of its own ahead of the forwarder's, the TCP segments to port that
// arrive in ns (a chain per port); the returned function reads the count.
func addProbe(g Gomega, ns *lab.Netns, v6 bool, port uint16) func() (uint64, error) {
	fm := familyOf(!v6)
	c, err := nftables.New(nftables.WithNetNSFd(int(ns.Handle())))
	g.Expect(err).NotTo(HaveOccurred())
	t := c.AddTable(&nftables.Table{Family: fm.nft, Name: "probe"})
	prio := nftables.ChainPriority(-350)
	ch := c.AddChain(&nftables.Chain{Table: t, Name: fmt.Sprintf("pre%d", port), Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookPrerouting, Priority: &prio})
	c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: []expr.Any{
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: reg1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: []byte{unix.IPPROTO_TCP}},
		&expr.Payload{DestRegister: reg1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
		&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: binary.BigEndian.AppendUint16(nil, port)},
		&expr.Counter{},
	}})
	g.Expect(c.Flush()).To(Succeed())
	return func() (uint64, error) {
		rules, err := c.GetRules(t, ch)
		if err != nil {
			return 0, err
		}
		for _, r := range rules {
			for _, e := range r.Exprs {
				if ctr, ok := e.(*expr.Counter); ok {
					return ctr.Packets, nil
				}
			}
		}
		return 0, errors.New("probe counter not found")
	}
}

// sendACK sends one bare TCP ACK from -> to out of ns, through a raw socket: a segment of a
// connection no socket in ns has.
func sendACK(g Gomega, ns *lab.Netns, from, to netip.AddrPort) {
	sendACKs(g, ns, []Flow{{Client: from, Service: to}})
}

// sendACKs sends one bare TCP ACK of each flow, client to service, out of ns through a raw
// socket: IPv4 ones from any client address (the test writes the IP header), IPv6 ones from the
// first flow's client address, one of ns's (the kernel writes the header).
func sendACKs(g Gomega, ns *lab.Netns, fls []Flow) {
	if len(fls) == 0 {
		return
	}
	v4 := fls[0].Service.Addr().Is4()
	g.Expect(ns.Do(func() error {
		var fd int
		var err error
		if v4 {
			fd, err = unix.Socket(unix.AF_INET, unix.SOCK_RAW, unix.IPPROTO_RAW)
		} else {
			fd, err = unix.Socket(unix.AF_INET6, unix.SOCK_RAW, unix.IPPROTO_TCP)
		}
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		if !v4 {
			if err := unix.Bind(fd, &unix.SockaddrInet6{Addr: fls[0].Client.Addr().As16()}); err != nil {
				return err
			}
		}
		for _, fl := range fls {
			seg := ackSegment(fl.Client, fl.Service)
			if v4 {
				ip := []byte{0x45, 0, 0, 40, 0x12, 0x34, 0x40, 0, 64, unix.IPPROTO_TCP, 0, 0}
				ip = append(append(append(ip, fl.Client.Addr().AsSlice()...), fl.Service.Addr().AsSlice()...), seg...)
				err = unix.Sendto(fd, ip, 0, &unix.SockaddrInet4{Addr: fl.Service.Addr().As4()})
			} else {
				err = unix.Sendto(fd, seg, 0, &unix.SockaddrInet6{Addr: fl.Service.Addr().As16()})
			}
			if err != nil {
				return fmt.Errorf("sending an ACK %s -> %s: %w", fl.Client, fl.Service, err)
			}
		}
		return nil
	})).To(Succeed())
}

// ackSegment is a bare ACK's TCP header, its checksum computed.
func ackSegment(from, to netip.AddrPort) []byte {
	seg := make([]byte, 20)
	binary.BigEndian.PutUint16(seg[0:], from.Port())
	binary.BigEndian.PutUint16(seg[2:], to.Port())
	binary.BigEndian.PutUint32(seg[4:], 0x01020304) // seq
	binary.BigEndian.PutUint32(seg[8:], 0x05060708) // ack
	seg[12] = 5 << 4                                // data offset: 20 bytes
	seg[13] = 0x10                                  // ACK
	binary.BigEndian.PutUint16(seg[14:], 1024)      // window
	src, dst := from.Addr().AsSlice(), to.Addr().AsSlice()
	pseudo := append(append(append([]byte{}, src...), dst...), 0, unix.IPPROTO_TCP, 0, byte(len(seg)))
	if to.Addr().Is6() {
		pseudo = append(append(append([]byte{}, src...), dst...), 0, 0, 0, byte(len(seg)), 0, 0, 0, unix.IPPROTO_TCP)
	}
	binary.BigEndian.PutUint16(seg[16:], checksum(pseudo, seg))
	return seg
}

// checksum is the Internet checksum of pseudo (a pseudo-header) and seg.
func checksum(pseudo, seg []byte) uint16 {
	var s uint32
	for _, b := range [][]byte{pseudo, seg} {
		for i := 0; i+1 < len(b); i += 2 {
			s += uint32(b[i])<<8 | uint32(b[i+1])
		}
	}
	for s>>16 != 0 {
		s = s&0xffff + s>>16
	}
	return ^uint16(s)
}
