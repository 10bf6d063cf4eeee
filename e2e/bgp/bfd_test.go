package bgp_test

import (
	"context"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/caplb/caplb/e2e/lab/bgplab"
)

// TestBFD: with BFD on the sessions (300 ms x 3, FRR's bfdd on the router,
// modes/bfd in the agents), the router drops a frozen agent's routes long
// before its 9 s hold timer and takes them back once the agent resumes.
func TestBFD(t *testing.T) {
	const hold = 9 * time.Second
	c, fib := startCluster(t, "bgpbfd", bgplab.BGPClusterOptions{Routed: bgplab.RoutedOptions{Nodes: 3},
		HoldTime: hold, BFD: 300 * time.Millisecond})
	n1, n2, n3 := c.Members[0], c.Members[1], c.Members[2]
	ctx := context.Background()
	g := NewWithT(t)
	eventuallyHops(t, c, fib, converge, n1, n2, n3)

	bfdUp := func(g Gomega) {
		peers, err := c.FRR.BFDPeers(ctx)
		g.Expect(err).NotTo(HaveOccurred())
		for _, m := range c.Members {
			g.Expect(peers).To(HaveKeyWithValue(m.IPv4, "up"), "the router's BFD session to %s", m.Name)
			text, err := m.Metrics(ctx)
			g.Expect(err).NotTo(HaveOccurred())
			up, _ := metric(text, "caplb_bgp_bfd_session_up")
			g.Expect(up).To(Equal(1.0), "%s: its BFD session to the router", m.Name)
			// /status reads the session's state, the metric follows its changes: both agree.
			st, err := m.Status(ctx)
			g.Expect(err).NotTo(HaveOccurred())
			peers := st["bgp"].(map[string]any)["peers"].([]any)
			g.Expect(peers[0].(map[string]any)["bfd"]).To(Equal("up"), "%s: /status shows the session", m.Name)
		}
	}
	g.Eventually(bfdUp, 10*time.Second, 100*time.Millisecond).Should(Succeed())

	start := time.Now()
	g.Expect(n2.Agent.Signal(syscall.SIGSTOP)).To(Succeed())
	// The hold timer would take 8-9 s: only BFD withdraws within 3 s.
	eventuallyHops(t, c, fib, 3*time.Second, n1, n3)
	t.Logf("SIGSTOP to route gone: %v with BFD 300ms x 3 (hold time %v)", time.Since(start).Round(time.Millisecond), hold)
	g.Expect(n2.Agent.Signal(syscall.SIGCONT)).To(Succeed())
	eventuallyHops(t, c, fib, converge, n1, n2, n3)
	g.Eventually(bfdUp, 10*time.Second, 100*time.Millisecond).Should(Succeed())
}
