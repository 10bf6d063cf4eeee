//go:build linux

package bgp_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	agentv1 "github.com/caplb/caplb/api/agent/v1alpha1"
	"github.com/caplb/caplb/e2e/lab/bgplab"

	. "github.com/onsi/gomega"
)

// TestBGPPeerErrors: a node whose AS number the router does not expect, a node with the wrong
// TCP-MD5 password and a node with the right one. The first two never establish and say why
// in their logs and metrics; the third carries the traffic alone.
func TestBGPPeerErrors(t *testing.T) {
	const secret, wrongSecret = "lab-s3cret-md5", "not-the-s3cret"
	var dir string
	c, fib := startCluster(t, "bgperr", bgplab.BGPClusterOptions{
		Routed: bgplab.RoutedOptions{Nodes: 3, Neighbor: func(i int, n *bgplab.FRRNeighbor) {
			switch i {
			case 1:
				n.ASN = 64999 // the router expects another AS from node1
			case 2, 3:
				n.Password = secret
			}
		}},
		Configure: func(i int, cfg *agentv1.AgentConfiguration) {
			if i == 1 {
				return
			}
			pw := wrongSecret
			if i == 3 {
				pw = secret
			}
			if dir == "" {
				dir = t.TempDir()
			}
			f := filepath.Join(dir, cfg.NodeName+"-bgp-password")
			if err := os.WriteFile(f, []byte(pw+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			cfg.BGP.Peers[0].PasswordFile = f
		},
	})
	n1, n2, n3 := c.Members[0], c.Members[1], c.Members[2]
	ctx := context.Background()
	g := NewWithT(t)

	// Only the node with a working session carries the VIP.
	eventuallyHops(t, c, fib, converge, n3)

	g.Eventually(n1.Log, converge, poll).Should(And(
		ContainSubstring("BGP session problem"), ContainSubstring("bad peer AS"), ContainSubstring("bgp.asn")),
		"node1 explains the rejected OPEN")
	g.Eventually(func() (float64, error) {
		text, err := n1.Metrics(ctx)
		v, _ := metric(text, "caplb_bgp_peer_errors_total", "kind", "notification_received")
		return v, err
	}, converge, poll).Should(BeNumerically(">=", 1))

	g.Eventually(n2.Log, converge, poll).Should(And(
		ContainSubstring("BGP session problem"), ContainSubstring("i/o timeout"), ContainSubstring("TCP-MD5")),
		"node2 explains the silent connect failure")
	g.Eventually(func() (float64, error) {
		text, err := n2.Metrics(ctx)
		v, _ := metric(text, "caplb_bgp_peer_errors_total", "kind", "connect_failed")
		return v, err
	}, converge, poll).Should(BeNumerically(">=", 1))

	peers, err := c.FRR.Peers(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(peers[n1.IPv4].State).NotTo(Equal("Established"))
	g.Expect(c.FRR.BGPDLog()).To(ContainSubstring("sent to neighbor "+n1.IPv4.String()+" 2/2 (OPEN Message Error/Bad Peer AS)"),
		"the router's side of the story")
	g.Expect(peers[n2.IPv4].State).NotTo(Equal("Established"))
	g.Expect(peers[n2.IPv4].ConnectionsEstablished).To(BeZero(), "the router never saw node2's segments")
	g.Expect(peers[n3.IPv4].State).To(Equal("Established"), "TCP-MD5 with the right password works")

	for _, m := range c.Members {
		text, err := m.Metrics(ctx)
		g.Expect(err).NotTo(HaveOccurred())
		up, _ := metric(text, "caplb_bgp_session_up")
		want := 0.0
		if m == n3 {
			want = 1
		}
		g.Expect(up).To(Equal(want), "%s session_up", m.Name)
		g.Expect(m.Log()).NotTo(Or(ContainSubstring(secret), ContainSubstring(wrongSecret)), "%s never logs a password", m.Name)
	}
}
