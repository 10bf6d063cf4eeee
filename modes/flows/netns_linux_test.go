//go:build linux

package flows

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/nftables"
	. "github.com/onsi/gomega"

	"github.com/caplb/caplb/e2e/lab"
)

// segment is a client and two members, A and B, on one bridge (in a switch namespace), with the
// VIP on lo of both members: the BGP members behind one router, the client's route to the VIP
// standing for the router's ECMP choice.
type segment struct {
	client, a, b       *lab.Netns
	clientIP, aIP, bIP netip.Addr
	vip                netip.Addr
	service            netip.AddrPort
	serverA, serverB   *echoServer
	forwarderB         *Forwarder
}

const servicePort = 6443

// newSegment builds the segment in a lab called name, IPv4 or IPv6, with echo servers on the
// service port of A and B (listening on the wildcard address, as the API server does) and the
// client's route through A. B's forwarder starts empty.
func newSegment(t *testing.T, g Gomega, name string, v6 bool) *segment {
	t.Helper()
	return newSegmentWith(t, g, name, v6, ForwarderConfig{})
}

// newSegmentWith is newSegment with B's forwarder configured by cfg.
func newSegmentWith(t *testing.T, g Gomega, name string, v6 bool, cfg ForwarderConfig) *segment {
	t.Helper()
	l := lab.NewT(t, name)
	s := &segment{}
	plen, vlen := 24, 32
	s.clientIP, s.aIP, s.bIP, s.vip = netip.MustParseAddr("10.9.0.2"), netip.MustParseAddr("10.9.0.11"),
		netip.MustParseAddr("10.9.0.12"), netip.MustParseAddr("10.9.9.9")
	if v6 {
		plen, vlen = 64, 128
		s.clientIP, s.aIP, s.bIP, s.vip = netip.MustParseAddr("fd00:9::2"), netip.MustParseAddr("fd00:9::11"),
			netip.MustParseAddr("fd00:9::12"), netip.MustParseAddr("fd00:9:9::9")
	}
	s.service = netip.AddrPortFrom(s.vip, servicePort)
	sw, err := l.AddNamespace("sw")
	g.Expect(err).NotTo(HaveOccurred())
	var ports []string
	for _, m := range []struct {
		ns   **lab.Netns
		name string
		ip   netip.Addr
		vip  bool
	}{{&s.client, "c", s.clientIP, false}, {&s.a, "a", s.aIP, true}, {&s.b, "b", s.bIP, true}} {
		ns, err := l.AddNamespace(m.name)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(ns.Do(noDAD)).To(Succeed())
		port := "port-" + m.name
		g.Expect(l.AddLink(ns, "eth0", sw, port)).To(Succeed())
		g.Expect(ns.AddAddr("eth0", netip.PrefixFrom(m.ip, plen))).To(Succeed())
		if m.vip {
			g.Expect(ns.AddAddr("lo", netip.PrefixFrom(s.vip, vlen))).To(Succeed())
		}
		*m.ns = ns
		ports = append(ports, port)
	}
	g.Expect(l.AddBridge(sw, "br0", ports...)).To(Succeed())
	s.serverA = startEcho(t, g, s.a, "A")
	s.serverB = startEcho(t, g, s.b, "B")
	s.route(g, s.aIP)
	g.Expect(s.b.Do(func() error {
		var err error
		if s.forwarderB, err = NewForwarder(cfg); err != nil {
			return err
		}
		return s.forwarderB.SetVIPs([]netip.Addr{s.vip})
	})).To(Succeed())
	t.Cleanup(func() { _ = s.forwarderB.Close() })
	return s
}

// noDAD turns duplicate address detection off for the links created from now on. With it, a
// fresh link's link-local address stays tentative for a second or two, and a member sends no
// neighbour solicitation meanwhile for a packet whose source is not its own (a flow dup sends
// on): the owner could not be resolved, and the first segments sent on were late.
func noDAD() error {
	return os.WriteFile("/proc/sys/net/ipv6/conf/default/accept_dad", []byte("0"), 0o644)
}

// route points the client's route to the VIP at member via: the router rehashing.
func (s *segment) route(g Gomega, via netip.Addr) {
	_, err := s.client.Run(context.Background(), "ip", "route", "replace", netip.PrefixFrom(s.vip, s.vip.BitLen()).String(), "via", via.String())
	g.Expect(err).NotTo(HaveOccurred())
}

// dial connects the client to the service.
func (s *segment) dial(g Gomega) *clientConn {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := s.client.DialContext(ctx, "tcp", s.service.String())
	g.Expect(err).NotTo(HaveOccurred())
	return &clientConn{Conn: c, r: bufio.NewReader(c)}
}

// clientConn is a client connection that reads the echo servers' line answers.
type clientConn struct {
	net.Conn
	r *bufio.Reader
}

// flow is the connection as its server sees it.
func (c *clientConn) flow(service netip.AddrPort) Flow {
	return Flow{Client: c.LocalAddr().(*net.TCPAddr).AddrPort(), Service: service}
}

// ask sends msg and returns the answer, "A: msg" or "B: msg" when all is well.
func (c *clientConn) ask(msg string) (string, error) {
	if err := c.SetDeadline(time.Now().Add(5 * time.Second)); err != nil {
		return "", err
	}
	if _, err := fmt.Fprintf(c, "%s\n", msg); err != nil {
		return "", err
	}
	line, err := c.r.ReadString('\n')
	return strings.TrimSuffix(line, "\n"), err
}

// echoServer answers each line with its name and the line, and records the clients whose
// connection reached end of file (their FIN arrived).
type echoServer struct {
	name string
	mu   sync.Mutex
	eof  map[netip.AddrPort]bool
}

func startEcho(t *testing.T, g Gomega, ns *lab.Netns, name string) *echoServer {
	t.Helper()
	var ln net.Listener
	g.Expect(ns.Do(func() error {
		var err error
		ln, err = net.Listen("tcp", fmt.Sprintf(":%d", servicePort)) // [::], dual-stack
		return err
	})).To(Succeed())
	e := &echoServer{name: name, eof: map[netip.AddrPort]bool{}}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Go(func() { e.serve(c) })
		}
	})
	return e
}

func (e *echoServer) serve(c net.Conn) {
	defer c.Close()
	sc := bufio.NewScanner(c)
	for sc.Scan() {
		if _, err := fmt.Fprintf(c, "%s: %s\n", e.name, sc.Text()); err != nil {
			return
		}
	}
	if sc.Err() == nil {
		peer := c.RemoteAddr().(*net.TCPAddr).AddrPort()
		e.mu.Lock()
		e.eof[netip.AddrPortFrom(peer.Addr().Unmap(), peer.Port())] = true
		e.mu.Unlock()
	}
}

func (e *echoServer) sawEOF(client netip.AddrPort) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.eof[client]
}

// mapElements reads the owner map of one family in ns (over netlink, not through the code
// under test).
func mapElements(g Gomega, ns *lab.Netns, is4 bool) map[Flow]netip.Addr {
	fm := familyOf(is4)
	c, err := nftables.New(nftables.WithNetNSFd(int(ns.Handle())))
	g.Expect(err).NotTo(HaveOccurred())
	set, err := c.GetSetByName(fm.table(), fm.mapName)
	g.Expect(err).NotTo(HaveOccurred())
	elems, err := c.GetSetElements(set)
	g.Expect(err).NotTo(HaveOccurred())
	out := map[Flow]netip.Addr{}
	alen := int(fm.alen)
	for _, e := range elems {
		g.Expect(e.Key).To(HaveLen(2*alen + 8))
		addr := func(b []byte) netip.Addr { a, _ := netip.AddrFromSlice(b); return a }
		port := func(b []byte) uint16 { return uint16(b[0])<<8 | uint16(b[1]) }
		k := e.Key
		out[Flow{
			Client:  netip.AddrPortFrom(addr(k[:alen]), port(k[alen:])),
			Service: netip.AddrPortFrom(addr(k[alen+4:2*alen+4]), port(k[2*alen+4:])),
		}] = addr(e.Val)
	}
	return out
}

// tables lists the nftables tables in ns as "family name".
func tables(g Gomega, ns *lab.Netns) []string {
	c, err := nftables.New(nftables.WithNetNSFd(int(ns.Handle())))
	g.Expect(err).NotTo(HaveOccurred())
	ts, err := c.ListTables()
	g.Expect(err).NotTo(HaveOccurred())
	var out []string
	for _, t := range ts {
		out = append(out, familyOf(t.Family == nftables.TableFamilyIPv4).name+" "+t.Name)
	}
	return out
}

// nftListing is `nft list ruleset` in ns, or "" (and a log line) without the nft command: the
// listing shows the rules as an operator reads them, but the tests do not depend on it.
func nftListing(t *testing.T, g Gomega, ns *lab.Netns) string {
	t.Helper()
	if _, err := exec.LookPath("nft"); err != nil {
		t.Logf("no nft command: not checking the ruleset's listing")
		return ""
	}
	out, err := ns.Run(context.Background(), "nft", "list", "ruleset")
	g.Expect(err).NotTo(HaveOccurred())
	return out
}

// isReset: the connection was reset by its peer.
func isReset(err error) bool { return errors.Is(err, syscall.ECONNRESET) }
