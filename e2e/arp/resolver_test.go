//go:build linux

package arp_test

import (
	"context"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	agentv1 "github.com/caplb/caplb/api/agent/v1alpha1"
	"github.com/caplb/caplb/e2e/lab/arplab"

	mdarp "github.com/mdlayher/arp"
	"github.com/mdlayher/ethernet"
	. "github.com/onsi/gomega"
)

// TestFirstTimeResolverDuringHandover (issue 8 item 6): a neighbour that
// has never resolved the VIP asks for it while the old owner drains (it
// still holds the VIP, quiet). Only the successor may answer: an answer
// from the old owner would be cached and blackhole the neighbour once the
// old owner lets go. The neighbour's connect reaches the successor.
func TestFirstTimeResolverDuringHandover(t *testing.T) {
	// A long drain so that the checks below fit in it comfortably.
	const drain = 4 * time.Second
	c, owner := startCluster(t, "arpfirst", arplab.ClusterOptions{Tune: func(_ int, cfg *agentv1.AgentConfiguration) {
		cfg.Quiesce.Drain = agentv1.Duration{Duration: drain}
	}})
	g := NewWithT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// The resolver joins the switch now: it has never seen the VIP.
	res, err := c.Lab.AddNamespace("res")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(c.Lab.AddLink(res, "eth0", c.Switch, "p-res")).To(Succeed())
	_, err = c.Switch.Run(ctx, "ip", "link", "set", "p-res", "master", arplab.Bridge)
	g.Expect(err).NotTo(HaveOccurred())
	resAddr := netip.MustParseAddr("10.44.0.3")
	g.Expect(res.AddAddr("eth0", netip.PrefixFrom(resAddr, arplab.SubnetV4.Bits()))).To(Succeed())
	var arpc *mdarp.Client
	g.Expect(res.Do(func() error {
		ifi, err := net.InterfaceByName("eth0")
		if err != nil {
			return err
		}
		arpc, err = mdarp.Dial(ifi)
		return err
	})).To(Succeed())
	defer arpc.Close()
	macOf := func(n *arplab.Node) string {
		out, err := n.NS.Run(ctx, "cat", "/sys/class/net/eth0/address")
		g.Expect(err).NotTo(HaveOccurred())
		return strings.TrimSpace(out)
	}
	oldMAC := macOf(owner)

	code, err := owner.Admin(ctx, "POST", "/quiesce")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(code).To(Equal(202))
	// The drain: the successor holds the VIP and the old owner still does.
	var next *arplab.Node
	g.Eventually(func(g Gomega) {
		h := holdersNow(t, c, arplab.VIPv4)
		g.Expect(h).To(HaveLen(2))
		for _, n := range h {
			if n != owner.Name {
				next = c.Node(n)
			}
		}
	}, 5*time.Second, 5*time.Millisecond).Should(Succeed())
	// (The old owner went quiet when it stopped being eligible, before the
	// successor claimed.)
	newMAC := macOf(next)

	// Who answers "who has VIP?" from a first-time resolver: every reply
	// within 300 ms of each of several requests.
	for i := range 5 {
		req, err := mdarp.NewPacket(mdarp.OperationRequest, arpc.HardwareAddr(), resAddr, ethernet.Broadcast, arplab.VIPv4)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(arpc.WriteTo(req, ethernet.Broadcast)).To(Succeed())
		g.Expect(arpc.SetReadDeadline(time.Now().Add(300 * time.Millisecond))).To(Succeed())
		var answers []string
		for {
			p, _, err := arpc.Read()
			if err != nil {
				break
			}
			if p.Operation == mdarp.OperationReply && p.SenderIP == arplab.VIPv4 && p.TargetIP == resAddr {
				answers = append(answers, p.SenderHardwareAddr.String())
			}
		}
		g.Expect(answers).NotTo(ContainElement(oldMAC), "request %d: the draining old owner answered for the VIP", i)
		g.Expect(answers).To(ContainElement(newMAC), "request %d: the successor answers for the VIP", i)
	}
	// The resolver's own kernel resolves the VIP now and reaches the successor.
	conn, err := res.DialContext(ctx, "tcp", net.JoinHostPort(arplab.VIPv4.String(), "6443"))
	g.Expect(err).NotTo(HaveOccurred())
	defer conn.Close()
	g.Expect(conn.SetReadDeadline(time.Now().Add(2 * time.Second))).To(Succeed())
	buf := make([]byte, 64)
	n, err := conn.Read(buf)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(strings.TrimSpace(string(buf[:n]))).To(Equal(next.Name))
	g.Expect(holdersNow(t, c, arplab.VIPv4)).To(ContainElements(owner.Name, next.Name), "checked within the drain")
}
