//go:build linux

package arp

import (
	"net/netip"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/nftables"
	. "github.com/onsi/gomega"

	"github.com/caplb/caplb/modes/dataplane"
)

// TestSpreadKernel programs the spread table into a real kernel (a fresh
// namespace) and reads the set back in dealing order; IPv6 replaces IPv4
// rather than adding to it; without IP forwarding it refuses, naming the
// sysctl.
func TestSpreadKernel(t *testing.T) {
	inFreshNetns(t, func() {
		g := NewWithT(t)
		on := filepath.Join(t.TempDir(), "forwarding")
		g.Expect(os.WriteFile(on, []byte("1\n"), 0o644)).To(Succeed())
		k := nftSpread{forwardingFile: func(bool) string { return on }}
		vips := []netip.Addr{netip.MustParseAddr("10.0.0.100"), netip.MustParseAddr("fd00::100")}
		v4 := dataplane.Spread{Ports: []uint16{6443, 9345}, Source: netip.MustParseAddr("10.0.0.11"),
			Backends: []netip.Addr{netip.MustParseAddr("10.0.0.13"), netip.MustParseAddr("10.0.0.11"), netip.MustParseAddr("10.0.0.12")}}
		g.Expect(k.install(vips, v4)).To(Succeed())
		g.Expect(k.install(vips, v4)).To(Succeed(), "a replace, not an error")
		g.Expect(k.backends()).To(Equal(v4.Backends))
		g.Expect(listTables(g)).To(ConsistOf("ip " + SpreadTable))
		// (google/nftables cannot decode the numgen rules back; e2e/arp's
		// TestSpread proves what they do with real packets.)
		c, err := nftables.New()
		g.Expect(err).NotTo(HaveOccurred())
		chains, err := c.ListChainsOfTableFamily(nftables.TableFamilyIPv4)
		g.Expect(err).NotTo(HaveOccurred())
		var names []string
		for _, ch := range chains {
			names = append(names, ch.Name+" "+string(ch.Type))
		}
		g.Expect(names).To(ConsistOf("prerouting nat", "postrouting nat"))

		v6 := dataplane.Spread{Ports: []uint16{6443}, Source: netip.MustParseAddr("fd00::11"),
			Backends: []netip.Addr{netip.MustParseAddr("fd00::11"), netip.MustParseAddr("fd00::12")}}
		g.Expect(k.install(vips, v6)).To(Succeed())
		g.Expect(listTables(g)).To(ConsistOf("ip6 " + SpreadTable))
		g.Expect(k.backends()).To(Equal(v6.Backends))

		counts, err := k.count(vips)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(counts).To(BeEmpty(), "no connection in a fresh namespace")

		g.Expect(k.remove()).To(Succeed())
		g.Expect(listTables(g)).To(BeEmpty())
		g.Expect(k.remove()).To(Succeed(), "removing what is not there is not an error")
		g.Expect(k.backends()).To(BeEmpty())

		off := filepath.Join(t.TempDir(), "off")
		g.Expect(os.WriteFile(off, []byte("0\n"), 0o644)).To(Succeed())
		k.forwardingFile = func(bool) string { return off }
		g.Expect(k.install(vips, v4)).To(MatchError(ContainSubstring("spread needs IP forwarding")))
		g.Expect(listTables(g)).To(BeEmpty())
	})
}
