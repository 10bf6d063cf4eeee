//go:build linux

package flows

import (
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/google/nftables"
	. "github.com/onsi/gomega"

	"github.com/caplb/caplb/e2e/lab"
)

// TestForwarderSprayIsBounded: segments of 4-tuples nobody knows (spoofed) make a member copy
// them to its peers at most at the copy rate, and only those to the served ports.
func TestForwarderSprayIsBounded(t *testing.T) {
	g := NewWithT(t)
	const rate, burst = 100, 100
	s := newSegmentWith(t, g, "flw-spray", false, ForwarderConfig{Ports: []uint16{servicePort}, CopyRate: rate, CopyBurst: burst})
	g.Expect(s.forwarderB.SetPeers([]netip.Addr{s.aIP})).To(Succeed())
	copied := addProbe(g, s.a, false, servicePort)
	otherPort := addProbe(g, s.a, false, noListenerPort)
	s.route(g, s.bIP)

	start := time.Now()
	sendACKs(g, s.client, randomFlows(10000, netip.AddrPortFrom(s.vip, servicePort)))
	sendACKs(g, s.client, randomFlows(1000, netip.AddrPortFrom(s.vip, noListenerPort)))
	elapsed := time.Since(start)
	g.Eventually(s.forwarderB.Held).WithTimeout(5*time.Second).WithPolling(20*time.Millisecond).
		Should(BeNumerically(">=", 10000), "B holds every segment to the served port")
	// Everything sent: the copies still in flight land within a few milliseconds.
	most := uint64(burst + rate*(elapsed+time.Second).Seconds())
	g.Consistently(copied).WithTimeout(500*time.Millisecond).WithPolling(50*time.Millisecond).
		Should(And(BeNumerically(">=", burst), BeNumerically("<=", most)), "A gets at most the copy rate's worth (sent in %s)", elapsed)
	g.Expect(s.forwarderB.CopiesLimited()).To(BeNumerically(">=", 10000-most))
	g.Expect(s.forwarderB.Held()).To(Equal(uint64(10000)), "only segments to the served port are held")
	g.Expect(otherPort()).To(BeZero(), "a segment to a port the VIPs do not serve is not copied")
}

// TestForwarderHoldsWithFullSets: with the held and seen sets filled (by spoofed 4-tuples), a
// connection the router moves before its owner's list names it is still held — here its
// segment's copy reaches its owner, which answers — not reset, and the overflow is counted.
func TestForwarderHoldsWithFullSets(t *testing.T) {
	g := NewWithT(t)
	const entries = 4096
	s := newSegmentWith(t, g, "flw-full", false, ForwarderConfig{HoldEntries: entries})
	g.Expect(s.forwarderB.SetPeers([]netip.Addr{s.aIP})).To(Succeed())
	service := netip.AddrPortFrom(s.vip, servicePort)
	fillHoldSets(g, s.b, randomFlows(entries, service))

	c := s.dial(g)
	defer c.Close()
	g.Expect(c.ask("hello")).To(Equal("A: hello"))
	s.route(g, s.bIP)
	g.Expect(c.ask("moved with the sets full")).To(Equal("A: moved with the sets full"), "held and copied to its owner, not reset")
	g.Expect(s.forwarderB.HoldFull()).To(BeNumerically(">", 0), "the overflow is counted")
}

// randomFlows are n (at most 2^17) distinct flows to service from clients in 198.18.0.0/15 (a
// benchmarking range nobody here uses), on random ports.
func randomFlows(n int, service netip.AddrPort) []Flow {
	out := make([]Flow, n)
	for i := range out {
		a := [4]byte{198, 18 + byte(i>>16&1), byte(i >> 8), byte(i)}
		out[i] = Flow{Client: netip.AddrPortFrom(netip.AddrFrom4(a), uint16(1024+rand.IntN(60000))), Service: service}
	}
	return out
}

// fillHoldSets adds fls to the IPv4 held and seen sets in ns over netlink, as segments of as
// many spoofed connections would.
func fillHoldSets(g Gomega, ns *lab.Netns, fls []Flow) {
	fm := familyOf(true)
	c, err := nftables.New(nftables.WithNetNSFd(int(ns.Handle())))
	g.Expect(err).NotTo(HaveOccurred())
	for _, name := range []string{fm.heldName, fm.seenName} {
		set, err := c.GetSetByName(fm.table(), name)
		g.Expect(err).NotTo(HaveOccurred())
		var elems []nftables.SetElement
		for _, fl := range fls {
			elems = append(elems, nftables.SetElement{Key: elemKey(fl), Timeout: time.Minute})
		}
		// One batch per message: a batch is one sendmsg, within the default socket buffer.
		for chunk := range slices.Chunk(elems, elemsPerMessage) {
			g.Expect(c.SetAddElements(set, chunk)).To(Succeed())
			g.Expect(c.Flush()).To(Succeed(), "filling %s", name)
		}
	}
}
