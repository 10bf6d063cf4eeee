//go:build linux

package flows

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/caplb/caplb/e2e/lab"
)

// TestList: a server with two VIPs (one IPv4, one IPv6) on lo, listening on them and on a
// dual-stack wildcard address, and a client one link away. List sees the accepted connections still
// receiving, by VIP and port, and not the listeners, nor connections to other addresses, nor
// ones in TIME_WAIT.
func TestList(t *testing.T) {
	g := NewWithT(t)
	l := lab.NewT(t, "flw-list")
	srv, err := l.AddNamespace("s")
	g.Expect(err).NotTo(HaveOccurred())
	cli, err := l.AddNamespace("c")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(cli.Do(noDAD)).To(Succeed())
	g.Expect(srv.Do(noDAD)).To(Succeed())
	g.Expect(l.AddLink(srv, "eth0", cli, "eth0")).To(Succeed())
	vip4, vip6 := netip.MustParseAddr("10.9.9.9"), netip.MustParseAddr("fd00:9:9::9")
	node4, node6 := netip.MustParseAddr("10.9.0.11"), netip.MustParseAddr("fd00:9::11")
	for _, a := range []struct {
		ns  *lab.Netns
		dev string
		p   string
	}{
		{srv, "lo", "10.9.9.9/32"}, {srv, "lo", "fd00:9:9::9/128"},
		{srv, "eth0", "10.9.0.11/24"}, {srv, "eth0", "fd00:9::11/64"},
		{cli, "eth0", "10.9.0.2/24"}, {cli, "eth0", "fd00:9::2/64"},
	} {
		g.Expect(a.ns.AddAddr(a.dev, netip.MustParsePrefix(a.p))).To(Succeed())
	}
	for _, r := range [][]string{{"10.9.9.9/32", "10.9.0.11"}, {"fd00:9:9::9/128", "fd00:9::11"}} {
		_, err := cli.Run(context.Background(), "ip", "route", "add", r[0], "via", r[1])
		g.Expect(err).NotTo(HaveOccurred())
	}
	accepted := make(chan net.Conn, 16)
	// Listeners bound to a VIP (in LISTEN, with the VIP as local address) and a dual-stack one
	// on the wildcard address, as the API server's.
	for _, addr := range []string{"10.9.9.9:6443", "[fd00:9:9::9]:6443", "10.9.0.11:6443", ":8080"} {
		var ln net.Listener
		g.Expect(srv.Do(func() (err error) { ln, err = net.Listen("tcp", addr); return err })).To(Succeed())
		t.Cleanup(func() { _ = ln.Close() })
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				accepted <- c
			}
		}()
	}
	dial := func(to netip.AddrPort) (net.Conn, net.Conn, Flow) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		c, err := cli.DialContext(ctx, "tcp", to.String())
		g.Expect(err).NotTo(HaveOccurred())
		t.Cleanup(func() { _ = c.Close() })
		var s net.Conn
		g.Eventually(accepted).WithTimeout(5 * time.Second).Should(Receive(&s))
		t.Cleanup(func() { _ = s.Close() })
		return c, s, Flow{Client: c.LocalAddr().(*net.TCPAddr).AddrPort(), Service: to}
	}
	svc4, svc6 := netip.AddrPortFrom(vip4, 6443), netip.AddrPortFrom(vip6, 6443)
	_, _, api1 := dial(svc4)
	_, _, api2 := dial(svc4)
	_, _, api6 := dial(svc6)
	_, _, other := dial(netip.AddrPortFrom(vip4, 8080))
	dial(netip.AddrPortFrom(node4, 6443)) // to the node's own address, not a VIP
	// A connection the client half-closed: the server's side is in CLOSE_WAIT, still receiving.
	halfClient, halfServer, half := dial(netip.AddrPortFrom(node6, 8080))
	g.Expect(halfClient.(*net.TCPConn).CloseWrite()).To(Succeed())
	g.Expect(halfServer.SetReadDeadline(time.Now().Add(5 * time.Second))).To(Succeed())
	_, err = halfServer.Read(make([]byte, 1))
	g.Expect(err).To(MatchError(io.EOF))
	// A connection the server closed first: its side ends in TIME_WAIT.
	doneClient, doneServer, _ := dial(netip.AddrPortFrom(vip6, 8080))
	g.Expect(doneServer.Close()).To(Succeed())
	g.Expect(doneClient.SetReadDeadline(time.Now().Add(5 * time.Second))).To(Succeed())
	_, err = doneClient.Read(make([]byte, 1))
	g.Expect(err).To(MatchError(io.EOF))
	g.Expect(doneClient.Close()).To(Succeed())

	list := func(vips []netip.Addr, ports []uint16) func() ([]Flow, error) {
		return func() (out []Flow, err error) {
			err = srv.Do(func() error {
				l, err := List(vips, ports)
				if l.Cut != 0 {
					return fmt.Errorf("%d flows cut", l.Cut)
				}
				out = l.Flows
				return err
			})
			return out, err
		}
	}
	g.Eventually(list([]netip.Addr{vip4}, []uint16{6443})).WithTimeout(5*time.Second).Should(Equal(sortFlows([]Flow{api1, api2})),
		"both connections, not the listener on the VIP")
	g.Expect(list([]netip.Addr{vip4, vip6}, []uint16{6443})()).To(Equal(sortFlows([]Flow{api1, api2, api6})))
	g.Expect(list([]netip.Addr{vip4, vip6}, nil)()).To(Equal(sortFlows([]Flow{api1, api2, api6, other})),
		"every port, not the TIME_WAIT connection")
	g.Expect(list([]netip.Addr{vip6}, []uint16{8080})()).To(BeEmpty(), "TIME_WAIT is not a flow")
	g.Expect(list([]netip.Addr{node6}, nil)()).To(Equal([]Flow{half}), "CLOSE_WAIT still receives")
	// An IPv4 client of the dual-stack listener is an AF_INET6 socket with IPv4-mapped
	// addresses, listed as IPv4; a VIP given IPv4-mapped is its IPv4 address.
	g.Expect(list([]netip.Addr{netip.MustParseAddr("::ffff:10.9.9.9")}, []uint16{8080})()).To(Equal([]Flow{other}))
	g.Expect(other.Client.Addr().Is4()).To(BeTrue())
	g.Expect(list(nil, nil)()).To(BeEmpty())
}
