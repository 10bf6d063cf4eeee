package election

import (
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/hashicorp/memberlist"
	. "github.com/onsi/gomega"
)

// startTrio runs three real memberships on 127.0.0.1-3 (Linux routes all of
// 127/8 to loopback) sharing one free port, and closes them at the end.
func startTrio(t *testing.T) []*Membership {
	t.Helper()
	port := freePort(t)
	var members []Member
	for i := 1; i <= 3; i++ {
		members = append(members, Member{Name: fmt.Sprintf("m%d", i), Address: netip.AddrFrom4([4]byte{127, 0, 0, byte(i)})})
	}
	var ms []*Membership
	for _, self := range members {
		m, err := Start(Config{
			Self: self.Name, Members: members, Port: port,
			ProbeInterval: 100 * time.Millisecond, ProbeTimeout: 50 * time.Millisecond,
			SuspicionMult: 2, GossipInterval: 20 * time.Millisecond, RejoinInterval: 200 * time.Millisecond,
		}, Meta{Eligible: true}, logr.Discard())
		if err != nil {
			t.Fatalf("start %s: %v", self.Name, err)
		}
		ms = append(ms, m)
		t.Cleanup(func() { _ = m.Close() })
	}
	return ms
}

// freePort finds a port free for UDP and TCP on 127.0.0.1-3.
func freePort(t *testing.T) int { t.Helper(); return freePortN(t, 3) }

// freePortN finds a port free for UDP and TCP on 127.0.0.1-n.
func freePortN(t *testing.T, n int) int {
	t.Helper()
	for try := 0; try < 20; try++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		_ = l.Close()
		ok := true
		for i := 1; i <= n && ok; i++ {
			addr := fmt.Sprintf("127.0.0.%d:%d", i, port)
			u, err := net.ListenPacket("udp", addr)
			if err != nil {
				ok = false
				break
			}
			_ = u.Close()
		}
		if ok {
			return port
		}
	}
	t.Fatal("no port free for UDP and TCP on 127.0.0.1-3")
	return 0
}

// TestDirectContactTracksReachability: with all three up, every member keeps
// ConfirmedAt fresh; once two are gone, the survivor's direct pings go
// unanswered (whatever gossip still believes) and ConfirmedAt stops moving.
func TestDirectContactTracksReachability(t *testing.T) {
	g := NewWithT(t)
	ms := startTrio(t)

	for _, m := range ms {
		g.Eventually(func() time.Duration {
			at := m.ConfirmedAt()
			if at.IsZero() {
				return time.Hour
			}
			return time.Since(at)
		}, 5*time.Second, 20*time.Millisecond).Should(BeNumerically("<", 300*time.Millisecond),
			"%s hears directly from a majority", m.cfg.Self)
	}
	reached, needed := ms[0].ConfirmQuorum()
	g.Expect(needed).To(Equal(2))
	g.Expect(reached).To(BeNumerically(">=", 2))

	// Shutdown without Leave: to gossip, m2 and m3 are alive until probes
	// fail; direct pings say at once that m1 is alone.
	g.Expect(ms[1].Close()).To(Succeed())
	g.Expect(ms[2].Close()).To(Succeed())
	reached, _ = ms[0].ConfirmQuorum()
	g.Expect(reached).To(Equal(1), "nobody answers m1's direct pings")
	stopped := ms[0].ConfirmedAt()
	g.Consistently(ms[0].ConfirmedAt, 500*time.Millisecond, 50*time.Millisecond).Should(Equal(stopped),
		"no majority answer after the others stopped")
}

// TestSingleMemberIsAlwaysInContact: a group of one is its own majority.
func TestSingleMemberIsAlwaysInContact(t *testing.T) {
	g := NewWithT(t)
	port := freePort(t)
	m, err := Start(Config{
		Self: "solo", Members: []Member{{Name: "solo", Address: netip.MustParseAddr("127.0.0.1")}}, Port: port,
		ProbeInterval: 100 * time.Millisecond, ProbeTimeout: 50 * time.Millisecond,
		SuspicionMult: 2, GossipInterval: 20 * time.Millisecond, RejoinInterval: time.Second,
	}, Meta{}, logr.Discard())
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = m.Close() }()
	reached, needed := m.ConfirmQuorum()
	g.Expect([]int{reached, needed}).To(Equal([]int{1, 1}))
	g.Expect(m.ConfirmedAt()).NotTo(BeZero())
}

// TestLastHolderOutlivesDeath: View.LastHolder names the member whose gossip
// said it holds, and still does once memberlist declares it dead, so that a
// claim can check first whether it is gone or only starved.
func TestLastHolderOutlivesDeath(t *testing.T) {
	g := NewWithT(t)
	ms := startTrio(t)
	g.Eventually(func() int { return aliveIn(ms[1].View()) }, 10*time.Second, 20*time.Millisecond).Should(Equal(3))
	ms[0].SetMeta(Meta{Eligible: true, Holding: true})
	g.Eventually(func() string { return ms[1].View().LastHolder }, 5*time.Second, 20*time.Millisecond).Should(Equal("m1"))
	g.Expect(ms[0].View().LastHolder).To(BeEmpty(), "never itself")
	g.Expect(ms[0].Close()).To(Succeed())
	g.Eventually(func() int { return aliveIn(ms[1].View()) }, 10*time.Second, 20*time.Millisecond).Should(Equal(2))
	g.Expect(ms[1].View().LastHolder).To(Equal("m1"), "kept after its death")
	ms[2].SetMeta(Meta{Eligible: true, Holding: true})
	g.Eventually(func() string { return ms[1].View().LastHolder }, 5*time.Second, 20*time.Millisecond).Should(Equal("m3"))
	ms[2].SetMeta(Meta{Eligible: true})
	g.Eventually(func() string { return ms[1].View().LastHolder }, 5*time.Second, 20*time.Millisecond).Should(BeEmpty(), "it let go")
}

// TestHandshakeIsQuietToMemberlist: the handshake that tells a starved member
// from a gone one is a clean stream to memberlist (its label, then the end),
// which it logs no error for.
func TestHandshakeIsQuietToMemberlist(t *testing.T) {
	g := NewWithT(t)
	port := freePortN(t, 1)
	var mu sync.Mutex
	var errs []string
	logger := funcr.New(func(_, args string) {
		if strings.Contains(args, "[ERR]") || strings.Contains(args, "[WARN]") {
			mu.Lock()
			errs = append(errs, args)
			mu.Unlock()
		}
	}, funcr.Options{})
	self := Member{Name: "m1", Address: netip.MustParseAddr("127.0.0.1")}
	m, err := Start(Config{Self: "m1", Members: []Member{self}, Port: port, Label: "lb",
		ProbeInterval: 100 * time.Millisecond, ProbeTimeout: 50 * time.Millisecond, SuspicionMult: 2,
		GossipInterval: 20 * time.Millisecond, RejoinInterval: time.Second, Keys: [][]byte{make([]byte, 16)}}, Meta{}, logger)
	g.Expect(err).NotTo(HaveOccurred())
	defer m.Close()
	prober := &Membership{cfg: Config{ProbeInterval: 100 * time.Millisecond, ProbeTimeout: 50 * time.Millisecond, Label: "lb"}}
	for range 5 {
		g.Expect(prober.handshake(netip.AddrPortFrom(self.Address, uint16(port)))).To(BeTrue())
	}
	g.Consistently(func() []string { mu.Lock(); defer mu.Unlock(); return append([]string(nil), errs...) }, 500*time.Millisecond, 50*time.Millisecond).
		Should(BeEmpty())
}

// aliveIn counts the members v shows alive.
func aliveIn(v View) int {
	n := 0
	for _, m := range v.Members {
		if m.Alive {
			n++
		}
	}
	return n
}

// TestReturnedHolderStillHolds: the last holder, back from memberlist's dead
// verdict with metadata that does not say it holds (an older state: its own
// update follows), counts as holding for a member that might claim, until its
// own update or SilentAfter; a member that holds itself sees it as it is. In the
// real ARP lifecycle under CPU starvation, a member claimed in the 9 ms between
// such a return and the holder's update.
func TestReturnedHolderStillHolds(t *testing.T) {
	m1, m3 := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.3")
	node := func(name string, addr netip.Addr, holding bool) *memberlist.Node {
		meta, _ := json.Marshal(Meta{Eligible: true, Holding: holding})
		return &memberlist.Node{Name: name, Addr: addr.AsSlice(), Port: 7946, Meta: meta}
	}
	newMember := func(selfHolding bool) (*Membership, *events) {
		m := &Membership{cfg: Config{Self: "m2", ProbeInterval: 100 * time.Millisecond}, log: logr.Discard(),
			changed: make(chan struct{}, 1), peers: map[string]peer{}, seen: map[string]bool{},
			meta:   Meta{Eligible: true, Holding: selfHolding},
			roster: Roster{Members: []Member{{Name: "m1", Address: m1}, {Name: "m2", Address: netip.MustParseAddr("10.0.0.2")}, {Name: "m3", Address: m3}}}}
		return m, (*events)(m)
	}
	holding := func(v View, name string) bool {
		for _, mv := range v.Members {
			if mv.Name == name {
				return mv.Alive && mv.Meta.Holding
			}
		}
		return false
	}

	t.Run("returned with stale metadata", func(t *testing.T) {
		g := NewWithT(t)
		m, e := newMember(false)
		e.NotifyJoin(node("m1", m1, true))
		e.NotifyLeave(node("m1", m1, true))
		e.NotifyJoin(node("m1", m1, false))
		v := m.View()
		g.Expect(v.LastHolder).To(Equal("m1"))
		g.Expect(holding(v, "m1")).To(BeTrue(), "counts as holding until its own update")
		g.Eventually(func() bool { return holding(m.View(), "m1") }).WithTimeout(time.Second).Should(BeFalse(), "after the window, as it says")
	})
	t.Run("its own update decides at once", func(t *testing.T) {
		g := NewWithT(t)
		m, e := newMember(false)
		e.NotifyJoin(node("m1", m1, true))
		e.NotifyLeave(node("m1", m1, true))
		e.NotifyJoin(node("m1", m1, false))
		e.NotifyUpdate(node("m1", m1, false))
		v := m.View()
		g.Expect(holding(v, "m1")).To(BeFalse())
		g.Expect(v.LastHolder).To(BeEmpty(), "it let go")
	})
	t.Run("a member that never held joins as it says", func(t *testing.T) {
		g := NewWithT(t)
		m, e := newMember(false)
		e.NotifyJoin(node("m1", m1, true))
		e.NotifyJoin(node("m3", m3, false))
		g.Expect(holding(m.View(), "m3")).To(BeFalse())
	})
	t.Run("the member that took over sees it as it is", func(t *testing.T) {
		g := NewWithT(t)
		m, e := newMember(true)
		e.NotifyJoin(node("m1", m1, true))
		e.NotifyLeave(node("m1", m1, true))
		e.NotifyJoin(node("m1", m1, false))
		g.Expect(holding(m.View(), "m1")).To(BeFalse(), "no yield to a holder that is not")
	})
}
