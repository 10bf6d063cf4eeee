//go:build linux

package arp_test

import (
	"context"
	"net/netip"
	"slices"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/caplb/caplb/e2e/lab"
	"github.com/caplb/caplb/e2e/lab/arplab"
	"github.com/caplb/caplb/modes/agent"
)

// startCluster builds a lab named name with opts and waits until exactly one
// node holds every VIP; it returns the cluster and the owner.
func startCluster(t *testing.T, name string, opts arplab.ClusterOptions) (*arplab.Cluster, *arplab.Node) {
	t.Helper()
	l := lab.NewT(t, name)
	opts.AgentBinary, opts.StandinBinary = bins.agent, bins.standin
	c, err := arplab.StartCluster(l, opts)
	if err != nil {
		t.Fatalf("start cluster: %v", err)
	}
	owner := waitSingleOwner(t, c, nil, 15*time.Second)
	return c, owner
}

// waitSingleOwner waits until exactly one node (not in exclude) holds every
// VIP in its kernel, the client reaches it through each VIP, and it stays the
// only holder for a few samples.
func waitSingleOwner(t *testing.T, c *arplab.Cluster, exclude []*arplab.Node, timeout time.Duration) *arplab.Node {
	t.Helper()
	g := NewWithT(t)
	var owner string
	g.Eventually(func(g Gomega) {
		var holders []string
		for _, vip := range c.VIPs {
			h, err := c.Holders(vip)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(h).To(HaveLen(1), "holders of %s", vip)
			holders = append(holders, h[0])
		}
		g.Expect(slices.Compact(holders)).To(HaveLen(1), "one node holds every VIP")
		for _, n := range exclude {
			g.Expect(holders[0]).NotTo(Equal(n.Name))
		}
		for _, vip := range c.VIPs {
			ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
			who, err := c.Connect(ctx, vip)
			cancel()
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(who).To(Equal(holders[0]), "the client reaches the holder through %s", vip)
		}
		owner = holders[0]
	}, timeout, 50*time.Millisecond).Should(Succeed())
	return c.Node(owner)
}

// holdersNow lists the current holders of vip (kernel truth).
func holdersNow(t *testing.T, c *arplab.Cluster, vip netip.Addr) []string {
	t.Helper()
	h, err := c.Holders(vip)
	if err != nil {
		t.Fatalf("holders: %v", err)
	}
	return h
}

func status(t *testing.T, n *arplab.Node) agent.Status {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	s, err := n.Status(ctx)
	if err != nil {
		t.Fatalf("status: %v", err)
	}
	return s
}
