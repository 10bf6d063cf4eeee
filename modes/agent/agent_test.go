package agent

import (
	"context"
	"net/netip"
	"sync"
	"testing"
	"time"

	agentv1 "github.com/caplb/caplb/api/agent/v1alpha1"

	"github.com/go-logr/logr"
	. "github.com/onsi/gomega"

	"github.com/caplb/caplb/modes/dataplane"
	"github.com/caplb/caplb/modes/election"
)

type fakeML struct {
	mu       sync.Mutex
	others   []election.MemberView // everybody but self, in preference order after self's slot
	self     election.Meta
	selfIdx  int
	confirm  bool
	confirms int
	contact  time.Time
	changed  chan struct{}
	left     bool
	// Dynamic membership: the version self runs, whether self is in it,
	// nodes outside it; a peer's empty digest means "agrees with self".
	version   int64
	nonMember bool
	outside   []election.MemberView
	pulled    []string
	roster    election.Roster
	// lastHolder is View.LastHolder.
	lastHolder string
}

func (f *fakeML) View() election.View {
	f.mu.Lock()
	defer f.mu.Unlock()
	agree := func(in []election.MemberView) []election.MemberView {
		out := append([]election.MemberView(nil), in...)
		for i := range out {
			if out[i].Meta.ConfigDigest == "" {
				out[i].Meta.ConfigDigest = f.self.ConfigDigest
				if out[i].Meta.Version == 0 {
					out[i].Meta.Version = f.version
				}
			}
		}
		return out
	}
	others := agree(f.others)
	var ms []election.MemberView
	ms = append(ms, others[:f.selfIdx]...)
	if !f.nonMember {
		ms = append(ms, election.MemberView{Name: "self", Alive: true, Meta: f.self})
	}
	ms = append(ms, others[f.selfIdx:]...)
	return election.View{Self: "self", Members: ms, Others: agree(f.outside), Version: f.version,
		Digest: f.self.ConfigDigest, Member: !f.nonMember, LastHolder: f.lastHolder}
}
func (f *fakeML) Roster() election.Roster {
	f.mu.Lock()
	defer f.mu.Unlock()
	r := f.roster
	r.Version = f.version
	if !f.nonMember && !r.Has("self") {
		r.Members = append(r.Members, election.Member{Name: "self"})
	}
	return r
}
func (f *fakeML) SetRoster(r election.Roster) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.roster, f.version = r, r.Version
	return true
}
func (f *fakeML) Pull(names []string) {
	f.mu.Lock()
	f.pulled = append(f.pulled, names...)
	f.mu.Unlock()
}
func (f *fakeML) SetMeta(m election.Meta)  { f.mu.Lock(); f.self = m; f.mu.Unlock() }
func (f *fakeML) Changed() <-chan struct{} { return f.changed }
func (f *fakeML) ConfirmQuorum() (int, int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.confirms++
	if f.confirm {
		return 2, 2
	}
	return 1, 2
}
func (f *fakeML) ConfirmedAt() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.contact
}
func (f *fakeML) Leave(time.Duration) error { f.left = true; return nil }
func (f *fakeML) Close() error              { return nil }
func (f *fakeML) set(i int, alive bool, meta election.Meta) {
	f.mu.Lock()
	f.others[i].Alive, f.others[i].Meta = alive, meta
	f.mu.Unlock()
}

type fakeDP struct {
	mu       sync.Mutex
	announce bool
	quiet    bool
	syncs    int
	closed   bool
	// handovers and window record each Desired.HandOver.
	handovers []netip.Addr
	window    time.Duration
	// busy is what BusyConnections answers.
	busy int
}

func (d *fakeDP) Sync(_ context.Context, des dataplane.Desired) error {
	d.mu.Lock()
	d.announce, d.quiet = des.Announce, des.Quiet
	if des.HandOver != nil {
		d.handovers, d.window = append(d.handovers, des.HandOver.From), des.HandOver.Window
	}
	d.syncs++
	d.mu.Unlock()
	return nil
}
func (d *fakeDP) Status() dataplane.Status { return dataplane.Status{} }
func (d *fakeDP) BusyConnections() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.busy
}
func (d *fakeDP) Close(context.Context) error {
	d.mu.Lock()
	d.closed, d.announce = true, false
	d.mu.Unlock()
	return nil
}

type fakeHealth struct {
	mu sync.Mutex
	ok bool
}

func (h *fakeHealth) state() (bool, string) { h.mu.Lock(); defer h.mu.Unlock(); return h.ok, "fake" }
func (h *fakeHealth) set(ok bool)           { h.mu.Lock(); h.ok = ok; h.mu.Unlock() }

// testSetup is what newTestAgent wires; a testOption adjusts it before the
// agent is made.
type testSetup struct {
	t     *testing.T
	cfg   *agentv1.AgentConfiguration
	ml    *fakeML
	parts agentParts
}

type testOption func(*testSetup)

// threeMembers is the configuration of the agent tests: self, b and c, in
// this order of preference.
const threeMembers = `
apiVersion: agent.loadbalancer.cluster.x-k8s.io/v1alpha1
kind: AgentConfiguration
nodeName: self
vips: ["192.0.2.10"]
members: [{name: self, address: 192.0.2.1}, {name: b, address: 192.0.2.2}, {name: c, address: 192.0.2.3}]
health: {insecureSkipVerify: true}
election: {insecure: true}
`

// newTestAgent: self is the most preferred of three members unless selfIdx>0.
func newTestAgent(t *testing.T, selfIdx int, opts ...testOption) (*Agent, *fakeML, *fakeDP, *fakeHealth) {
	t.Helper()
	cfg, err := agentv1.Parse([]byte(threeMembers))
	if err != nil {
		t.Fatal(err)
	}
	ml := &fakeML{selfIdx: selfIdx, confirm: true, changed: make(chan struct{}),
		others: []election.MemberView{{Name: "b", Alive: true, Meta: election.Meta{Eligible: true}}, {Name: "c", Alive: true, Meta: election.Meta{Eligible: true}}}}
	dp := &fakeDP{}
	h := &fakeHealth{ok: true}
	m, err := newMetrics(nil)
	if err != nil {
		t.Fatal(err)
	}
	s := &testSetup{t: t, cfg: cfg, ml: ml, parts: agentParts{dp: dp, ml: ml, health: h, m: m}}
	for _, o := range opts {
		o(s)
	}
	return newAgent(s.cfg, logr.Discard(), s.parts), ml, dp, h
}

// step runs one turn of a's loop at now with nothing requested.
func step(a *Agent, now time.Time) { a.iterate(now, requests{}) }

// quiesce runs one turn of a's loop at now with quiesce requests.
func quiesce(a *Agent, now time.Time, qs ...quiesceRequest) { a.iterate(now, requests{quiesce: qs}) }

func TestClaimWaitsForSettleAndConfirmation(t *testing.T) {
	g := NewWithT(t)
	a, ml, dp, _ := newTestAgent(t, 0)
	t0 := time.Now()
	step(a, t0)
	g.Expect(a.st.holding).To(BeFalse(), "quorum just gained: settling")
	g.Expect(a.Status().Waiting).To(ContainSubstring("settling"))

	ml.confirm = false
	step(a, t0.Add(600*time.Millisecond))
	g.Expect(a.st.holding).To(BeFalse(), "a majority did not answer pings")
	g.Expect(a.Status().Waiting).To(ContainSubstring("claim withheld"))
	step(a, t0.Add(650*time.Millisecond))
	g.Expect(ml.confirms).To(Equal(1), "no new ping round within a probe interval")

	ml.confirm = true
	step(a, t0.Add(800*time.Millisecond))
	g.Expect(a.st.holding).To(BeTrue())
	g.Expect(dp.announce).To(BeTrue())
	g.Expect(ml.self.Holding).To(BeTrue(), "holding is gossiped after the data plane announced")
	g.Expect(a.Status().Role).To(Equal("owner"))
}

func TestMakeBeforeBreak(t *testing.T) {
	g := NewWithT(t)
	a, ml, dp, _ := newTestAgent(t, 0)
	t0 := claimAsMostPreferred(t, a, ml)

	quiesce(a, t0.Add(2*time.Second), quiesceRequest{source: "admin", reason: "admin request"})
	g.Expect(a.st.holding).To(BeTrue(), "keeps the VIP until a successor announces it")
	g.Expect(dp.quiet).To(BeTrue(), "but stops announcing it")
	g.Expect(ml.self.Eligible).To(BeFalse())
	g.Expect(ml.self.Quiescing).To(BeTrue())

	ml.set(0, true, election.Meta{Eligible: true, Holding: true}) // b took over
	step(a, t0.Add(2100*time.Millisecond))
	g.Expect(a.st.holding).To(BeTrue(), "drain period")
	g.Expect(a.Status().Waiting).To(ContainSubstring("draining"))
	step(a, t0.Add(2700*time.Millisecond))
	g.Expect(a.st.holding).To(BeFalse(), "released after the drain")
	g.Expect(dp.announce).To(BeFalse())
	g.Expect(a.Status().LastTransition.Reason).To(ContainSubstring("handed over to b"))
}

func TestRecoveryDuringDrainDoesNotReclaim(t *testing.T) {
	g := NewWithT(t)
	a, ml, _, h := newTestAgent(t, 0)
	t0 := claimAsMostPreferred(t, a, ml)
	h.ok = false
	step(a, t0.Add(1100*time.Millisecond))
	ml.set(0, true, election.Meta{Eligible: true, Holding: true}) // b took over
	step(a, t0.Add(1200*time.Millisecond))
	g.Expect(a.st.holding).To(BeTrue(), "draining")
	h.ok = true // the API server recovers during the drain
	step(a, t0.Add(1300*time.Millisecond))
	g.Expect(ml.self.Eligible).To(BeFalse(), "not eligible until the hand-over completed")
	g.Expect(a.st.holding).To(BeTrue())
	step(a, t0.Add(1800*time.Millisecond))
	g.Expect(a.st.holding).To(BeFalse(), "the hand-over completes")
	step(a, t0.Add(1900*time.Millisecond))
	g.Expect(ml.self.Eligible).To(BeTrue(), "eligible again as a backup")
	g.Expect(a.st.holding).To(BeFalse(), "b keeps the VIP")
}

func TestReleaseRules(t *testing.T) {
	for _, tc := range []struct {
		name     string
		failOpen *bool
		holds    bool
	}{
		{"unhealthy with nobody eligible keeps the VIP (fail-open, the default)", nil, true},
		{"unhealthy with nobody eligible releases at once with failOpen: false", new(false), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			a, ml, dp, h := newTestAgent(t, 0, func(s *testSetup) { s.cfg.Election.FailOpen = tc.failOpen })
			t0 := time.Now()
			step(a, t0)
			step(a, t0.Add(time.Second))
			g.Expect(a.st.holding).To(BeTrue())
			ml.set(0, true, election.Meta{})
			ml.set(1, true, election.Meta{})
			h.ok = false
			step(a, t0.Add(1100*time.Millisecond))
			g.Expect(a.st.holding).To(Equal(tc.holds))
			if tc.holds {
				g.Expect(a.Status().Report.Reason).To(ContainSubstring("fail-open"))
				g.Expect(dp.quiet).To(BeFalse(), "the fail-open holder is the only way to the VIP: it keeps answering ARP")
				// A member recovers: it claims, and the fail-open owner hands over.
				ml.set(0, true, election.Meta{Eligible: true, Holding: true})
				step(a, t0.Add(1200*time.Millisecond))
				step(a, t0.Add(1800*time.Millisecond))
				g.Expect(a.st.holding).To(BeFalse(), "handed over to the recovered member after the drain")
			}
		})
	}
	t.Run("two fail-open holders: the less preferred lets go", func(t *testing.T) {
		for _, tc := range []struct {
			name    string
			selfIdx int
			holds   bool
		}{
			{"self preferred over the other holder keeps the VIP", 0, true},
			{"the other holder preferred: self releases", 1, false},
		} {
			t.Run(tc.name, func(t *testing.T) {
				g := NewWithT(t)
				a, ml, _, h := newTestAgent(t, tc.selfIdx)
				t0 := time.Now()
				if tc.selfIdx > 0 {
					ml.set(0, true, election.Meta{}) // the preferred member is ineligible: self owns
				}
				step(a, t0)
				step(a, t0.Add(time.Second))
				step(a, t0.Add(1070*time.Millisecond))
				g.Expect(a.st.holding).To(BeTrue())
				// Both fail: the other member claimed during self's failure and failed in turn.
				other := 1
				if tc.selfIdx > 0 {
					other = 0
				}
				ml.set(other, true, election.Meta{Holding: true})
				ml.set(1-other, true, election.Meta{})
				h.ok = false
				step(a, t0.Add(1100*time.Millisecond))
				g.Expect(a.st.holding).To(Equal(tc.holds))
				if !tc.holds {
					g.Expect(a.Status().LastTransition.Reason).To(ContainSubstring("preferred over this node, keeps the VIP"))
				}
			})
		}
	})
	t.Run("fail-open never holds without quorum", func(t *testing.T) {
		g := NewWithT(t)
		a, ml, _, h := newTestAgent(t, 0)
		t0 := time.Now()
		step(a, t0)
		step(a, t0.Add(time.Second))
		h.ok = false
		ml.set(0, false, election.Meta{})
		ml.set(1, false, election.Meta{})
		ml.confirm = false // gone: no direct answer either
		step(a, t0.Add(1100*time.Millisecond))
		g.Expect(a.st.holding).To(BeFalse())
	})
	t.Run("losing quorum releases after one unanswered direct-ping round", func(t *testing.T) {
		g := NewWithT(t)
		a, ml, _, _ := newTestAgent(t, 0)
		t0 := time.Now()
		step(a, t0)
		step(a, t0.Add(time.Second))
		ml.set(0, false, election.Meta{})
		ml.set(1, false, election.Meta{})
		ml.confirm = false
		step(a, t0.Add(1100*time.Millisecond))
		g.Expect(a.st.holding).To(BeFalse())
		g.Expect(a.Status().Quorum).To(BeFalse())
	})
	t.Run("a more preferred holder wins a conflict", func(t *testing.T) {
		g := NewWithT(t)
		a, ml, _, _ := newTestAgent(t, 1) // order: b, self, c
		t0 := time.Now()
		ml.set(0, true, election.Meta{}) // b ineligible: self is the owner
		step(a, t0)
		step(a, t0.Add(time.Second))
		g.Expect(a.st.holding).To(BeFalse(), "b is alive and preferred: its claim gets a head start")
		g.Expect(a.Status().Waiting).To(ContainSubstring("claim staggered 60ms"))
		step(a, t0.Add(1070*time.Millisecond))
		g.Expect(a.st.holding).To(BeTrue())
		ml.set(0, true, election.Meta{Eligible: true, Holding: true}) // b claims too (partition healed)
		step(a, t0.Add(1100*time.Millisecond))
		g.Expect(a.st.holding).To(BeFalse())
		g.Expect(a.Status().LastTransition.Reason).To(ContainSubstring("yielding"))
	})
	t.Run("no preemption: a more preferred member does not take the VIP back", func(t *testing.T) {
		g := NewWithT(t)
		a, ml, _, _ := newTestAgent(t, 0)
		ml.set(0, true, election.Meta{Eligible: true, Holding: true}) // b holds
		t0 := time.Now()
		step(a, t0)
		step(a, t0.Add(time.Second))
		g.Expect(a.st.holding).To(BeFalse())
		g.Expect(a.Status().Owner).To(Equal("b"))
	})
}

func TestRunExitsAfterHandoverAndCloses(t *testing.T) {
	g := NewWithT(t)
	a, ml, dp, _ := newTestAgent(t, 0, func(s *testSetup) {
		s.cfg.Quiesce.Drain = agentv1.Duration{Duration: 10 * time.Millisecond}
		s.cfg.Election.Settle = agentv1.Duration{Duration: time.Millisecond}
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx, context.Background()) }()
	g.Eventually(func() bool { return a.Status().Holding }, 2*time.Second, 5*time.Millisecond).Should(BeTrue())
	cancel()
	g.Consistently(done, 200*time.Millisecond, 10*time.Millisecond).ShouldNot(Receive(), "waits for a successor")
	ml.set(0, true, election.Meta{Eligible: true, Holding: true})
	g.Eventually(done, 2*time.Second).Should(Receive(BeNil()))
	g.Expect(dp.closed).To(BeTrue())
	g.Expect(ml.left).To(BeTrue())
}

// TestClaimRedirectsPreviousOwnersFlows: claiming the VIPs from a member that
// still holds them (it drains after we announce) asks the data plane to send
// that member's flows back to it for the drain plus a margin; a claim with no
// previous holder asks nothing.
func TestClaimRedirectsPreviousOwnersFlows(t *testing.T) {
	for _, tc := range []struct {
		name           string
		bHolding       bool
		removedHolding bool
		wantRedir      []netip.Addr
		wantWindow     time.Duration
	}{
		{name: "hand-over from b", bHolding: true, wantRedir: []netip.Addr{netip.MustParseAddr("192.0.2.2")},
			wantWindow: 500*time.Millisecond + handoverRedirectMargin},
		{name: "nobody held the VIPs", bHolding: false},
		// The latest membership version removed the holder: it drains outside
		// the roster, known only to gossip (found by TestMembershipLifecycle:
		// a handshake whose SYN reached the removed holder got a RST here).
		{name: "hand-over from a removed member", removedHolding: true,
			wantRedir: []netip.Addr{netip.MustParseAddr("192.0.2.9")}, wantWindow: 500*time.Millisecond + handoverRedirectMargin},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			a, ml, dp, _ := newTestAgent(t, 1)
			ml.set(0, true, election.Meta{Eligible: false, Holding: tc.bHolding, Quiescing: true})
			if tc.removedHolding {
				ml.mu.Lock()
				ml.outside = []election.MemberView{{Name: "removed", Alive: true, Address: netip.MustParseAddr("192.0.2.9"),
					Meta: election.Meta{Holding: true, Quiescing: true}}}
				ml.mu.Unlock()
			}
			t0 := time.Now()
			for i := 0; i < 100 && !a.st.holding; i++ {
				step(a, t0.Add(time.Duration(i)*50*time.Millisecond))
			}
			g.Expect(a.st.holding).To(BeTrue(), a.Status().Waiting)
			g.Expect(dp.handovers).To(Equal(tc.wantRedir))
			g.Expect(dp.window).To(Equal(tc.wantWindow))
		})
	}
}

// TestOwnerReleasesWithoutMajorityContact: gossip still shows a majority, but
// no majority has answered direct pings for longer than contactTimeout (a
// link too slow for the probe timeout): the owner releases, and it does not
// claim again while pings go unanswered.
func TestOwnerReleasesWithoutMajorityContact(t *testing.T) {
	g := NewWithT(t)
	a, ml, dp, _ := newTestAgent(t, 0)
	t0 := claimAsMostPreferred(t, a, ml)
	ml.contact = t0.Add(600 * time.Millisecond)

	step(a, t0.Add(1100*time.Millisecond))
	g.Expect(a.st.holding).To(BeTrue(), "contact 500ms old: not longer than contactTimeout")

	ml.confirm = false
	step(a, t0.Add(1200*time.Millisecond))
	g.Expect(a.st.holding).To(BeFalse(), "contact 600ms old: releases")
	g.Expect(dp.announce).To(BeFalse())
	g.Expect(a.Status().LastTransition.Reason).To(ContainSubstring("no direct answer from a majority"))

	step(a, t0.Add(1500*time.Millisecond))
	g.Expect(a.st.holding).To(BeFalse(), "pings still unanswered: no new claim")

	ml.confirm = true
	ml.contact = t0.Add(1600 * time.Millisecond)
	step(a, t0.Add(1600*time.Millisecond))
	g.Expect(a.st.holding).To(BeFalse(), "contact just restored: the view may be stale, settle first")
	g.Expect(a.Status().Waiting).To(ContainSubstring("settling"))

	ml.contact = t0.Add(2100 * time.Millisecond)
	step(a, t0.Add(2100*time.Millisecond))
	g.Expect(a.st.holding).To(BeTrue(), "settled with contact: the most preferred eligible member claims again")
}

// TestStalledOwnerAsksBeforeReleasing: an owner whose process was starved
// past contactTimeout (its background pings' answers unread) asks a majority
// directly before it lets go, and keeps the VIP when they answer: releasing
// would leave the VIP with nobody until another member claims, and reset
// every connection it serves.
func TestStalledOwnerAsksBeforeReleasing(t *testing.T) {
	g := NewWithT(t)
	a, ml, dp, _ := newTestAgent(t, 0)
	t0 := claimAsMostPreferred(t, a, ml)
	ml.contact = t0.Add(600 * time.Millisecond)
	before := ml.confirms

	step(a, t0.Add(1300*time.Millisecond))
	g.Expect(ml.confirms).To(Equal(before+1), "one direct-ping round")
	g.Expect(a.st.holding).To(BeTrue(), "a majority answered the round: keeps the VIP")
	g.Expect(dp.announce).To(BeTrue())
}

// TestStalledOwnerDoesNotReclaim: an owner whose process stalled past
// contactTimeout wakes up to a stale view in which its successor looks dead,
// and its direct-ping round goes unanswered too. It releases, and in the
// settle that follows it learns that the successor holds the VIP, so the VIP
// does not move back.
func TestStalledOwnerDoesNotReclaim(t *testing.T) {
	g := NewWithT(t)
	a, ml, _, _ := newTestAgent(t, 0)
	t0 := claimAsMostPreferred(t, a, ml)
	ml.contact = t0.Add(600 * time.Millisecond)

	// Woken up 700 ms later: the last answer is from before the stall, b
	// (the successor) is dead in the stale view, c is alive and not holding.
	ml.set(0, false, election.Meta{})
	ml.confirm = false
	step(a, t0.Add(1300*time.Millisecond))
	g.Expect(a.st.holding).To(BeFalse(), "stale contact, round unanswered: releases")
	ml.confirm = true

	// The next ping round is answered; the view still shows nobody holding.
	ml.contact = t0.Add(1350 * time.Millisecond)
	step(a, t0.Add(1350*time.Millisecond))
	g.Expect(a.st.holding).To(BeFalse(), "no claim from a stale view right after contact returns")

	// Gossip catches up within the settle: b holds the VIP.
	ml.set(0, true, election.Meta{Eligible: true, Holding: true})
	ml.contact = t0.Add(1900 * time.Millisecond)
	step(a, t0.Add(1900*time.Millisecond))
	g.Expect(a.st.holding).To(BeFalse(), "b holds and is eligible: stays backup")
	g.Expect(a.Status().Owner).To(Equal("b"))
}

// TestOwnerHoldsThroughNoQuorumBlip: when a partition heals, stale death
// notices can make gossip show no quorum for a moment; an owner whose
// majority answered direct pings just now keeps the VIPs, while an owner
// whose last answer is older (a real minority) releases at once.
func TestOwnerHoldsThroughNoQuorumBlip(t *testing.T) {
	cases := []struct {
		name       string
		contactAge time.Duration
		wantHold   bool
	}{
		{name: "fresh direct answers: holds", contactAge: 50 * time.Millisecond, wantHold: true},
		{name: "answers stopped: releases", contactAge: 250 * time.Millisecond, wantHold: false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			a, ml, _, _ := newTestAgent(t, 0)
			t0 := claimAsMostPreferred(t, a, ml)

			ml.set(0, false, election.Meta{})
			ml.set(1, false, election.Meta{})
			ml.mu.Lock()
			ml.confirm = false // the others are gone: a direct-ping round gets no answer either
			ml.mu.Unlock()
			now := t0.Add(700 * time.Millisecond)
			ml.contact = now.Add(-tc.contactAge)
			step(a, now)
			g.Expect(a.st.holding).To(Equal(tc.wantHold))
			if tc.wantHold {
				g.Expect(a.Status().Waiting).To(ContainSubstring("majority answered direct pings"))
				// The blip must end: past contactTimeout without gossip
				// quorum, the owner releases even with fresh answers.
				ml.contact = t0.Add(1250 * time.Millisecond)
				step(a, t0.Add(1250*time.Millisecond))
				g.Expect(a.st.holding).To(BeFalse())
			}
		})
	}
}

// TestStarvedOwnerAsksBeforeReleasing: an owner whose gossip lost quorum
// because it was starved of CPU (the others' answers read too late) asks a
// majority directly before it lets go, and keeps the VIP while they answer;
// with nobody answering it releases.
func TestStarvedOwnerAsksBeforeReleasing(t *testing.T) {
	g := NewWithT(t)
	a, ml, _, _ := newTestAgent(t, 0)
	t0 := claimAsMostPreferred(t, a, ml)
	ml.set(0, false, election.Meta{})
	ml.set(1, false, election.Meta{})
	ml.contact = t0.Add(200 * time.Millisecond) // the background rounds have not answered for 500 ms
	before := ml.confirms
	step(a, t0.Add(700*time.Millisecond))
	g.Expect(ml.confirms).To(Equal(before+1), "one direct-ping round")
	g.Expect(a.st.holding).To(BeTrue(), "a majority answered it: still holding")
	ml.mu.Lock()
	ml.confirm = false
	ml.mu.Unlock()
	step(a, t0.Add(750*time.Millisecond))
	g.Expect(a.st.holding).To(BeFalse(), "nobody answered: released")
}

// claimAsMostPreferred steps a (the most preferred member, every other one
// eligible and alive) through settle to a claim, and returns the time of the
// first step; the claim is at +600ms. The fake reports no direct-contact time
// unless a test sets ml.contact.
func claimAsMostPreferred(t *testing.T, a *Agent, ml *fakeML) time.Time {
	t.Helper()
	t0 := time.Now()
	step(a, t0)
	step(a, t0.Add(600*time.Millisecond))
	if !a.st.holding {
		t.Fatalf("settled and confirmed, yet no claim: %+v", a.Status())
	}
	return t0
}
