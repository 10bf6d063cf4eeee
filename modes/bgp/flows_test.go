package bgp

import (
	"errors"
	"net/netip"
	"strconv"
	"testing"
	"time"

	"github.com/go-logr/logr"
	. "github.com/onsi/gomega"

	"github.com/caplb/caplb/modes/flows"
)

type fakeFlowTable struct {
	set    []map[flows.Flow]netip.Addr
	vips   []netip.Addr
	peers  []netip.Addr
	closed bool
}

func (f *fakeFlowTable) Set(o map[flows.Flow]netip.Addr) error {
	f.set = append(f.set, o)
	return nil
}
func (f *fakeFlowTable) SetVIPs(v []netip.Addr) error  { f.vips = v; return nil }
func (f *fakeFlowTable) SetPeers(p []netip.Addr) error { f.peers = p; return nil }
func (f *fakeFlowTable) Held() uint64                  { return 0 }
func (f *fakeFlowTable) Forwarded() uint64             { return 7 }
func (f *fakeFlowTable) HoldFull() uint64              { return 3 }
func (f *fakeFlowTable) CopiesLimited() uint64         { return 2 }
func (f *fakeFlowTable) Close() error                  { f.closed = true; return nil }

func flow(client, service string) flows.Flow {
	return flows.Flow{Client: netip.MustParseAddrPort(client), Service: netip.MustParseAddrPort(service)}
}

// bareSpeaker has what the flow-sharing side needs, without a BGP server.
func bareSpeaker(t *testing.T, k flowKernel) (*Speaker, *fakeAddresses) {
	t.Helper()
	m, err := newMetrics(nil)
	if err != nil {
		t.Fatal(err)
	}
	addrs := &fakeAddresses{}
	return &Speaker{
		log: logr.Discard(), metrics: m, addrs: addrs, now: time.Now,
		announced: map[netip.Addr]bool{}, lingering: map[netip.Addr]time.Time{},
		flowKernel: k, keepWhileFlows: true, offLinkLogged: map[netip.Addr]bool{}, withdrawnAt: map[netip.Addr]time.Time{},
		capReset: map[netip.Addr]bool{},
	}, addrs
}

// TestSetForeignFlowsForwardsOnLinkOwnersOnly: the kernel table is made on the first non-empty
// set; an owner behind a router is left out (its packets would come back by ECMP) and reported
// once; Close removes the table.
func TestSetForeignFlowsForwardsOnLinkOwnersOnly(t *testing.T) {
	g := NewWithT(t)
	table := &fakeFlowTable{}
	made := 0
	var cfg flows.ForwarderConfig
	onLink, routed := netip.MustParseAddr("10.44.0.11"), netip.MustParseAddr("10.9.0.5")
	s, _ := bareSpeaker(t, flowKernel{
		newForwarder: func(c flows.ForwarderConfig) (flowTable, error) { made++; cfg = c; return table, nil },
		gateway: func(a netip.Addr) (netip.Addr, error) {
			if a == routed {
				return netip.MustParseAddr("10.44.0.1"), nil
			}
			return netip.Addr{}, nil
		},
	})
	g.Expect(s.SetForeignFlows(nil, nil)).To(Succeed())
	g.Expect(made).To(Equal(0), "no table for nothing to forward")
	WithServedPorts([]uint16{6443, 8443})(s)

	a, b := flow("10.20.0.2:40000", "10.0.0.100:6443"), flow("10.20.0.2:40001", "10.0.0.100:6443")
	err := s.SetForeignFlows(map[flows.Flow]netip.Addr{a: onLink, b: routed}, []netip.Addr{onLink, routed})
	g.Expect(err).To(MatchError(ContainSubstring("member 10.9.0.5 is reached through router 10.44.0.1")))
	g.Expect(made).To(Equal(1))
	g.Expect(cfg.Ports).To(Equal([]uint16{6443, 8443}), "only the served ports are held")
	g.Expect(metricValue(t, s.metrics.flowHoldFull)).To(Equal(3.0), "the kernel's count of held segments that found the sets full")
	g.Expect(metricValue(t, s.metrics.flowCopiesLimited)).To(Equal(2.0))
	g.Expect(table.set).To(Equal([]map[flows.Flow]netip.Addr{{a: onLink}}))
	g.Expect(table.peers).To(Equal([]netip.Addr{onLink}), "held segments are copied to on-link peers only")
	g.Expect(s.SetForeignFlows(map[flows.Flow]netip.Addr{a: onLink, b: routed}, []netip.Addr{onLink, routed})).To(Succeed(), "reported once")

	s.mu.Lock()
	g.Expect(s.closeFlowsLocked()).To(Succeed())
	s.mu.Unlock()
	g.Expect(table.closed).To(BeTrue())
}

// TestWithdrawnVIPStaysWhileConnectionsDo: with flow sharing, a withdrawn VIP outlives its
// linger while connections to it are open (the others send their packets here), and goes once
// they are closed; without flow sharing it goes at the linger's end.
func TestWithdrawnVIPStaysWhileConnectionsDo(t *testing.T) {
	for _, sharing := range []bool{true, false} {
		g := NewWithT(t)
		vip := netip.MustParseAddr("10.0.0.100")
		open := []flows.Flow{flow("10.20.0.2:40000", "10.0.0.100:6443")}
		var listErr error
		table := &fakeFlowTable{}
		s, addrs := bareSpeaker(t, flowKernel{
			list:         func(v []netip.Addr, _ []uint16) (flows.Listing, error) { return flows.Listing{Flows: open}, listErr },
			newForwarder: func(flows.ForwarderConfig) (flowTable, error) { return table, nil },
		})
		s.keepWhileFlows = sharing
		now := time.Unix(1000, 0)
		s.now = func() time.Time { return now }
		s.lingering[vip] = now.Add(time.Second)
		s.mu.Lock()
		g.Expect(s.syncAddresses(now, nil)).To(Succeed())
		s.mu.Unlock()
		g.Expect(addrs.held).To(Equal([]netip.Addr{vip}))
		if sharing {
			g.Expect(table.vips).To(Equal([]netip.Addr{vip}), "the forwarding covers the VIPs on the node")
		}

		now = now.Add(2 * time.Second)
		s.mu.Lock()
		g.Expect(s.syncAddresses(now, nil)).To(Succeed())
		s.mu.Unlock()
		if !sharing {
			g.Expect(addrs.held).To(BeEmpty(), "without flow sharing the linger ends it")
			continue
		}
		g.Expect(addrs.held).To(Equal([]netip.Addr{vip}), "a connection is open")

		listErr = errors.New("netlink: busy")
		now = now.Add(2 * time.Second)
		s.mu.Lock()
		g.Expect(s.syncAddresses(now, nil)).To(Succeed())
		s.mu.Unlock()
		g.Expect(addrs.held).To(Equal([]netip.Addr{vip}), "unreadable: kept")

		open, listErr = nil, nil
		now = now.Add(2 * time.Second)
		s.mu.Lock()
		g.Expect(s.syncAddresses(now, nil)).To(Succeed())
		s.mu.Unlock()
		g.Expect(addrs.held).To(BeEmpty())
		g.Expect(table.vips).To(BeEmpty(), "and follows them off")
		if s.lingerTimer != nil {
			s.lingerTimer.Stop()
		}
	}
}

// TestWithdrawnVIPStaysAtMostTheCap: with a cap (the agent's drain + busyDrain + 1 s) a withdrawn
// VIP with connections still open stays until the cap, where they are reset and no longer listed
// (the others drop their entries), and goes flowLetGo later.
func TestWithdrawnVIPStaysAtMostTheCap(t *testing.T) {
	g := NewWithT(t)
	vip := netip.MustParseAddr("10.0.0.100")
	open := []flows.Flow{flow("10.20.0.2:40000", "10.0.0.100:6443")}
	var resets []netip.Addr
	s, addrs := bareSpeaker(t, flowKernel{
		list: func(v []netip.Addr, _ []uint16) (flows.Listing, error) {
			if len(v) == 0 {
				return flows.Listing{}, nil
			}
			return flows.Listing{Flows: open}, nil
		},
		newForwarder: func(flows.ForwarderConfig) (flowTable, error) { return &fakeFlowTable{}, nil },
		reset: func(v netip.Addr, _ time.Duration) (int, error) {
			resets = append(resets, v)
			open = nil
			return 1, nil
		},
	})
	s.flowLingerCap = 10 * time.Second
	t0 := time.Unix(1000, 0)
	now := t0
	s.now = func() time.Time { return now }
	s.lingering[vip], s.withdrawnAt[vip] = t0.Add(time.Second), t0
	step := func(at time.Duration) {
		now = t0.Add(at)
		s.mu.Lock()
		g.Expect(s.syncAddresses(now, nil)).To(Succeed())
		s.mu.Unlock()
	}
	for _, at := range []time.Duration{2 * time.Second, 9 * time.Second} {
		step(at)
		g.Expect(addrs.held).To(Equal([]netip.Addr{vip}), "at %v: connections open, before the cap", at)
		g.Expect(s.LocalFlows()).To(Equal(open), "listed: the others send them here")
	}
	g.Expect(resets).To(BeEmpty())
	step(10 * time.Second)
	g.Expect(addrs.held).To(Equal([]netip.Addr{vip}), "at the cap: still held")
	g.Expect(resets).To(Equal([]netip.Addr{vip}), "the connections still open are reset: their clients learn at once")
	g.Expect(s.LocalFlows()).To(BeEmpty(), "and no longer listed")
	step(10*time.Second + flowLetGo)
	g.Expect(addrs.held).To(BeEmpty(), "gone flowLetGo after the cap, connections or not")
	if s.lingerTimer != nil {
		s.lingerTimer.Stop()
	}
}

// TestLocalFlowsCountsWhatIsLeftOut: connections the list leaves out (flows.PerClient,
// flows.MaxFlows) are counted.
func TestLocalFlowsCountsWhatIsLeftOut(t *testing.T) {
	g := NewWithT(t)
	vip := netip.MustParseAddr("10.0.0.100")
	kept := []flows.Flow{flow("10.20.0.2:40000", "10.0.0.100:6443")}
	s, _ := bareSpeaker(t, flowKernel{
		list: func([]netip.Addr, []uint16) (flows.Listing, error) { return flows.Listing{Flows: kept, Cut: 5}, nil },
	})
	s.announced[vip] = true
	g.Expect(s.LocalFlows()).To(Equal(kept))
	g.Expect(s.LocalFlows()).To(Equal(kept))
	g.Expect(metricValue(t, s.metrics.flowsCut)).To(Equal(10.0))
}

// countingTable counts the reads of its forwarded-packets counter, which grows by 5 each read.
type countingTable struct {
	fakeFlowTable
	reads int
}

func (c *countingTable) Forwarded() uint64 { c.reads++; return uint64(5 * c.reads) }

// TestFlowCountersReadAtMostEveryInterval: the kernel's counters (eight nftables dumps) are read
// at most every flowCountInterval however often the lists change, and once more as the tables
// are removed, so that nothing they counted is lost; the next tables count from zero.
func TestFlowCountersReadAtMostEveryInterval(t *testing.T) {
	g := NewWithT(t)
	table := &countingTable{}
	s, _ := bareSpeaker(t, flowKernel{
		newForwarder: func(flows.ForwarderConfig) (flowTable, error) { return table, nil },
		gateway:      func(netip.Addr) (netip.Addr, error) { return netip.Addr{}, nil },
	})
	now := time.Unix(1000, 0)
	s.now = func() time.Time { return now }
	owner := netip.MustParseAddr("10.44.0.11")
	set := func(port int) {
		fl := flow("10.20.0.2:"+strconv.Itoa(port), "10.0.0.100:6443")
		g.Expect(s.SetForeignFlows(map[flows.Flow]netip.Addr{fl: owner}, []netip.Addr{owner})).To(Succeed())
	}
	for i := range 10 {
		set(40000 + i)
		now = now.Add(flowCountInterval / 10)
	}
	g.Expect(table.reads).To(Equal(1), "ten changes within the interval: one read")
	set(41000)
	g.Expect(table.reads).To(Equal(2), "the interval passed: read again")
	g.Expect(s.forwarded).To(Equal(uint64(10)))
	s.mu.Lock()
	g.Expect(s.closeFlowsLocked()).To(Succeed())
	s.mu.Unlock()
	g.Expect(table.reads).To(Equal(3), "read once more as the tables go")
	g.Expect(s.forwarded).To(BeZero(), "the next tables count from zero")
}
