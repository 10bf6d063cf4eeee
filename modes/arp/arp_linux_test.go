//go:build linux

package arp_test

import (
	"context"
	"net/netip"
	"sync"
	"testing"
	"time"

	mdarp "github.com/mdlayher/arp"
	"github.com/mdlayher/ethernet"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/vishvananda/netlink"

	"github.com/caplb/caplb/modes/arp"
	"github.com/caplb/caplb/modes/dataplane"
)

// TestAnnouncer runs the data plane in one namespace and watches it from a
// neighbour: the VIP is added with its label, announced at once, a foreign
// claim is reported as a duplicate, and Close removes the address.
func TestAnnouncer(t *testing.T) {
	g := NewWithT(t)
	vip := netip.MustParseAddr("10.45.0.100")
	// The neighbour listens to ARP before anything is announced.
	p := newPair(t, g, "arpdp", "10.45.0.1/24", "10.45.0.2/24")
	a, watcher := p.a, p.c
	reg := prometheus.NewRegistry()
	dp := p.announce(t, g, arp.Config{BurstCount: 1, BurstInterval: 100 * time.Millisecond,
		RefreshInterval: time.Second, ProbeInterval: 200 * time.Millisecond}, reg, vip)

	h, err := a.Netlink()
	g.Expect(err).NotTo(HaveOccurred())
	defer h.Close()
	addrs, err := h.AddrList(nil, netlink.FAMILY_V4)
	g.Expect(err).NotTo(HaveOccurred())
	var labels []string
	for _, x := range addrs {
		if x.IP.Equal(vip.AsSlice()) {
			labels = append(labels, x.Label)
		}
	}
	g.Expect(labels).To(Equal([]string{"eth0:caplb"}))

	// A gratuitous ARP for the VIP from a's MAC reaches the neighbour.
	mac := dp.Status().ARP.MAC
	g.Expect(watcher.SetReadDeadline(time.Now().Add(3 * time.Second))).To(Succeed())
	for {
		p, _, err := watcher.Read()
		g.Expect(err).NotTo(HaveOccurred(), "no gratuitous ARP seen")
		if p.SenderIP == vip && p.TargetIP == vip && p.SenderHardwareAddr.String() == mac {
			break
		}
	}

	// The neighbour claims the VIP too: a duplicate owner.
	bmac := watcher.HardwareAddr()
	claim, err := mdarp.NewPacket(mdarp.OperationReply, bmac, vip, ethernet.Broadcast, vip)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(watcher.WriteTo(claim, ethernet.Broadcast)).To(Succeed())
	g.Eventually(func() []dataplane.Duplicate { return dp.Status().ARP.Duplicates }, 3*time.Second, 20*time.Millisecond).
		Should(ContainElement(HaveField("MAC", bmac.String())))
	mfs, err := reg.Gather()
	g.Expect(err).NotTo(HaveOccurred())
	found := false
	for _, mf := range mfs {
		if mf.GetName() == "caplb_agent_duplicate_owner_detections_total" {
			found = mf.GetMetric()[0].GetCounter().GetValue() >= 1
		}
	}
	g.Expect(found).To(BeTrue(), "duplicate detections are counted")

	// Close removes the address (on every exit path the agent calls it).
	g.Expect(a.Do(func() error { return dp.Close(context.Background()) })).To(Succeed())
	addrs, err = h.AddrList(nil, netlink.FAMILY_V4)
	g.Expect(err).NotTo(HaveOccurred())
	for _, x := range addrs {
		g.Expect(x.IP.Equal(vip.AsSlice())).To(BeFalse(), "VIP removed")
	}
}

// TestQuietOwnerDoesNotAnswerARP: while the data plane is quiet (a drain
// after hand-over), its kernel no longer answers "who has VIP?" (issue 8
// item 6: a first-time resolver must not learn the old owner's MAC); out of
// quiet, it answers again.
func TestQuietOwnerDoesNotAnswerARP(t *testing.T) {
	g := NewWithT(t)
	vip := netip.MustParseAddr("10.46.0.100")
	asker := netip.MustParseAddr("10.46.0.2")
	p := newPair(t, g, "arpquiet", "10.46.0.1/24", "10.46.0.2/24")
	a, c := p.a, p.c
	dp := p.announce(t, g, arp.Config{BurstCount: 0, BurstInterval: time.Hour, RefreshInterval: time.Hour, ProbeInterval: time.Hour}, nil, vip)

	// answered asks once and reports whether a's kernel replied to us.
	answered := func() bool {
		req, err := mdarp.NewPacket(mdarp.OperationRequest, c.HardwareAddr(), asker, ethernet.Broadcast, vip)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(c.WriteTo(req, ethernet.Broadcast)).To(Succeed())
		g.Expect(c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))).To(Succeed())
		for {
			p, _, err := c.Read()
			if err != nil {
				return false // deadline: no reply
			}
			if p.Operation == mdarp.OperationReply && p.SenderIP == vip && p.TargetIP == asker {
				return true
			}
		}
	}
	g.Expect(answered()).To(BeTrue(), "the holder's kernel answers ARP for the VIP")
	g.Expect(a.Do(func() error {
		return dp.Sync(context.Background(), dataplane.Desired{Announce: true, VIPs: []netip.Addr{vip}, Quiet: true})
	})).To(Succeed())
	for range 3 {
		g.Expect(answered()).To(BeFalse(), "a quiet holder must not answer ARP for the VIP")
	}
	g.Expect(a.Do(func() error {
		return dp.Sync(context.Background(), dataplane.Desired{Announce: true, VIPs: []netip.Addr{vip}})
	})).To(Succeed())
	g.Expect(answered()).To(BeTrue(), "out of quiet, the holder answers again")
}

// TestDuplicateAnsweredLast: a foreign MAC claims a held VIP in a burst (a
// member that claimed from a stale view, and yields); the holder answers
// with a burst of its own, so that the neighbours hear the holder last.
// One answer to the first foreign packet left the later ones the last word.
func TestDuplicateAnsweredLast(t *testing.T) {
	g := NewWithT(t)
	vip := netip.MustParseAddr("10.47.0.100")
	p := newPair(t, g, "arpdup", "10.47.0.1/24", "10.47.0.2/24")
	c := p.c
	dp := p.announce(t, g, arp.Config{BurstCount: 3, BurstInterval: 100 * time.Millisecond,
		RefreshInterval: time.Hour, ProbeInterval: time.Hour}, nil, vip)
	amac := dp.Status().ARP.MAC

	// The neighbour records when it hears the holder's MAC for the VIP.
	var mu sync.Mutex
	var heard []time.Time
	go func() {
		for {
			p, _, err := c.Read()
			if err != nil {
				return // closed
			}
			if p.SenderIP == vip && p.SenderHardwareAddr.String() == amac {
				mu.Lock()
				heard = append(heard, time.Now())
				mu.Unlock()
			}
		}
	}()
	// Let the holder's own burst end (4 announcements, 300 ms).
	g.Eventually(func() int { mu.Lock(); defer mu.Unlock(); return len(heard) }, 2*time.Second, 20*time.Millisecond).Should(Equal(4))
	time.Sleep(200 * time.Millisecond)
	claim, err := mdarp.NewPacket(mdarp.OperationReply, c.HardwareAddr(), vip, ethernet.Broadcast, vip)
	g.Expect(err).NotTo(HaveOccurred())
	var lastClaim time.Time
	for range 3 {
		g.Expect(c.WriteTo(claim, ethernet.Broadcast)).To(Succeed())
		lastClaim = time.Now()
		time.Sleep(100 * time.Millisecond)
	}
	g.Eventually(func() time.Time { mu.Lock(); defer mu.Unlock(); return heard[len(heard)-1] }, time.Second, 20*time.Millisecond).
		Should(BeTemporally(">", lastClaim), "the holder announces after the foreign burst's last packet")
}

// TestLinkFlapKeepsARP: after the interface went down and up, the first
// gratuitous ARP is sent (the socket's pending ENETDOWN does not eat it) and
// duplicate detection still runs (the read loop survives the ENETDOWN).
func TestLinkFlapKeepsARP(t *testing.T) {
	g := NewWithT(t)
	vip1, vip2 := netip.MustParseAddr("10.47.0.100"), netip.MustParseAddr("10.47.0.101")
	p := newPair(t, g, "arpflap", "10.47.0.1/24", "10.47.0.2/24")
	a, watcher := p.a, p.c
	// One announcement per VIP and no burst: a lost one is never repeated.
	dp := p.announce(t, g, arp.Config{BurstCount: 0, BurstInterval: time.Hour, RefreshInterval: time.Hour, ProbeInterval: time.Hour}, nil, vip1)

	g.Expect(a.SetLinkUp("eth0", false)).To(Succeed())
	g.Expect(a.SetLinkUp("eth0", true)).To(Succeed())
	// The link is back when the carrier is: wait for a's side to run again.
	g.Eventually(func() string {
		out, _ := a.Run(context.Background(), "cat", "/sys/class/net/eth0/operstate")
		return out
	}, 5*time.Second, 10*time.Millisecond).Should(ContainSubstring("up"))

	g.Expect(a.Do(func() error {
		return dp.Sync(context.Background(), dataplane.Desired{Announce: true, VIPs: []netip.Addr{vip1, vip2}})
	})).To(Succeed())
	g.Expect(watcher.SetReadDeadline(time.Now().Add(2 * time.Second))).To(Succeed())
	for {
		p, _, err := watcher.Read()
		g.Expect(err).NotTo(HaveOccurred(), "the first gratuitous ARP after the link flap was lost")
		if p.SenderIP == vip2 && p.TargetIP == vip2 {
			break
		}
	}

	claim, err := mdarp.NewPacket(mdarp.OperationReply, watcher.HardwareAddr(), vip1, ethernet.Broadcast, vip1)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(watcher.WriteTo(claim, ethernet.Broadcast)).To(Succeed())
	g.Eventually(func() []dataplane.Duplicate { return dp.Status().ARP.Duplicates }, 3*time.Second, 20*time.Millisecond).
		Should(ContainElement(HaveField("VIP", vip1)), "duplicate detection survives a link flap")
}

// An interface with no IPv4 address of its own when the agent starts (an IPv6-only node, or one
// whose address comes later) still announces an IPv4 VIP: the ARP socket is opened once the VIP
// itself is on the interface. Before, the VIP was recorded as held and never announced.
func TestAnnouncerWithoutNodeIPv4(t *testing.T) {
	g := NewWithT(t)
	vip := netip.MustParseAddr("10.46.0.100")
	p := newPair(t, g, "arpno4", "", "10.46.0.2/24")
	watcher := p.c
	dp := p.announce(t, g, arp.Config{BurstCount: 1, BurstInterval: 100 * time.Millisecond,
		RefreshInterval: time.Second, ProbeInterval: 200 * time.Millisecond}, prometheus.NewRegistry(), vip)

	mac := dp.Status().ARP.MAC
	g.Expect(watcher.SetReadDeadline(time.Now().Add(3 * time.Second))).To(Succeed())
	for {
		p, _, err := watcher.Read()
		g.Expect(err).NotTo(HaveOccurred(), "no gratuitous ARP seen for a VIP on an interface without IPv4")
		if p.SenderIP == vip && p.TargetIP == vip && p.SenderHardwareAddr.String() == mac {
			break
		}
	}
}
