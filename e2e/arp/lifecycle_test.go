//go:build linux

package arp_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	agentv1 "github.com/caplb/caplb/api/agent/v1alpha1"
	"github.com/caplb/caplb/e2e/lab/arplab"

	. "github.com/onsi/gomega"
)

// TestVIPComesUpWithoutKubernetes: three agents and three stand-in API
// servers, no Kubernetes API anywhere: one owner holds the IPv4 and the IPv6
// VIP, the client reaches it through both, every agent agrees on the owner,
// and the admin endpoints explain it.
func TestVIPComesUpWithoutKubernetes(t *testing.T) {
	c, owner := startCluster(t, "arpup", arplab.ClusterOptions{IPv6: true})
	g := NewWithT(t)
	ctx := context.Background()
	// The kernel holds the VIPs a moment before the owner's /status says so (the data plane
	// is synced first, then the state adopted) and before gossip tells the others.
	g.Eventually(func(g Gomega) {
		for _, n := range c.Nodes {
			s := status(t, n)
			g.Expect(s.Owner).To(Equal(owner.Name), "%s agrees on the owner", n.Name)
			g.Expect(s.Quorum).To(BeTrue())
			g.Expect(s.Healthy).To(BeTrue())
			g.Expect(s.ConfigMismatch).To(BeEmpty())
			if n == owner {
				g.Expect(s.Role).To(Equal("owner"))
				g.Expect(s.Dataplane.Held).To(ConsistOf(arplab.VIPv4, arplab.VIPv6))
			} else {
				g.Expect(s.Role).To(Equal("backup"))
			}
		}
	}, 5*time.Second, 50*time.Millisecond).Should(Succeed())
	m, err := owner.Metrics(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(m).To(ContainSubstring("caplb_agent_owner 1"))
	g.Expect(m).To(ContainSubstring("caplb_agent_members_seen 3"))
	g.Expect(m).To(MatchRegexp(`caplb_agent_announcements_sent_total\{family="ipv4"\} [1-9]`))
	g.Expect(m).To(MatchRegexp(`caplb_agent_announcements_sent_total\{family="ipv6"\} [1-9]`))
	g.Expect(m).To(ContainSubstring(`caplb_agent_transitions_total{to="owner"} 1`))
	code, err := owner.Admin(ctx, "GET", "/healthz")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(code).To(Equal(200))
}

// TestGracefulHandover: POST /quiesce on the owner hands the VIP over
// make-before-break (no client connect fails, not even a handshake
// straddling the cache flip), the quiesced node stays out,
// and DELETE /quiesce lets it take part again without taking the VIP back.
// Then SIGTERM on the new owner does the same and the process exits with the
// VIP removed.
func TestGracefulHandover(t *testing.T) {
	c, owner := startCluster(t, "arpgrace", arplab.ClusterOptions{})
	g := NewWithT(t)
	ctx := context.Background()
	probe := startProbe(c)

	code, err := owner.Admin(ctx, "POST", "/quiesce")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(code).To(Equal(202))
	next := waitSingleOwner(t, c, []*arplab.Node{owner}, 10*time.Second)
	g.Expect(status(t, owner).Quiescing).To(BeTrue())
	g.Consistently(func() []string { return holdersNow(t, c, arplab.VIPv4) }, time.Second, 20*time.Millisecond).
		Should(Equal([]string{next.Name}), "the quiesced node stays out")
	code, err = owner.Admin(ctx, "DELETE", "/quiesce")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(code).To(Equal(202))
	g.Eventually(func() bool { return status(t, owner).Eligible }, 5*time.Second, 50*time.Millisecond).Should(BeTrue())
	g.Expect(holdersNow(t, c, arplab.VIPv4)).To(Equal([]string{next.Name}), "no preemption")

	must(t, next.Agent.Signal(syscall.SIGTERM))
	g.Expect(next.Agent.Wait(15*time.Second)).To(Succeed(), "exit status 0 after the hand-over")
	third := waitSingleOwner(t, c, []*arplab.Node{next}, 10*time.Second)
	g.Expect(third.Name).NotTo(Equal(next.Name))
	held, err := next.HoldsVIP(arplab.VIPv4)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(held).To(BeFalse(), "the VIP does not survive the agent's exit")

	ok, failed := probe.stop()
	g.Expect(ok).To(BeNumerically(">", 100), "the client kept connecting")
	// The successor forwards segments of flows it did not see start to the
	// draining old owner (nftables, programmed over netlink by the agent
	// itself), so a handshake whose SYN reached the old owner and whose ACK
	// reaches the successor completes there.
	g.Expect(failed).To(BeEmpty(), "no connect fails during a graceful hand-over")
}

// TestHandoverKeepsEstablished: a connection opened to the owner before a
// graceful hand-over keeps working during the drain, after the client's
// neighbour cache moved to the successor: the successor forwards segments of
// flows it did not see start to the old owner, which still has the socket
// (docs/backends/arp.md, "Graceful hand-over").
func TestHandoverKeepsEstablished(t *testing.T) {
	// A long drain so that the checks below fit in it comfortably.
	const drain = 3 * time.Second
	c, owner := startCluster(t, "arpestab", arplab.ClusterOptions{Tune: func(_ int, cfg *agentv1.AgentConfiguration) {
		cfg.Quiesce.Drain = agentv1.Duration{Duration: drain}
	}})
	g := NewWithT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	conn, err := c.Client.DialContext(ctx, "tcp", net.JoinHostPort(arplab.VIPv4.String(), strconv.Itoa(arplab.EchoPort)))
	g.Expect(err).NotTo(HaveOccurred())
	defer conn.Close()
	g.Expect(conn.SetDeadline(time.Now().Add(20 * time.Second))).To(Succeed())
	r := bufio.NewReader(conn)
	line, err := r.ReadString('\n')
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(strings.TrimSpace(line)).To(Equal(owner.Name))
	exchange := func(msg string) string {
		_, err := fmt.Fprintln(conn, msg)
		g.Expect(err).NotTo(HaveOccurred())
		line, err := r.ReadString('\n')
		g.Expect(err).NotTo(HaveOccurred(), "the established connection survives")
		return strings.TrimSpace(line)
	}
	g.Expect(exchange("before")).To(Equal(owner.Name + ": before"))

	code, err := owner.Admin(ctx, "POST", "/quiesce")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(code).To(Equal(202))
	// New connections land on the successor: the client's cache has moved.
	var next string
	g.Eventually(func(g Gomega) {
		cctx, ccancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer ccancel()
		who, err := c.Connect(cctx, arplab.VIPv4)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(who).NotTo(Equal(owner.Name))
		next = who
	}, 5*time.Second, 10*time.Millisecond).Should(Succeed())
	g.Expect(exchange("during")).To(Equal(owner.Name+": during"), "the old owner still serves its connection")
	g.Expect(holdersNow(t, c, arplab.VIPv4)).To(ContainElements(owner.Name, next), "checked within the drain")
}

// TestExitRemovesVIP: a second signal exits at once without hand-over, and
// still removes the VIP; a single-member group (no successor) releases after
// the hand-over timeout and exits; SIGKILL leaves the address, and the next
// start removes it before anything else.
func TestExitRemovesVIP(t *testing.T) {
	c, owner := startCluster(t, "arpexit", arplab.ClusterOptions{})
	g := NewWithT(t)

	must(t, owner.Agent.Signal(syscall.SIGINT))
	must(t, owner.Agent.Signal(syscall.SIGINT))
	g.Expect(owner.Agent.Wait(10 * time.Second)).To(Succeed())
	held, err := owner.HoldsVIP(arplab.VIPv4)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(held).To(BeFalse(), "forced exit still removes the VIP")
	next := waitSingleOwner(t, c, []*arplab.Node{owner}, 10*time.Second)

	must(t, next.Agent.Signal(syscall.SIGKILL))
	_ = next.Agent.Wait(5 * time.Second)
	held, err = next.HoldsVIP(arplab.VIPv4)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(held).To(BeTrue(), "SIGKILL cannot clean up")
	must(t, c.StartAgent(next))
	g.Eventually(func() (bool, error) { return next.HoldsVIP(arplab.VIPv4) }, 10*time.Second, 20*time.Millisecond).
		Should(BeFalse(), "the restarted agent removes the stale VIP")
}

// TestSingleMember: a one-member configuration owns the VIP alone and, on
// SIGTERM with nobody to hand over to, releases it and exits.
func TestSingleMember(t *testing.T) {
	c, owner := startCluster(t, "arpsingle", arplab.ClusterOptions{Nodes: 1})
	g := NewWithT(t)
	g.Expect(status(t, owner).MembersConfigured).To(Equal(1))
	must(t, owner.Agent.Signal(syscall.SIGTERM))
	g.Expect(owner.Agent.Wait(15 * time.Second)).To(Succeed())
	g.Expect(holdersNow(t, c, arplab.VIPv4)).To(BeEmpty())
}

// probe connects to the VIP every 5ms from the client and records failures.
type probe struct {
	c      *arplab.Cluster
	halt   chan struct{}
	wg     sync.WaitGroup
	ok     atomic.Int64
	mu     sync.Mutex
	failed []string
}

func startProbe(c *arplab.Cluster) *probe {
	p := &probe{c: c, halt: make(chan struct{})}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		t := time.NewTicker(5 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-p.halt:
				return
			case <-t.C:
			}
			p.wg.Add(1)
			go func() {
				defer p.wg.Done()
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				defer cancel()
				if _, err := c.Connect(ctx, arplab.VIPv4); err != nil {
					p.mu.Lock()
					p.failed = append(p.failed, time.Now().Format("15:04:05.000")+" "+err.Error())
					p.mu.Unlock()
					return
				}
				p.ok.Add(1)
			}()
		}
	}()
	return p
}

func (p *probe) stop() (int64, []string) {
	close(p.halt)
	p.wg.Wait()
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ok.Load(), p.failed
}
