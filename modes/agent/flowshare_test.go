package agent

import (
	"context"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	. "github.com/onsi/gomega"

	"github.com/caplb/caplb/modes/election"
	"github.com/caplb/caplb/modes/flows"
)

type fakeFlowDP struct {
	mu    sync.Mutex
	local []flows.Flow
	sets  []map[flows.Flow]netip.Addr
	peers []netip.Addr
}

func (f *fakeFlowDP) LocalFlows() ([]flows.Flow, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.local, nil
}

func (f *fakeFlowDP) SetForeignFlows(o map[flows.Flow]netip.Addr, peers []netip.Addr) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sets, f.peers = append(f.sets, o), peers
	return nil
}

func (f *fakeFlowDP) lastPeers() []netip.Addr {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.peers
}

func (f *fakeFlowDP) last() map[flows.Flow]netip.Addr {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.sets) == 0 {
		return nil
	}
	return f.sets[len(f.sets)-1]
}

type fakeFlowPeers struct {
	mu      sync.Mutex
	view    election.View
	changed chan struct{}
	sent    map[string][][]byte
	answers map[string]election.Answers
}

func (p *fakeFlowPeers) Answers(name string) election.Answers {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.answers[name]
}

func (p *fakeFlowPeers) setAnswers(name string, a election.Answers) {
	p.mu.Lock()
	if p.answers == nil {
		p.answers = map[string]election.Answers{}
	}
	p.answers[name] = a
	p.mu.Unlock()
	p.changed <- struct{}{}
}

func (p *fakeFlowPeers) View() election.View {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.view
}
func (p *fakeFlowPeers) Changed() <-chan struct{} { return p.changed }
func (p *fakeFlowPeers) SendDeparted(to string, b []byte) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.sent[to] = append(p.sent[to], b)
	return nil
}

func (p *fakeFlowPeers) setAlive(name string, alive bool) {
	p.mu.Lock()
	for i := range p.view.Members {
		if p.view.Members[i].Name == name {
			p.view.Members[i].Alive = alive
		}
	}
	p.mu.Unlock()
	p.changed <- struct{}{}
}

func (p *fakeFlowPeers) received(to string) [][]flows.Flow {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out [][]flows.Flow
	for _, b := range p.sent[to] {
		l, err := flows.Decode(b)
		if err != nil {
			panic(err)
		}
		out = append(out, l)
	}
	return out
}

// testProbe is the election's probe interval in these tests.
const testProbe = 100 * time.Millisecond

func testFlow(client string) flows.Flow {
	return flows.Flow{Client: netip.MustParseAddrPort(client), Service: netip.MustParseAddrPort("10.0.0.100:6443")}
}

// TestFlowShare: the node's flows reach every alive peer (again only when they change), the
// peers' lists become forwarding to their addresses, and a peer that dies takes its flows out
// once its direct contact says it is gone (gossip's dead verdict alone does not).
func TestFlowShare(t *testing.T) {
	g := NewWithT(t)
	a2, a3 := netip.MustParseAddr("10.44.0.12"), netip.MustParseAddr("10.44.0.13")
	peers := &fakeFlowPeers{changed: make(chan struct{}, 1), sent: map[string][][]byte{}, view: election.View{
		Self: "m1", Members: []election.MemberView{
			{Name: "m1", Alive: true, Address: netip.MustParseAddr("10.44.0.11")},
			{Name: "m2", Alive: true, Address: a2},
			{Name: "m3", Alive: true, Address: a3},
		},
	}}
	mine := []flows.Flow{testFlow("10.20.0.2:40000")}
	dp := &fakeFlowDP{local: mine}
	fs := newFlowShare(dp, "m1", logr.Discard(), func(m election.MemberView) netip.Addr { return m.Address }, testProbe)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); fs.run(ctx, peers) }()
	defer func() { cancel(); <-done }()

	for _, p := range []string{"m2", "m3"} {
		g.Eventually(func() [][]flows.Flow { return peers.received(p) }, 2*time.Second, 10*time.Millisecond).
			Should(Equal([][]flows.Flow{mine}), p)
	}
	g.Consistently(func() int { return len(peers.received("m2")) }, 3*flowShareInterval, 20*time.Millisecond).
		Should(Equal(1), "unchanged: not sent again before the refresh")

	f2, f3 := testFlow("10.20.0.2:41000"), testFlow("10.20.0.2:42000")
	fs.receive("m2", flows.Encode([]flows.Flow{f2}))
	fs.receive("m3", flows.Encode([]flows.Flow{f3}))
	fs.receive("m3", []byte{0xff, 0x01}) // garbage is ignored, the last good list stands
	g.Eventually(dp.last, 2*time.Second, 10*time.Millisecond).
		Should(Equal(map[flows.Flow]netip.Addr{f2: a2, f3: a3}))

	g.Expect(dp.lastPeers()).To(Equal([]netip.Addr{a2, a3}), "held segments are copied to the alive peers")

	// m3 is declared dead by gossip while its kernel still completes handshakes (starved):
	// its flows stay; once its answers say it is gone they are reset here.
	peers.setAnswers("m3", election.Answers{Last: time.Now(), Listening: time.Now()})
	peers.setAlive("m3", false)
	g.Consistently(dp.last, 5*flowShareInterval, 20*time.Millisecond).
		Should(Equal(map[flows.Flow]netip.Addr{f2: a2, f3: a3}), "a member declared dead but not gone keeps its flows")
	g.Expect(dp.lastPeers()).To(Equal([]netip.Addr{a2, a3}))
	gone := time.Now().Add(-time.Second)
	peers.setAnswers("m3", election.Answers{Last: gone, Listening: gone, Unanswered: time.Now()})
	g.Eventually(dp.last, 2*time.Second, 10*time.Millisecond).
		Should(Equal(map[flows.Flow]netip.Addr{f2: a2}), "a gone member's flows are reset here, not forwarded")
	g.Expect(dp.lastPeers()).To(Equal([]netip.Addr{a2}))

	more := []flows.Flow{testFlow("10.20.0.2:40000"), testFlow("10.20.0.2:40001")}
	dp.mu.Lock()
	dp.local = more
	dp.mu.Unlock()
	g.Eventually(func() [][]flows.Flow { return peers.received("m2") }, 2*time.Second, 10*time.Millisecond).
		Should(Equal([][]flows.Flow{mine, more}))
	g.Expect(peers.received("m3")).To(HaveLen(1), "not sent to the dead")

	cancel()
	<-done
	g.Expect(dp.last()).To(BeEmpty(), "forwarding removed when sharing stops")
}

func TestOwners(t *testing.T) {
	g := NewWithT(t)
	a2 := netip.MustParseAddr("10.44.0.12")
	f1, f2, f3 := testFlow("10.20.0.2:1"), testFlow("10.20.0.2:2"), testFlow("10.20.0.2:3")
	known := map[string]peerFlows{"m2": {flows: []flows.Flow{f1, f3}}, "gone": {flows: []flows.Flow{f2}}}
	g.Expect(owners(known, map[string]netip.Addr{"m2": a2}, nil)).To(Equal(map[flows.Flow]netip.Addr{f1: a2, f3: a2}))
	g.Expect(owners(known, nil, nil)).To(BeEmpty())
	// A flow this node lists itself is its own, whatever a peer's (stale) list says: sending it
	// on could bounce it back.
	g.Expect(owners(known, map[string]netip.Addr{"m2": a2}, []flows.Flow{f3})).To(Equal(map[flows.Flow]netip.Addr{f1: a2}))
}

// TestFlowShareEndsMailboxOfDeparted: a peer that leaves takes its mailbox's goroutine with it;
// back, it gets a new one and the list at once.
func TestFlowShareEndsMailboxOfDeparted(t *testing.T) {
	g := NewWithT(t)
	peers := &fakeFlowPeers{changed: make(chan struct{}, 1), sent: map[string][][]byte{}, view: election.View{
		Self: "m1", Members: []election.MemberView{
			{Name: "m1", Alive: true, Address: netip.MustParseAddr("10.44.0.11")},
			{Name: "m2", Alive: true, Address: netip.MustParseAddr("10.44.0.12")},
			{Name: "m3", Alive: true, Address: netip.MustParseAddr("10.44.0.13")},
		},
	}}
	mine := []flows.Flow{testFlow("10.20.0.2:40000")}
	fs := newFlowShare(&fakeFlowDP{local: mine}, "m1", logr.Discard(), func(m election.MemberView) netip.Addr { return m.Address }, testProbe)
	fs.hold = 200 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); fs.run(ctx, peers) }()
	defer func() { cancel(); <-done }()

	g.Eventually(fs.mailboxes.Load, 2*time.Second, 10*time.Millisecond).Should(Equal(int64(2)))
	peers.setAlive("m3", false)
	g.Eventually(fs.mailboxes.Load, 2*time.Second, 10*time.Millisecond).Should(Equal(int64(1)), "m3's goroutine ends")
	peers.setAlive("m3", true)
	g.Eventually(fs.mailboxes.Load, 2*time.Second, 10*time.Millisecond).Should(Equal(int64(2)))
	g.Eventually(func() int { return len(peers.received("m3")) }, 2*time.Second, 10*time.Millisecond).
		Should(Equal(2), "back, it gets the list at once")
	cancel()
	<-done
	g.Eventually(fs.mailboxes.Load, 2*time.Second, 10*time.Millisecond).Should(BeZero(), "every goroutine ends with sharing")
}

// A peer gossip declared dead keeps its flows while nothing says it is gone, for the hold at
// most: a member never heard on direct pings, or a node outside the roster (a removed member
// draining), is not pinged, and the hold bounds how long its clients' segments go to it.
func TestFlowShareHoldsADeadVerdict(t *testing.T) {
	g := NewWithT(t)
	a2 := netip.MustParseAddr("10.44.0.12")
	a9 := netip.MustParseAddr("10.44.0.19")
	peers := &fakeFlowPeers{changed: make(chan struct{}, 1), sent: map[string][][]byte{}, view: election.View{
		Self: "m1", Members: []election.MemberView{
			{Name: "m1", Alive: true, Address: netip.MustParseAddr("10.44.0.11")},
			{Name: "m2", Alive: true, Address: a2},
		},
		Others: []election.MemberView{{Name: "old", Alive: true, Address: a9}},
	}}
	dp := &fakeFlowDP{}
	fs := newFlowShare(dp, "m1", logr.Discard(), func(m election.MemberView) netip.Addr { return m.Address }, testProbe)
	fs.hold = time.Second
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); fs.run(ctx, peers) }()
	defer func() { cancel(); <-done }()

	f2, f9 := testFlow("10.20.0.2:41000"), testFlow("10.20.0.2:49000")
	fs.receive("m2", flows.Encode([]flows.Flow{f2}))
	fs.receive("old", flows.Encode([]flows.Flow{f9}))
	g.Eventually(dp.last, 2*time.Second, 10*time.Millisecond).Should(Equal(map[flows.Flow]netip.Addr{f2: a2, f9: a9}))

	// Both declared dead at once; the old member leaves the view altogether.
	peers.mu.Lock()
	peers.view.Members[1].Alive = false
	peers.view.Others = nil
	peers.mu.Unlock()
	deadAt := time.Now()
	peers.changed <- struct{}{}
	// A list sent meanwhile is still taken (the member still serves and lists).
	f2b := testFlow("10.20.0.2:41001")
	fs.receive("m2", flows.Encode([]flows.Flow{f2, f2b}))
	g.Eventually(dp.last, 500*time.Millisecond, 10*time.Millisecond).Should(Equal(map[flows.Flow]netip.Addr{f2: a2, f2b: a2, f9: a9}))
	g.Eventually(dp.last, 3*time.Second, 10*time.Millisecond).Should(BeEmpty(), "after the hold both are dropped")
	g.Expect(time.Since(deadAt)).To(BeNumerically(">=", fs.hold), "not before the hold")
}
