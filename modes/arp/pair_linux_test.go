//go:build linux

package arp_test

import (
	"context"
	"net"
	"net/netip"
	"testing"

	"github.com/go-logr/logr"
	mdarp "github.com/mdlayher/arp"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/caplb/caplb/e2e/lab"
	"github.com/caplb/caplb/modes/arp"
	"github.com/caplb/caplb/modes/dataplane"
)

// pair is the data plane's node (a) and a neighbour (b) on one link, each
// on eth0, with a raw ARP client on b that sees what a announces and can
// speak for other hosts.
type pair struct {
	a, b *lab.Netns
	c    *mdarp.Client
}

// newPair builds the pair in a lab named name; aPrefix "" leaves a without
// an address of its own.
func newPair(t *testing.T, g Gomega, name, aPrefix, bPrefix string) pair {
	t.Helper()
	l := lab.NewT(t, name)
	a, err := l.AddNamespace("a")
	g.Expect(err).NotTo(HaveOccurred())
	b, err := l.AddNamespace("b")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(l.AddLink(a, "eth0", b, "eth0")).To(Succeed())
	if aPrefix != "" {
		g.Expect(a.AddAddr("eth0", netip.MustParsePrefix(aPrefix))).To(Succeed())
	}
	g.Expect(b.AddAddr("eth0", netip.MustParsePrefix(bPrefix))).To(Succeed())
	p := pair{a: a, b: b}
	g.Expect(b.Do(func() error {
		ifi, err := net.InterfaceByName("eth0")
		if err != nil {
			return err
		}
		p.c, err = mdarp.Dial(ifi)
		return err
	})).To(Succeed())
	t.Cleanup(func() { _ = p.c.Close() })
	return p
}

// announce starts the data plane on a's eth0 with cfg and announces vips;
// it is closed when the test ends (Close is idempotent).
func (p pair) announce(t *testing.T, g Gomega, cfg arp.Config, reg prometheus.Registerer, vips ...netip.Addr) *arp.Announcer {
	t.Helper()
	cfg.Interface = "eth0"
	var dp *arp.Announcer
	g.Expect(p.a.Do(func() error {
		var err error
		if dp, err = arp.New(cfg, logr.Discard(), reg); err != nil {
			return err
		}
		return dp.Sync(context.Background(), dataplane.Desired{Announce: true, VIPs: vips})
	})).To(Succeed())
	t.Cleanup(func() { _ = p.a.Do(func() error { return dp.Close(context.Background()) }) })
	return dp
}
