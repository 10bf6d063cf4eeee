//go:build linux

package bgp_test

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/caplb/caplb/e2e/lab/bgplab"
	. "github.com/onsi/gomega"
)

// TestBGPLifecycle runs one dual-stack cluster of three nodes through the life of a BGP VIP:
// announce and ECMP, health failure, quiesce, a dead agent, a frozen agent, the router
// restarting, and a graceful agent exit.
func TestBGPLifecycle(t *testing.T) {
	const hold = 3 * time.Second
	c, fib := startCluster(t, "bgplife", bgplab.BGPClusterOptions{Routed: bgplab.RoutedOptions{Nodes: 3, IPv6: true}, HoldTime: hold})
	n1, n2, n3 := c.Members[0], c.Members[1], c.Members[2]
	v4, v6 := c.VIPs[0], c.VIPs[1]
	ctx := context.Background()

	t.Run("every eligible member announces; the FIB has one next hop per member", func(t *testing.T) {
		g := NewWithT(t)
		eventuallyHops(t, c, fib, converge, n1, n2, n3)
		for _, v := range c.VIPs {
			routes, err := c.FRR.BGPRoutes(ctx, v.Is6())
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(sortAddrs(routes[bgplab.HostPrefix(v)])).To(Equal(nodeHops(c, v, n1, n2, n3)),
				"bgpd has a path from every member for %s", v)
		}
		for _, m := range c.Members {
			text, err := m.Metrics(ctx)
			g.Expect(err).NotTo(HaveOccurred())
			up, _ := metric(text, "caplb_bgp_session_up")
			g.Expect(up).To(Equal(2.0), "%s: both sessions (IPv4, IPv6) up", m.Name)
			routes, _ := metric(text, "caplb_bgp_announced_routes")
			g.Expect(routes).To(Equal(2.0), "%s announces the /32 and the /128", m.Name)
			st, err := m.Status(ctx)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(st["role"]).To(Equal("announcing"))
		}
	})

	t.Run("connections from many source ports spread over every member", func(t *testing.T) {
		g := NewWithT(t)
		counts := spread(t, c, v4, 300)
		t.Logf("IPv4 spread over 300 connections: %v", counts)
		for _, m := range c.Members {
			// Expected 100 each; 50 is more than 6 standard deviations below.
			g.Expect(counts[m.Name]).To(BeNumerically(">=", 50), "IPv4 connections reaching %s", m.Name)
		}
		counts = spread(t, c, v6, 120)
		t.Logf("IPv6 spread over 120 connections: %v", counts)
		for _, m := range c.Members {
			g.Expect(counts[m.Name]).To(BeNumerically(">=", 15), "IPv6 connections reaching %s", m.Name)
		}
	})

	t.Run("an unhealthy member is withdrawn and returns when healthy", func(t *testing.T) {
		g := NewWithT(t)
		g.Expect(n2.FailHealth(true)).To(Succeed())
		eventuallyHops(t, c, fib, 5*time.Second, n1, n3)
		counts := spread(t, c, v4, 60)
		g.Expect(counts).NotTo(HaveKey(n2.Name), "no connection reaches the withdrawn member")
		st, err := n2.Status(ctx)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(st["role"]).To(Equal("withdrawn"))
		g.Expect(n2.FailHealth(false)).To(Succeed())
		eventuallyHops(t, c, fib, 5*time.Second, n1, n2, n3)
	})

	t.Run("a quiesced (disabled) member is withdrawn and returns when re-enabled", func(t *testing.T) {
		g := NewWithT(t)
		g.Expect(n3.Quiesce(ctx, true)).To(Succeed())
		eventuallyHops(t, c, fib, 5*time.Second, n1, n2)
		g.Expect(spread(t, c, v6, 40)).NotTo(HaveKey(n3.Name))
		g.Expect(n3.Quiesce(ctx, false)).To(Succeed())
		eventuallyHops(t, c, fib, 5*time.Second, n1, n2, n3)
	})

	t.Run("a killed agent's routes leave within the hold time; a restarted one re-announces", func(t *testing.T) {
		g := NewWithT(t)
		start := time.Now()
		g.Expect(n1.KillAgent()).To(Succeed())
		eventuallyHops(t, c, fib, hold+2*time.Second, n2, n3)
		t.Logf("SIGKILL to route gone: %v (hold time %v; the kernel closed the agent's TCP sessions)", time.Since(start).Round(time.Millisecond), hold)
		g.Expect(n1.StartAgent()).To(Succeed())
		eventuallyHops(t, c, fib, converge, n1, n2, n3)
	})

	t.Run("a frozen agent's routes leave when the router's hold timer expires", func(t *testing.T) {
		g := NewWithT(t)
		start := time.Now()
		g.Expect(n2.Agent.Signal(syscall.SIGSTOP)).To(Succeed())
		eventuallyHops(t, c, fib, hold+3*time.Second, n1, n3)
		took := time.Since(start)
		t.Logf("SIGSTOP to route gone: %v (hold time %v)", took.Round(time.Millisecond), hold)
		// Keepalives stop at once; the router waits out its hold timer (less the time since
		// the last keepalive, at most one keepalive interval of 1s).
		g.Expect(took).To(BeNumerically(">=", hold-1100*time.Millisecond), "withdrawn by the hold timer, not earlier")
		g.Expect(n2.Agent.Signal(syscall.SIGCONT)).To(Succeed())
		eventuallyHops(t, c, fib, converge, n1, n2, n3)
	})

	t.Run("sessions lost when the router restarts are re-established and re-announced", func(t *testing.T) {
		g := NewWithT(t)
		before, err := c.FRR.Peers(ctx)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(c.FRR.RestartBGPD()).To(Succeed())
		peers, err := c.FRR.Peers(ctx)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(peers[n1.IPv4].ConnectionsEstablished).To(BeNumerically("<", before[n1.IPv4].ConnectionsEstablished+1),
			"a fresh bgpd: the sessions were lost")
		eventuallyHops(t, c, fib, converge, n1, n2, n3)
		peers, err = c.FRR.Peers(ctx)
		g.Expect(err).NotTo(HaveOccurred())
		for _, m := range c.Members {
			g.Expect(peers[m.IPv4].State).To(Equal("Established"), m.Name)
			g.Expect(peers[m.IPv6].State).To(Equal("Established"), m.Name)
		}
		g.Eventually(func() (float64, error) {
			text, err := n1.Metrics(ctx)
			v, _ := metric(text, "caplb_bgp_session_state_changes_total", "state", "established")
			return v, err
		}, 5*time.Second, poll).Should(BeNumerically(">=", 2), "the agent saw its sessions come back")
	})

	t.Run("SIGTERM withdraws before the agent exits", func(t *testing.T) {
		g := NewWithT(t)
		g.Expect(n3.Agent.Signal(syscall.SIGTERM)).To(Succeed())
		g.Expect(n3.Agent.Wait(10*time.Second)).To(Succeed(), "clean exit")
		// The withdrawal (or the Cease that follows it) reached the router before the agent
		// exited; zebra needs a moment to update the kernel FIB.
		eventuallyHops(t, c, fib, time.Second, n1, n2)
		peers, err := c.FRR.Peers(ctx)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(peers[n3.IPv4].State).NotTo(Equal("Established"))
		g.Expect(peers[n3.IPv4].LastReset).To(Equal("BGP Notification received"))
		g.Expect(peers[n3.IPv4].LastNotification).To(HavePrefix("Cease"), "the agent ended its session with a Cease NOTIFICATION")
		out, _ := n3.NS.Run(ctx, "ip", "-o", "addr", "show")
		g.Expect(out).NotTo(ContainSubstring(v4.String()), "the VIP left the node")
		g.Expect(out).NotTo(ContainSubstring("caplb0"), "the dummy interface is gone")
	})
}
