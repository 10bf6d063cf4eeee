//go:build linux

package arp_test

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/caplb/caplb/e2e/lab"
	"github.com/caplb/caplb/e2e/lab/arplab"
)

// hogsPerNode busy loops run beside each node's agent while a member boots: with four nodes,
// 24 runnable loops on the lab's 2 cores, above the load a kubeadm member's boot puts on a real
// control plane (15-28 in the lifecycle lab, where the spurious claims of issue 36 were seen).
const hogsPerNode = 6

// starvedGapGoal is the longest the client may go without a successful connect through the
// VIP while the cores are starved: the rollout's gap goal (e2e/lifecycle MaxGapGoalMS).
const starvedGapGoal = 200 * time.Millisecond

// TestNoSpuriousClaimWhileStarved: a live, healthy holder is never joined by a second claimer
// while every member's CPU is starved and a new member boots (its agent starts while its API
// server is not ready yet, then becomes ready). Throughout, sampled every 10 ms in the nodes'
// kernels: exactly one holder, never two, never none; and a client connecting every 20 ms
// never fails and never waits starvedGapGoal or longer between two answers.
//
// The loops are tasks among all, as a real machine's etcd and kube-apiserver are beside its
// agent. Not asserted: each machine in a CPU group of its own (arplab had the option), where
// the agent and its API server share a quarter of the cores with six loops. It passed 6 of 6
// runs alone; once, beside make test's idle-priority packages, the starved API servers' own
// /readyz timed out and nobody held the VIP for about 3 s: the holder let go and the next claim
// came late, not a claim beside a live holder (docs/backends/arp.md; not yet explained).
func TestNoSpuriousClaimWhileStarved(t *testing.T) {
	c, owner := startCluster(t, "arpstarve", arplab.ClusterOptions{
		Nodes: 4,
		Idle:  func(i int) bool { return i == 3 },
	})
	g := NewWithT(t)
	booting := c.Nodes[3]
	g.Expect(owner).NotTo(Equal(booting))

	holders := newStrictHolderSampler(c)
	conns := newGapSampler(c, 20*time.Millisecond)

	// Starve every member: busy loops in each node's namespace, as the booting member's etcd
	// and kube-apiserver compete with everything else on a real control plane.
	var hogs []*lab.Process
	defer func() {
		for _, h := range hogs {
			_ = h.Stop(time.Second)
		}
	}()
	for _, n := range c.Nodes {
		for i := range hogsPerNode {
			p, err := n.NS.Start(n.Name+"-hog"+strconv.Itoa(i), []string{"sh", "-c", "while :; do :; done"}, nil)
			g.Expect(err).NotTo(HaveOccurred())
			hogs = append(hogs, p)
		}
	}

	// The member boots: its agent starts while its API server is not ready.
	g.Expect(booting.SetHealthy(false)).To(Succeed())
	g.Expect(c.StartAgent(booting)).To(Succeed())
	g.Eventually(func(g Gomega) {
		st := statusG(g, booting)
		g.Expect(st.MembersSeen).To(Equal(len(c.Nodes)), "the booting member sees every member")
	}, 30*time.Second, 100*time.Millisecond).Should(Succeed())
	// Then its API server becomes ready and it is a candidate like the others.
	g.Expect(booting.SetHealthy(true)).To(Succeed())
	g.Eventually(func(g Gomega) {
		for _, n := range c.Nodes {
			st := statusG(g, n)
			g.Expect(st.Healthy).To(BeTrue(), "%s healthy", n.Name)
			g.Expect(st.MembersSeen).To(Equal(len(c.Nodes)), "%s sees every member", n.Name)
		}
	}, 30*time.Second, 100*time.Millisecond).Should(Succeed())
	// Starved a while longer with all four members up: the steady state must hold too.
	steady := time.Now().Add(5 * time.Second)
	g.Eventually(func() bool { return time.Now().After(steady) }, 10*time.Second, 100*time.Millisecond).Should(BeTrue())

	for _, h := range hogs {
		// A busy loop ends only by the signal Stop sends: its "error" is that signal.
		var exit *exec.ExitError
		if err := h.Stop(time.Second); !errors.As(err, &exit) {
			g.Expect(err).NotTo(HaveOccurred(), "stopping %s", h.Name())
		}
	}
	hogs = nil
	samples, bad := holders.stop()
	tries, failures, gap := conns.stop()
	t.Logf("starved: %d holder samples, %d connects, longest gap %v", samples, tries, gap.Round(time.Millisecond))
	g.Expect(samples).To(BeNumerically(">", 500), "the holder sampler ran throughout")
	g.Expect(bad).To(BeEmpty(), "exactly one holder in every sample (owner %s)", owner.Name)
	g.Expect(tries).To(BeNumerically(">", 100), "the client ran throughout")
	g.Expect(failures).To(BeEmpty(), "no connect through the VIP failed")
	g.Expect(gap).To(BeNumerically("<", starvedGapGoal), "longest time between two answers through the VIP")
	g.Expect(holdersNow(t, c, arplab.VIPv4)).To(Equal([]string{owner.Name}), "the holder never changed")
}

// strictHolderSampler samples the VIP's holders every 10 ms (kernel truth) and records every
// sample in which not exactly one node holds it: where no hand-over happens, none is forgiven.
type strictHolderSampler struct {
	mu      sync.Mutex
	samples int
	bad     []string
	cancel  context.CancelFunc
	done    chan struct{}
}

func newStrictHolderSampler(c *arplab.Cluster) *strictHolderSampler {
	ctx, cancel := context.WithCancel(context.Background())
	s := &strictHolderSampler{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			h, err := c.Holders(arplab.VIPv4)
			s.mu.Lock()
			s.samples++
			switch {
			case err != nil:
				s.bad = append(s.bad, fmt.Sprintf("%s %v", time.Now().Format("15:04:05.000"), err))
			case len(h) != 1:
				s.bad = append(s.bad, fmt.Sprintf("%s holders=%v", time.Now().Format("15:04:05.000"), h))
			}
			s.mu.Unlock()
		}
	}()
	return s
}

func (s *strictHolderSampler) stop() (samples int, bad []string) {
	s.cancel()
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.samples, first(s.bad, 20)
}

// gapSampler connects the client to the VIP every interval and records the failures and the
// longest time between two successful connects.
type gapSampler struct {
	mu       sync.Mutex
	tries    int
	failures []string
	lastOK   time.Time
	gap      time.Duration
	cancel   context.CancelFunc
	done     chan struct{}
}

func newGapSampler(c *arplab.Cluster, interval time.Duration) *gapSampler {
	ctx, cancel := context.WithCancel(context.Background())
	s := &gapSampler{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			cctx, ccancel := context.WithTimeout(ctx, time.Second)
			_, err := c.Connect(cctx, arplab.VIPv4)
			ccancel()
			if ctx.Err() != nil {
				return // cut short by stop
			}
			now := time.Now()
			s.mu.Lock()
			s.tries++
			if err != nil {
				s.failures = append(s.failures, fmt.Sprintf("%s %v", now.Format("15:04:05.000"), err))
			} else {
				if !s.lastOK.IsZero() && now.Sub(s.lastOK) > s.gap {
					s.gap = now.Sub(s.lastOK)
				}
				s.lastOK = now
			}
			s.mu.Unlock()
		}
	}()
	return s
}

func (s *gapSampler) stop() (tries int, failures []string, gap time.Duration) {
	s.cancel()
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.tries, first(s.failures, 20), s.gap
}
