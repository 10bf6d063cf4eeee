//go:build linux

package arp_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	agentv1 "github.com/caplb/caplb/api/agent/v1alpha1"
	"github.com/caplb/caplb/e2e/lab"
	"github.com/caplb/caplb/e2e/lab/arplab"
	"github.com/caplb/caplb/modes/agent"
)

// TestMembershipLifecycle runs agents with membership.dynamic through a
// control plane's life, the manager's part played by the test: it issues
// each version by writing it where the node's agent reads it (its state
// file, then SIGHUP: what the Node annotation does on a real cluster) on
// ONE node only, so that every other agent learns it by gossip. Bootstrap:
// the first node holds the VIP alone from version 0 with no members; a
// second node booted from the same data waits (its ARP probe finds the VIP
// answered). Scale 1 → 3 one member at a time, then a rollout (add a
// fourth, remove the oldest, three times; the oldest is often the owner,
// which hands over make-before-break). Throughout: exactly one holder, never
// none, and the client reaches the VIP on every try. Finally a node that was
// down while the membership changed comes back with an older version and
// converges from its peers without ever holding the VIP.
func TestMembershipLifecycle(t *testing.T) {
	g := NewWithT(t)
	l := lab.NewT(t, "mship")
	stateFile := func(i int) string { return filepath.Join(l.Dir(), fmt.Sprintf("n%d-membership.json", i+1)) }
	c, err := arplab.StartCluster(l, arplab.ClusterOptions{
		Nodes: 6, AgentBinary: bins.agent, StandinBinary: bins.standin,
		Idle: func(i int) bool { return i > 0 },
		Tune: func(i int, cfg *agentv1.AgentConfiguration) {
			// The bootstrap data every machine gets: version 0, no members.
			cfg.Members = nil
			cfg.Membership = agentv1.MembershipConfig{Dynamic: true, StateFile: stateFile(i)}
		},
	})
	g.Expect(err).NotTo(HaveOccurred())
	n := c.Nodes
	owner := waitSingleOwner(t, c, nil, 20*time.Second)
	g.Expect(owner.Name).To(Equal("n1"), "bootstrap: the only node holds the VIP alone")

	s := newOwnerSampler(c, arplab.VIPv4)
	s.noGap = true
	defer s.check(t)
	conn := newConnectSampler(c)
	defer conn.check(t)

	// Two first machines: n2 boots from the same version-0 data and waits.
	g.Expect(c.StartAgent(n[1])).To(Succeed())
	g.Eventually(func(g Gomega) {
		st := statusG(g, n[1])
		g.Expect(st.Waiting + st.Decision).To(ContainSubstring("another host answers for the VIP"))
	}, 10*time.Second, 50*time.Millisecond).Should(Succeed())

	running := []*arplab.Node{n[0], n[1]}
	var cur agentv1.Membership
	issue := func(members []*arplab.Node, via *arplab.Node) {
		t.Helper()
		cur = agentv1.Membership{Version: cur.Version + 1, Members: []agentv1.MemberConfig{}}
		for _, m := range members {
			cur.Members = append(cur.Members, agentv1.MemberConfig{Name: m.Name, Address: m.Addr4.String()})
		}
		writeMembership(t, stateFile(idx(c, via)), cur)
		must(t, via.Agent.Signal(syscall.SIGHUP))
	}
	waitRunning := func(what string) {
		t.Helper()
		g.Eventually(func(g Gomega) {
			for _, r := range running {
				st := statusG(g, r)
				g.Expect(st.MembershipVersion).To(Equal(cur.Version), "%s runs version %d", r.Name, cur.Version)
				g.Expect(st.Report.Member).To(Equal(cur.Has(r.Name)), "%s member", r.Name)
				if cur.Has(r.Name) {
					g.Expect(st.MembersSeen).To(Equal(len(cur.Members)), "%s sees every member", r.Name)
				}
			}
		}, 20*time.Second, 100*time.Millisecond).Should(Succeed(), what)
	}

	// Version 1 = {n1}: n1 keeps holding with no gap (the sampler).
	before := status(t, n[0]).Transitions
	issue([]*arplab.Node{n[0]}, n[0])
	g.Eventually(func(g Gomega) int64 { return statusG(g, n[0]).MembershipVersion }, 10*time.Second, 50*time.Millisecond).Should(Equal(int64(1)))
	g.Expect(status(t, n[0]).Transitions).To(Equal(before), "no release when version 1 arrived")
	// Scale to 2, then 3, one member at a time; each version is given to one
	// node only.
	issue(n[0:2], n[0])
	waitRunning("n2 joins")
	g.Expect(c.StartAgent(n[2])).To(Succeed())
	running = append(running, n[2])
	issue(n[0:3], n[1])
	waitRunning("n3 joins")

	// Rollout: add a new machine, remove the oldest, three times.
	members := []*arplab.Node{n[0], n[1], n[2]}
	for round := 0; round < 3; round++ {
		add, remove := n[3+round], members[0]
		must(t, c.StartAgent(add))
		running = append(running, add)
		members = append(members, add)
		issue(members, members[1+round%2])
		waitRunning(fmt.Sprintf("round %d: %s added", round+1, add.Name))

		members = members[1:]
		issue(members, members[0])
		waitRunning(fmt.Sprintf("round %d: %s removed", round+1, remove.Name))
		g.Eventually(func() bool { return status(t, remove).Holding }, 10*time.Second, 50*time.Millisecond).Should(BeFalse(),
			"the removed member handed over")
		must(t, remove.Agent.Stop(5*time.Second))
		running = running[1:]
		waitSingleOwner(t, c, nil, 10*time.Second)
	}

	// A stale member: n5 is down while two versions go by, then restarts
	// from its state file (version 9 + ...) and must converge by gossip.
	owner = waitSingleOwner(t, c, nil, 10*time.Second)
	var stale *arplab.Node
	for _, m := range members {
		if m != owner {
			stale = m
			break
		}
	}
	staleVersion := cur.Version
	must(t, stale.Agent.Stop(5*time.Second))
	running = without(running, stale)
	others := without(members, stale)
	issue(others, others[0])
	waitRunning("stale member removed while down")
	issue(members, others[0])
	must(t, c.StartAgent(stale))
	running = append(running, stale)
	g.Eventually(func(g Gomega) int64 { return statusG(g, stale).MembershipVersion }, 20*time.Second, 50*time.Millisecond).
		Should(BeNumerically(">", staleVersion), "the stale member converges from its peers")
	waitRunning("stale member back")
	g.Expect(status(t, stale).Transitions).To(BeZero(), "the stale member never held the VIP")

	// A second agent started by mistake on the owner's node fails on the
	// gossip port before it could remove "stale" VIPs: the live owner's
	// address stays.
	owner = waitSingleOwner(t, c, nil, 10*time.Second)
	dup, err := owner.NS.Start(owner.Name+"-agent-dup", []string{bins.agent, "agent", "--config", owner.Config}, nil)
	g.Expect(err).NotTo(HaveOccurred())
	g.Eventually(func() bool { done, _ := dup.Exited(); return done }, 10*time.Second, 50*time.Millisecond).Should(BeTrue(), "the duplicate exits")
	_, exitErr := dup.Exited()
	g.Expect(exitErr).To(HaveOccurred(), "with an error (gossip port in use)")
	g.Expect(holdersNow(t, c, arplab.VIPv4)).To(Equal([]string{owner.Name}), "the owner keeps its VIP")
}

// statusG reads n's /status inside an Eventually (the agent may be starting).
func statusG(g Gomega, n *arplab.Node) agent.Status {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	st, err := n.Status(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	return st
}

func without(ns []*arplab.Node, x *arplab.Node) []*arplab.Node {
	var out []*arplab.Node
	for _, n := range ns {
		if n != x {
			out = append(out, n)
		}
	}
	return out
}

// writeMembership replaces path atomically, as the agent does.
func writeMembership(t *testing.T, path string, d agentv1.Membership) {
	t.Helper()
	b, err := json.Marshal(d)
	must(t, err)
	tmp := path + ".test-tmp"
	must(t, os.WriteFile(tmp, b, 0o600))
	must(t, os.Rename(tmp, path))
}

// connectSampler connects the client to the VIP every 50 ms and records
// the failures: the VIP must answer throughout.
type connectSampler struct {
	stop, done chan struct{}
	mu         sync.Mutex
	tries      int
	failures   []string
}

func newConnectSampler(c *arplab.Cluster) *connectSampler {
	s := &connectSampler{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		for {
			select {
			case <-s.stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			who, err := c.Connect(ctx, arplab.VIPv4)
			cancel()
			s.mu.Lock()
			s.tries++
			if err != nil {
				s.failures = append(s.failures, fmt.Sprintf("%s %v", time.Now().Format("15:04:05.000"), err))
			}
			_ = who
			s.mu.Unlock()
		}
	}()
	return s
}

func (s *connectSampler) check(t *testing.T) {
	t.Helper()
	close(s.stop)
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.tries < 20 {
		t.Errorf("only %d connects tried", s.tries)
	}
	if len(s.failures) > 0 {
		t.Errorf("%d of %d connects to the VIP failed:\n%v", len(s.failures), s.tries, first(s.failures, 20))
	}
}
