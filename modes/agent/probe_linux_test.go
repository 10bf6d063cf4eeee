//go:build linux

package agent

import (
	"context"
	"net/netip"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/caplb/caplb/e2e/lab"
)

// TestARPProberHearsTheHolder: with real packets on a link, the RFC 5227 probe hears a host that
// holds the VIP (as kube-vip's node does: the address on its interface, the kernel answering ARP)
// and hears nobody once the address is gone — the guard of a takeover's claim (claimWhenSilent).
func TestARPProberHearsTheHolder(t *testing.T) {
	g := NewWithT(t)
	l := lab.NewT(t, "agt-probe")
	holder, err := l.AddNamespace("h")
	g.Expect(err).NotTo(HaveOccurred())
	prober, err := l.AddNamespace("p")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(l.AddLink(holder, "eth0", prober, "eth0")).To(Succeed())
	g.Expect(holder.AddAddr("eth0", netip.MustParsePrefix("10.31.0.1/24"))).To(Succeed())
	g.Expect(prober.AddAddr("eth0", netip.MustParsePrefix("10.31.0.2/24"))).To(Succeed())
	vip := netip.MustParseAddr("10.31.0.100")
	g.Expect(holder.AddAddr("eth0", netip.PrefixFrom(vip, 32))).To(Succeed())

	probe := func() probeResult {
		var res probeResult
		g.Expect(prober.Do(func() (err error) {
			res, err = newARPProber("eth0").probe([]netip.Addr{vip})
			return err
		})).To(Succeed())
		return res
	}
	g.Expect(probe().answered).To(BeTrue(), "the holder's kernel answers for the VIP")

	_, err = holder.Run(context.Background(), "ip", "addr", "del", vip.String()+"/32", "dev", "eth0")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(probe()).To(Equal(probeResult{}), "nobody answers once the holder let go")
}
