//go:build linux

package arp_test

import (
	"context"
	"slices"
	"syscall"
	"testing"
	"time"

	agentv1 "github.com/caplb/caplb/api/agent/v1alpha1"

	. "github.com/onsi/gomega"

	"github.com/caplb/caplb/e2e/lab"
	"github.com/caplb/caplb/e2e/lab/arplab"
)

// TestFailover injects each fault on the owner of one three-node cluster and
// checks that the VIP moves to a healthy member that the client reaches, that
// the faulty node lets go, that repairing the fault converges to one owner
// without moving the VIP back (no flapping on rejoin), and that outside
// bounded transition windows exactly one node holds the VIP throughout.
func TestFailover(t *testing.T) {
	c, _ := startCluster(t, "arpfail", arplab.ClusterOptions{})
	s := newOwnerSampler(c, arplab.VIPv4)
	defer s.check(t)

	cases := []struct {
		name string
		// fault breaks the owner and returns its repair.
		fault func(t *testing.T, owner *arplab.Node) (repair func())
		// staleUntilRepair: the faulty node keeps the VIP in its kernel
		// until repaired (SIGKILL: nothing can clean up until the restart).
		staleUntilRepair bool
	}{
		{name: "sigkill", staleUntilRepair: true, fault: func(t *testing.T, o *arplab.Node) func() {
			must(t, o.Agent.Signal(syscall.SIGKILL))
			return func() {
				_ = o.Agent.Wait(5 * time.Second)
				must(t, c.StartAgent(o))
			}
		}},
		{name: "health failure", fault: func(t *testing.T, o *arplab.Node) func() {
			must(t, o.SetHealthy(false))
			return func() { must(t, o.SetHealthy(true)) }
		}},
		{name: "link cut", fault: func(t *testing.T, o *arplab.Node) func() {
			must(t, c.Cut(o))
			return func() { must(t, c.Restore(o)) }
		}},
		{name: "partition", fault: func(t *testing.T, o *arplab.Node) func() {
			must(t, c.Isolate(o))
			return func() { must(t, c.Heal()) }
		}},
		{name: "slow network", fault: func(t *testing.T, o *arplab.Node) func() {
			// 400 ms each way on the owner's port: far beyond the probe
			// timeout, so the others declare it dead and it loses quorum.
			im, err := c.Lab.Impair(c.Switch, arplab.Bridge, o.Port, lab.Netem{Delay: 400 * time.Millisecond})
			must(t, err)
			return func() { must(t, im.Close()) }
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			owner := waitSingleOwner(t, c, nil, 20*time.Second)
			waitAllSeeAll(t, c)
			s.mark(tc.name + " on " + owner.Name)
			if tc.staleUntilRepair {
				s.setStale(owner.Name, true)
			}
			repair := tc.fault(t, owner)

			var next *arplab.Node
			if tc.staleUntilRepair {
				next = waitClientReachesOther(t, c, owner, 10*time.Second)
			} else {
				next = waitSingleOwner(t, c, []*arplab.Node{owner}, 10*time.Second)
			}
			g.Expect(next.Name).NotTo(Equal(owner.Name))

			s.mark("repair " + tc.name)
			repair()
			after := waitSingleOwner(t, c, nil, 20*time.Second)
			s.setStale(owner.Name, false) // one holder in the kernels: the restart removed the leftover
			waitAllSeeAll(t, c)
			g.Expect(after.Name).To(Equal(next.Name), "the VIP stays with the new owner after the old one is back")
		})
	}
}

// TestMinorityNeverClaims isolates members and checks that a node seeing
// fewer than a majority never holds the VIP, and releases it if it did.
func TestMinorityNeverClaims(t *testing.T) {
	c, owner := startCluster(t, "arpminor", arplab.ClusterOptions{})
	g := NewWithT(t)
	var backup *arplab.Node
	for _, n := range c.Nodes {
		if n != owner {
			backup = n
			break
		}
	}

	// A backup alone in its segment: the owner keeps the VIP (2 of 3 is a
	// majority) and the backup never claims, for well over the detection time.
	must(t, c.Isolate(backup))
	g.Eventually(func(g Gomega) {
		st, err := owner.Status(context.Background())
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(st.Members[idx(c, backup)].Alive).To(BeFalse())
	}, 10*time.Second, 50*time.Millisecond).Should(Succeed(), "the owner notices the isolated backup")
	g.Consistently(func() []string { return holdersNow(t, c, arplab.VIPv4) }, 3*time.Second, 20*time.Millisecond).
		Should(Equal([]string{owner.Name}))
	must(t, c.Heal())
	waitAllSeeAll(t, c)

	// Two of three agents stop: the survivor (the owner) is a minority of
	// one and must release; it never claims while alone.
	var others []*arplab.Node
	for _, n := range c.Nodes {
		if n != owner {
			others = append(others, n)
			must(t, n.Agent.Stop(10*time.Second))
		}
	}
	g.Eventually(func() []string { return holdersNow(t, c, arplab.VIPv4) }, 10*time.Second, 20*time.Millisecond).Should(BeEmpty())
	g.Consistently(func() []string { return holdersNow(t, c, arplab.VIPv4) }, 2*time.Second, 20*time.Millisecond).Should(BeEmpty())
	st := status(t, owner)
	g.Expect(st.Quorum).To(BeFalse())
	g.Expect(st.MembersSeen).To(Equal(1))

	// One comes back: quorum again, one owner.
	must(t, c.StartAgent(others[0]))
	waitSingleOwner(t, c, nil, 20*time.Second)
}

// TestUnhealthyReleases: a node whose API server is unhealthy releases the
// VIP even when nobody can take it over, and a healthy one claims it.
// TestNobodyHealthy: every API server failing at once (etcd lost quorum).
// By default (fail-open) the owner keeps the VIP so that recovery tools
// reach an endpoint; with election.failOpen: false everybody releases. Either
// way, the first node to recover owns the VIP.
func TestNobodyHealthy(t *testing.T) {
	for _, tc := range []struct {
		name, lab string
		failOpen  *bool
	}{
		{"fail-open keeps the VIP on the owner", "arpunhl", nil},
		{"failOpen false releases", "arpunhl2", new(false)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, owner := startCluster(t, tc.lab, arplab.ClusterOptions{Tune: func(_ int, cfg *agentv1.AgentConfiguration) {
				cfg.Election.FailOpen = tc.failOpen
			}})
			g := NewWithT(t)
			for _, n := range c.Nodes {
				must(t, n.SetHealthy(false))
			}
			for _, n := range c.Nodes {
				g.Eventually(func() bool { return status(t, n).Eligible }, 10*time.Second, 20*time.Millisecond).Should(BeFalse())
			}
			// Each node's checks fail a little apart: a member still healthy for a moment may
			// claim from the failing owner, then fail too. Fail-open keeps exactly one holder
			// (the more preferred of the two); without it nobody holds.
			want := 0
			if tc.failOpen == nil {
				want = 1
			}
			g.Eventually(func() []string { return holdersNow(t, c, arplab.VIPv4) }, 10*time.Second, 20*time.Millisecond).Should(HaveLen(want))
			holders := holdersNow(t, c, arplab.VIPv4)
			g.Consistently(func() []string { return holdersNow(t, c, arplab.VIPv4) }, time.Second, 20*time.Millisecond).Should(Equal(holders))
			if want == 1 && holders[0] != owner.Name {
				t.Logf("%s claimed while the failure spread; it keeps the VIP", holders[0])
				owner = c.Node(holders[0])
			}
			if want == 1 {
				// The fail-open holder is the only way to the VIP: a client that resolves it
				// afresh (its cache expired) must still be answered.
				_, err := c.Client.Run(context.Background(), "ip", "neigh", "flush", "dev", "eth0")
				must(t, err)
				g.Eventually(func() (string, error) {
					ctx, cancel := context.WithTimeout(context.Background(), time.Second)
					defer cancel()
					return c.Connect(ctx, arplab.VIPv4)
				}, 5*time.Second, 50*time.Millisecond).Should(Equal(holders[0]))
			}

			var last *arplab.Node
			for _, n := range c.Nodes {
				if n != owner {
					last = n
				}
			}
			must(t, last.SetHealthy(true))
			got := waitSingleOwner(t, c, []*arplab.Node{owner}, 10*time.Second)
			g.Expect(got.Name).To(Equal(last.Name), "the only healthy node owns the VIP")
		})
	}
}

func waitAllSeeAll(t *testing.T, c *arplab.Cluster) {
	t.Helper()
	NewWithT(t).Eventually(func(g Gomega) {
		for _, n := range c.Nodes {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			s, err := n.Status(ctx)
			cancel()
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(s.MembersSeen).To(Equal(len(c.Nodes)), "%s sees everybody", n.Name)
			g.Expect(s.Eligible).To(BeTrue(), "%s eligible", n.Name)
		}
	}, 20*time.Second, 100*time.Millisecond).Should(Succeed())
}

// waitClientReachesOther waits until the client's connects land on a node
// other than old, and that node holds the VIP.
func waitClientReachesOther(t *testing.T, c *arplab.Cluster, old *arplab.Node, timeout time.Duration) *arplab.Node {
	t.Helper()
	var who string
	NewWithT(t).Eventually(func(g Gomega) {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		var err error
		who, err = c.Connect(ctx, arplab.VIPv4)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(who).NotTo(Equal(old.Name))
		g.Expect(holdersNow(t, c, arplab.VIPv4)).To(ContainElement(who))
	}, timeout, 20*time.Millisecond).Should(Succeed())
	return c.Node(who)
}

func idx(c *arplab.Cluster, n *arplab.Node) int { return slices.Index(c.Nodes, n) }

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
