//go:build linux

package flows

import (
	"fmt"
	"io"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/google/nftables"
	. "github.com/onsi/gomega"

	"github.com/caplb/caplb/e2e/lab"
)

// TestForwarderSetIsDeclarative: after Set the maps hold exactly what it was given, IPv4 and
// IPv6; Close and RemoveStale take the tables away.
func TestForwarderSetIsDeclarative(t *testing.T) {
	g := NewWithT(t)
	l := lab.NewT(t, "flw-set")
	ns, err := l.AddNamespace("n")
	g.Expect(err).NotTo(HaveOccurred())
	var fw *Forwarder
	g.Expect(ns.Do(func() (err error) { fw, err = NewForwarder(ForwarderConfig{}); return err })).To(Succeed())
	t.Cleanup(func() { _ = fw.Close() })
	g.Expect(tables(g, ns)).To(ConsistOf("ip "+Table, "ip6 "+Table))

	a4, b4, a6 := netip.MustParseAddr("10.9.0.11"), netip.MustParseAddr("10.9.0.12"), netip.MustParseAddr("fd00:9::11")
	f1, f2, f3 := flow("10.9.0.2:40000", "10.9.9.9:6443"), flow("10.9.0.3:40001", "10.9.9.9:6443"), flow("10.9.0.4:40002", "10.9.9.9:6443")
	f6 := flow("[fd00:9::2]:40000", "[fd00:9:9::9]:6443")
	g.Expect(fw.Set(map[Flow]netip.Addr{f1: a4, f2: a4, f6: a6})).To(Succeed())
	g.Expect(mapElements(g, ns, true)).To(Equal(map[Flow]netip.Addr{f1: a4, f2: a4}))
	g.Expect(mapElements(g, ns, false)).To(Equal(map[Flow]netip.Addr{f6: a6}))
	if listing := nftListing(t, g, ns); listing != "" {
		t.Logf("nft list ruleset:\n%s", listing)
		for _, line := range []string{
			"table ip caplb_flows {",
			"map owners4 {",
			"type ipv4_addr . inet_service . ipv4_addr . inet_service : ipv4_addr",
			"10.9.0.2 . 40000 . 10.9.9.9 . 6443 : 10.9.0.11",
			"type filter hook prerouting priority raw; policy accept;",
			"ip daddr @vips4 jump vip",
			"ip saddr . tcp sport . ip daddr . tcp dport @owners4 goto toowner",
			"socket wildcard 0 return",
			"socket wildcard 1 goto unknown",
			"socket transparent 0 return",
			"flags dynamic,timeout",
			"timeout 1s",
			"ip ttl 255 drop",
			"ip6 hoplimit 255 drop",
			"size 131072",
			"counter packets 0 bytes 0 goto spray",
			"limit rate over 2000/second burst 2000 packets goto toomany",
			"ip saddr . tcp sport . ip daddr . tcp dport @held4 goto spray",
			"ip saddr . tcp sport . ip daddr . tcp dport @seen4 return",
			"add @held4 { ip saddr . tcp sport . ip daddr . tcp dport }",
			"ip ttl set 0 counter",
			"ip6 hoplimit set 0 counter",
			"ip ttl set 0 counter packets 0 bytes 0 dup to ip saddr . tcp sport . ip daddr . tcp dport map @owners4",
			"table ip6 caplb_flows {",
			"type ipv6_addr . inet_service . ipv6_addr . inet_service : ipv6_addr",
			"elements = { fd00:9::2 . 40000 . fd00:9:9::9 . 6443 : fd00:9::11 }",
			"ip6 saddr . tcp sport . ip6 daddr . tcp dport @owners6 goto toowner",
			"dup to ip6 saddr . tcp sport . ip6 daddr . tcp dport map @owners6",
		} {
			g.Expect(listing).To(ContainSubstring(line))
		}
	}

	// An owner moves, a flow goes, another comes; the IPv6 one stays.
	g.Expect(fw.Set(map[Flow]netip.Addr{f1: b4, f3: a4, f6: a6})).To(Succeed())
	g.Expect(mapElements(g, ns, true)).To(Equal(map[Flow]netip.Addr{f1: b4, f3: a4}))
	g.Expect(mapElements(g, ns, false)).To(Equal(map[Flow]netip.Addr{f6: a6}))

	// An owner of the other family is skipped and named; the rest is applied.
	err = fw.Set(map[Flow]netip.Addr{f1: b4, f2: a6, f6: a4})
	g.Expect(err).To(MatchError(And(ContainSubstring("skipped 2 flows"),
		ContainSubstring("10.9.0.3:40001 -> 10.9.9.9:6443 (owner fd00:9::11 of another family)"),
		ContainSubstring("[fd00:9::2]:40000 -> [fd00:9:9::9]:6443 (owner 10.9.0.11 of another family)"))))
	g.Expect(mapElements(g, ns, true)).To(Equal(map[Flow]netip.Addr{f1: b4}))
	g.Expect(mapElements(g, ns, false)).To(BeEmpty())

	// An element removed behind the forwarder's back fails the next batch (the kernel refuses
	// to delete what is not there); the one after rewrites the maps whole.
	deleteElement(g, ns, f1)
	g.Expect(fw.Set(map[Flow]netip.Addr{f2: a4})).To(MatchError(ContainSubstring("updating the owner maps")))
	g.Expect(mapElements(g, ns, true)).To(BeEmpty(), "a refused batch changes nothing")
	g.Expect(fw.Set(map[Flow]netip.Addr{f2: a4, f6: a6})).To(Succeed())
	g.Expect(mapElements(g, ns, true)).To(Equal(map[Flow]netip.Addr{f2: a4}))
	g.Expect(mapElements(g, ns, false)).To(Equal(map[Flow]netip.Addr{f6: a6}))
	// Again, with an entry in the kernel that the rewrite flushes and adds back in one batch.
	deleteElement(g, ns, f6)
	g.Expect(fw.Set(map[Flow]netip.Addr{f2: b4})).To(MatchError(ContainSubstring("updating the owner maps")))
	g.Expect(fw.Set(map[Flow]netip.Addr{f2: b4})).To(Succeed())
	g.Expect(mapElements(g, ns, true)).To(Equal(map[Flow]netip.Addr{f2: b4}))
	g.Expect(mapElements(g, ns, false)).To(BeEmpty())

	g.Expect(fw.Set(nil)).To(Succeed())
	g.Expect(mapElements(g, ns, true)).To(BeEmpty())
	g.Expect(mapElements(g, ns, false)).To(BeEmpty())

	// Unchanged owners make no batch: with the tables gone behind its back, the same Set still
	// succeeds, and a different one fails.
	g.Expect(fw.Set(map[Flow]netip.Addr{f1: a4})).To(Succeed())
	g.Expect(ns.Do(RemoveStale)).To(Succeed())
	g.Expect(fw.Set(map[Flow]netip.Addr{f1: a4})).To(Succeed())
	g.Expect(fw.Set(map[Flow]netip.Addr{f1: b4})).To(MatchError(ContainSubstring("updating the owner maps")))

	g.Expect(fw.Close()).To(Succeed())
	g.Expect(tables(g, ns)).To(BeEmpty())
	g.Expect(fw.Close()).To(Succeed(), "Close is idempotent")
	g.Expect(fw.Set(map[Flow]netip.Addr{f1: a4})).To(MatchError(ContainSubstring("closed")))
}

// TestForwarderReplacesAndRemoveStale: tables a killed run left behind are replaced by
// NewForwarder (entries and all) and removed by RemoveStale.
func TestForwarderReplacesAndRemoveStale(t *testing.T) {
	g := NewWithT(t)
	l := lab.NewT(t, "flw-stale")
	ns, err := l.AddNamespace("n")
	g.Expect(err).NotTo(HaveOccurred())
	newForwarder := func() *Forwarder {
		var fw *Forwarder
		g.Expect(ns.Do(func() (err error) { fw, err = NewForwarder(ForwarderConfig{}); return err })).To(Succeed())
		return fw
	}
	killed := newForwarder() // never closed: its run was killed
	g.Expect(killed.Set(map[Flow]netip.Addr{flow("10.9.0.2:40000", "10.9.9.9:6443"): netip.MustParseAddr("10.9.0.11")})).To(Succeed())

	fw := newForwarder()
	g.Expect(mapElements(g, ns, true)).To(BeEmpty(), "NewForwarder starts from empty maps")
	g.Expect(tables(g, ns)).To(ConsistOf("ip "+Table, "ip6 "+Table))

	g.Expect(ns.Do(RemoveStale)).To(Succeed())
	g.Expect(tables(g, ns)).To(BeEmpty())
	g.Expect(ns.Do(RemoveStale)).To(Succeed(), "nothing to remove is not an error")
	g.Expect(fw.Close()).To(Succeed(), "closing after the tables went is not an error")
	g.Expect(killed.Close()).To(Succeed())
}

// deleteElement removes fl's entry from ns's owner map directly, as another program could.
func deleteElement(g Gomega, ns *lab.Netns, fl Flow) {
	fm := familyOf(fl.Service.Addr().Is4())
	c, err := nftables.New(nftables.WithNetNSFd(int(ns.Handle())))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(c.SetDeleteElements(fm.ownersMap(fm.table()), []nftables.SetElement{{Key: elemKey(fl)}})).To(Succeed())
	g.Expect(c.Flush()).To(Succeed())
}

// TestForwarderEndToEnd is the rehash a rolling replacement causes: the client's route to the VIP
// moves from member A to member B. Without an entry, B resets A's connection; with one, B sends
// it on to A, which answers and sees the client's FIN.
func TestForwarderEndToEnd(t *testing.T) {
	for _, tc := range []struct {
		name string
		v6   bool
	}{{"ipv4", false}, {"ipv6", true}} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			s := newSegment(t, g, "flw-e2e-"+tc.name[2:], tc.v6)

			lost := s.dial(g)
			defer lost.Close()
			g.Expect(lost.ask("hello")).To(Equal("A: hello"))
			s.route(g, s.bIP)
			start := time.Now()
			_, err := lost.ask("after the move")
			g.Expect(isReset(err)).To(BeTrue(), "without an entry B resets A's connection: %v", err)
			g.Expect(time.Since(start)).To(BeNumerically(">=", HoldUnknown), "but only after holding it for its owner's list")
			g.Expect(s.forwarderB.Held()).To(BeNumerically(">", 0))

			// Moved before its entry arrives (it started less than a sharing interval before the
			// rehash): held, then sent on once the entry is there.
			s.route(g, s.aIP)
			late := s.dial(g)
			defer late.Close()
			g.Expect(late.ask("hello")).To(Equal("A: hello"))
			held := s.forwarderB.Held()
			s.route(g, s.bIP)
			answer := make(chan string, 1)
			go func() {
				got, err := late.ask("moved before its entry")
				answer <- fmt.Sprint(got, err)
			}()
			g.Eventually(s.forwarderB.Held).WithTimeout(5*time.Second).Should(BeNumerically(">", held), "B holds the segment")
			g.Expect(s.forwarderB.Set(map[Flow]netip.Addr{late.flow(s.service): s.aIP})).To(Succeed())
			g.Eventually(answer).WithTimeout(5 * time.Second).Should(Receive(Equal("A: moved before its entry<nil>")))

			// The same with B copying held segments to its peers: A, the owner, answers at once
			// (the client's first try, before any retransmission), without an entry.
			s.route(g, s.aIP)
			sprayed := s.dial(g)
			defer sprayed.Close()
			g.Expect(sprayed.ask("hello")).To(Equal("A: hello"))
			g.Expect(s.forwarderB.SetPeers([]netip.Addr{s.aIP})).To(Succeed())
			held = s.forwarderB.Held()
			s.route(g, s.bIP)
			start = time.Now()
			g.Expect(sprayed.ask("copied to the peers")).To(Equal("A: copied to the peers"))
			g.Expect(time.Since(start)).To(BeNumerically("<", 150*time.Millisecond), "no retransmission needed")
			g.Expect(s.forwarderB.Held()).To(BeNumerically(">", held))
			g.Expect(s.forwarderB.SetPeers(nil)).To(Succeed())

			s.route(g, s.aIP)
			kept := s.dial(g)
			defer kept.Close()
			g.Expect(kept.ask("hello")).To(Equal("A: hello"))
			fl := kept.flow(s.service)
			g.Expect(s.forwarderB.Set(map[Flow]netip.Addr{fl: s.aIP})).To(Succeed())
			s.route(g, s.bIP)
			g.Expect(kept.ask("after the move")).To(Equal("A: after the move"))
			g.Expect(s.forwarderB.Forwarded()).To(BeNumerically(">", 0))
			// A new connection is B's (a SYN is never sent on).
			fresh := s.dial(g)
			defer fresh.Close()
			g.Expect(fresh.ask("hello")).To(Equal("B: hello"))

			g.Expect(kept.Conn.(*net.TCPConn).CloseWrite()).To(Succeed())
			g.Eventually(func() bool { return s.serverA.sawEOF(fl.Client) }).WithTimeout(5*time.Second).
				Should(BeTrue(), "the client's FIN reaches A")
			_, err = kept.r.ReadString('\n')
			g.Expect(err).To(MatchError(io.EOF), "A's FIN reaches the client")
		})
	}
}

// TestForwarderLocalConnectionWins: an entry naming A never takes a connection B itself
// terminates (a stale entry, or one for a reused 4-tuple): B's established socket answers.
func TestForwarderLocalConnectionWins(t *testing.T) {
	g := NewWithT(t)
	s := newSegment(t, g, "flw-local", false)
	s.route(g, s.bIP)
	c := s.dial(g)
	defer c.Close()
	g.Expect(c.ask("hello")).To(Equal("B: hello"))
	g.Expect(s.forwarderB.Set(map[Flow]netip.Addr{c.flow(s.service): s.aIP})).To(Succeed())
	for i := range 3 {
		g.Expect(c.ask(fmt.Sprint("still mine ", i))).To(Equal(fmt.Sprint("B: still mine ", i)))
	}
	g.Expect(s.forwarderB.Forwarded()).To(BeZero())
	g.Expect(mapElements(g, s.b, true)).To(HaveLen(1), "the entry is there, and loses")
}

// TestForwarderLargeSet: a member's full share of flows (MaxFlows, half of them IPv6) goes in,
// moves owner and goes out, each in one batch, larger than netlink's default socket buffers.
func TestForwarderLargeSet(t *testing.T) {
	g := NewWithT(t)
	l := lab.NewT(t, "flw-large")
	ns, err := l.AddNamespace("n")
	g.Expect(err).NotTo(HaveOccurred())
	var fw *Forwarder
	g.Expect(ns.Do(func() (err error) { fw, err = NewForwarder(ForwarderConfig{}); return err })).To(Succeed())
	t.Cleanup(func() { _ = fw.Close() })
	owners := func(a4, a6 string) map[Flow]netip.Addr {
		out := make(map[Flow]netip.Addr, MaxFlows)
		for i := range MaxFlows / 2 {
			port := uint16(10000 + i%50000)
			c4 := netip.AddrFrom4([4]byte{10, 8, byte(i >> 8), byte(i)})
			out[Flow{Client: netip.AddrPortFrom(c4, port), Service: netip.MustParseAddrPort("10.9.9.9:6443")}] = netip.MustParseAddr(a4)
			c6 := netip.AddrFrom16([16]byte{0xfd, 0, 8, 14: byte(i >> 8), 15: byte(i)})
			out[Flow{Client: netip.AddrPortFrom(c6, port), Service: netip.MustParseAddrPort("[fd00:9:9::9]:6443")}] = netip.MustParseAddr(a6)
		}
		return out
	}
	// A dump of a large map the kernel is still resizing (rhashtable) may repeat some elements
	// and miss others: the listing settles; lookups are right all along.
	elements := func(is4 bool) func() map[Flow]netip.Addr {
		return func() map[Flow]netip.Addr { return mapElements(g, ns, is4) }
	}
	g.Expect(fw.Set(owners("10.9.0.11", "fd00:9::11"))).To(Succeed())
	g.Eventually(elements(true)).WithTimeout(10 * time.Second).Should(HaveLen(MaxFlows / 2))
	g.Eventually(elements(false)).WithTimeout(10 * time.Second).Should(HaveLen(MaxFlows / 2))
	moved := owners("10.9.0.12", "fd00:9::12")
	g.Expect(fw.Set(moved)).To(Succeed())
	g.Eventually(elements(true)).WithTimeout(10 * time.Second).Should(HaveLen(MaxFlows / 2))
	g.Eventually(elements(false)).WithTimeout(10 * time.Second).Should(Equal(func() map[Flow]netip.Addr {
		v6 := map[Flow]netip.Addr{}
		for f, o := range moved {
			if o.Is6() {
				v6[f] = o
			}
		}
		return v6
	}()))
	g.Expect(fw.Set(nil)).To(Succeed())
	g.Eventually(elements(true)).WithTimeout(10 * time.Second).Should(BeEmpty())
}
