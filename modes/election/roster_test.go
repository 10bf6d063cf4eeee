package election

import (
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	. "github.com/onsi/gomega"
)

func TestDecideAgreement(t *testing.T) {
	const dg = "d1"
	m := func(name string, alive bool, meta Meta) MemberView {
		return MemberView{Name: name, Alive: alive, Meta: meta}
	}
	e := func(v int64) Meta { return Meta{Eligible: true, Version: v, ConfigDigest: dg} }
	eh := func(v int64) Meta { return Meta{Eligible: true, Holding: true, Version: v, ConfigDigest: dg} }
	cases := []struct {
		name                string
		view                View
		owner               string
		quorum, claimQuorum bool
		seen, agreeing      int
		newest              int64
		conflicting         []string
	}{
		{"all agree",
			View{Self: "a", Version: 3, Digest: dg, Member: true, Members: []MemberView{m("a", true, e(3)), m("b", true, e(3)), m("c", true, e(3))}},
			"a", true, true, 3, 3, 3, nil},
		{"same version, other configuration: counts for nothing",
			View{Self: "a", Version: 3, Digest: dg, Member: true, Members: []MemberView{m("a", true, e(3)),
				m("b", true, Meta{Eligible: true, Holding: true, Version: 3, ConfigDigest: "other"}), m("c", false, Meta{})}},
			"a", false, false, 1, 1, 3, []string{"b"}},
		{"a peer on an older version counts toward holding, not toward a claim",
			View{Self: "a", Version: 4, Digest: dg, Member: true, Members: []MemberView{m("a", true, e(4)),
				m("b", true, e(3)), m("c", false, Meta{})}},
			"a", true, false, 2, 1, 4, nil},
		{"a peer on a newer version: stale",
			View{Self: "a", Version: 3, Digest: dg, Member: true, Members: []MemberView{m("a", true, e(3)),
				m("b", true, e(4)), m("c", true, e(3))}},
			"a", true, true, 3, 2, 4, nil},
		{"a newer version seen outside the roster: stale",
			View{Self: "a", Version: 3, Digest: dg, Member: true, Members: []MemberView{m("a", true, e(3)), m("b", true, e(3))},
				Others: []MemberView{m("d", true, Meta{Version: 5, ConfigDigest: "x"})}},
			"a", true, true, 2, 2, 5, nil},
		{"a removed member still holding is the owner until it hands over",
			View{Self: "b", Version: 5, Digest: dg, Member: true, Members: []MemberView{m("b", true, e(5)), m("c", true, e(5)), m("d", true, e(5))},
				Others: []MemberView{m("a", true, eh(5))}},
			"a", true, true, 3, 3, 5, nil},
		{"a removed member that stopped being eligible is not",
			View{Self: "b", Version: 5, Digest: dg, Member: true, Members: []MemberView{m("b", true, e(5)), m("c", true, e(5)), m("d", true, e(5))},
				Others: []MemberView{m("a", true, Meta{Holding: true, Version: 5, ConfigDigest: "old"})}},
			"b", true, true, 3, 3, 5, nil},
		{"a non-member computes the roster's quorum without itself",
			View{Self: "z", Version: 2, Digest: dg, Members: []MemberView{m("a", true, eh(2)), m("b", true, e(2)), m("c", false, Meta{})}},
			"a", true, true, 2, 2, 2, nil},
		{"a member just added and not seen yet does not count for holding (1 -> 2)",
			View{Self: "a", Version: 2, Digest: dg, Member: true, Members: []MemberView{m("a", true, eh(2)), {Name: "b", Joining: true}}},
			"a", true, false, 1, 1, 2, nil},
		{"once seen, it counts: a 2-member roster with one down has no quorum",
			View{Self: "a", Version: 2, Digest: dg, Member: true, Members: []MemberView{m("a", true, eh(2)), m("b", false, Meta{})}},
			"a", false, false, 1, 1, 2, nil},
		{"empty roster: no quorum",
			View{Self: "a", Version: 0, Digest: dg},
			"", false, false, 0, 0, 0, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			d := Decide(tc.view)
			g.Expect(d.Owner).To(Equal(tc.owner), d.Reason)
			g.Expect(d.Quorum).To(Equal(tc.quorum), "quorum")
			g.Expect(d.ClaimQuorum).To(Equal(tc.claimQuorum), "claim quorum")
			g.Expect(d.Seen).To(Equal(tc.seen), "seen")
			g.Expect(d.Agreeing).To(Equal(tc.agreeing), "agreeing")
			g.Expect(d.Newest).To(Equal(tc.newest), "newest")
			g.Expect(d.Conflicting).To(Equal(tc.conflicting), "conflicting")
			g.Expect(d.Stale(tc.view)).To(Equal(tc.newest > tc.view.Version))
		})
	}
}

// node is a dynamic membership on 127.0.0.i that adopts every newer
// membership offered by gossip, as the agent's store does (minus the file).
type node struct {
	*Membership
	mu      sync.Mutex
	offered []Roster
}

func loopback(i int) netip.Addr { return netip.AddrFrom4([4]byte{127, 0, 0, byte(i)}) }

func startDynamic(t *testing.T, port, i int, r Roster, keys [][]byte, label string) *node {
	t.Helper()
	n := &node{}
	ready := make(chan struct{})
	m, err := Start(Config{
		Self: fmt.Sprintf("m%d", i), Members: r.Members, Version: r.Version, Dynamic: true, Address: loopback(i), Port: port,
		// Relaxed timers: these tests are about what gossip carries, not
		// about detection speed, and must not flap on a loaded machine.
		ProbeInterval: 300 * time.Millisecond, ProbeTimeout: 150 * time.Millisecond,
		SuspicionMult: 4, GossipInterval: 20 * time.Millisecond, RejoinInterval: 200 * time.Millisecond,
		Keys: keys, Label: label,
		OnMembership: func(r Roster) {
			n.mu.Lock()
			n.offered = append(n.offered, r)
			n.mu.Unlock()
			go func() { <-ready; n.SetRoster(r) }()
		},
	}, Meta{Eligible: true, ConfigDigest: "d"}, logr.Discard())
	if err != nil {
		t.Fatalf("start m%d: %v", i, err)
	}
	n.Membership = m
	close(ready)
	t.Cleanup(func() { _ = m.Close() })
	return n
}

func roster(v int64, idx ...int) Roster {
	r := Roster{Version: v}
	for _, i := range idx {
		r.Members = append(r.Members, Member{Name: fmt.Sprintf("m%d", i), Address: loopback(i)})
	}
	return r
}

// TestMembershipPropagatesByGossip: a new version set on one member reaches
// the others by broadcast and push/pull, and a joiner started from the
// bootstrap data (version 0, only told whom to join) learns it on join.
func TestMembershipPropagatesByGossip(t *testing.T) {
	g := NewWithT(t)
	port := freePortN(t, 4)
	key := [][]byte{[]byte("0123456789abcdef0123456789abcdef")}
	v1 := roster(1, 1, 2, 3)
	ns := []*node{startDynamic(t, port, 1, v1, key, "lb"), startDynamic(t, port, 2, v1, key, "lb"), startDynamic(t, port, 3, v1, key, "lb")}
	for _, n := range ns {
		g.Eventually(func() int { return len(n.View().Members) }, 5*time.Second).Should(Equal(3))
	}
	v2 := roster(2, 1, 2, 3, 4)
	g.Expect(ns[0].SetRoster(v2)).To(BeTrue())
	g.Expect(ns[0].SetRoster(roster(1, 1))).To(BeFalse(), "versions never go back")
	for _, n := range ns[1:] {
		g.Eventually(func() int64 { return n.Roster().Version }, 5*time.Second, 20*time.Millisecond).Should(Equal(int64(2)))
		g.Expect(n.Roster().Members).To(Equal(v2.Members))
	}
	// The joiner knows nothing but m1's address (version 0, not a member):
	// it learns version 2 from the push/pull of the join itself.
	joiner := startDynamic(t, port, 4, Roster{Version: 0, Members: []Member{{Name: "m1", Address: loopback(1)}}}, key, "lb")
	g.Eventually(func() int64 { return joiner.Roster().Version }, 5*time.Second, 20*time.Millisecond).Should(Equal(int64(2)))
	g.Eventually(func() bool { return joiner.View().Member }, 5*time.Second).Should(BeTrue())
	// Everybody sees everybody's version in gossip metadata.
	g.Eventually(func() []int64 {
		var vs []int64
		for _, mv := range ns[0].View().Members {
			vs = append(vs, mv.Meta.Version)
		}
		return vs
	}, 5*time.Second, 20*time.Millisecond).Should(Equal([]int64{2, 2, 2, 2}))
}

// TestKeyRotation: the documented procedure (add the new key as secondary
// everywhere, make it primary everywhere, drop the old one) keeps every
// mixed pair of neighbouring steps talking; skipping a step does not.
func TestKeyRotation(t *testing.T) {
	a := []byte("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa")
	b := []byte("bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb")
	steps := [][][]byte{{a}, {a, b}, {b, a}, {b}}
	cases := []struct {
		name string
		x, y int
		talk bool
	}{
		{"old key and old+new secondary", 0, 1, true},
		{"new secondary and new primary", 1, 2, true},
		{"new primary and new only", 2, 3, true},
		{"old key and new primary (a step skipped)", 0, 2, false},
		{"old key and new key only", 0, 3, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			port := freePortN(t, 2)
			r := roster(1, 1, 2)
			n1 := startDynamic(t, port, 1, r, steps[tc.x], "")
			n2 := startDynamic(t, port, 2, r, steps[tc.y], "")
			seen := func() bool { return n1.View().Members[1].Alive && n2.View().Members[0].Alive }
			if tc.talk {
				g.Eventually(seen, 5*time.Second, 20*time.Millisecond).Should(BeTrue())
				reached, needed := n1.ConfirmQuorum()
				g.Expect(reached).To(Equal(needed))
			} else {
				g.Consistently(seen, time.Second, 50*time.Millisecond).Should(BeFalse())
			}
		})
	}
}

// TestRogueWithoutKeyChangesNothing: a memberlist node without the key (or
// with another LoadBalancer's label) that takes a member's name cannot join,
// be seen, or make a member look dead.
func TestRogueWithoutKeyChangesNothing(t *testing.T) {
	for _, tc := range []struct {
		name  string
		keys  [][]byte
		label string
	}{
		{"no key", nil, "lb"},
		{"another key", [][]byte{[]byte("ffffffffffffffffffffffffffffffff")}, "lb"},
		{"the key but another label", [][]byte{[]byte("0123456789abcdef0123456789abcdef")}, "other"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			port := freePortN(t, 3)
			key := [][]byte{[]byte("0123456789abcdef0123456789abcdef")}
			r := roster(1, 1, 2)
			n1 := startDynamic(t, port, 1, r, key, "lb")
			_ = startDynamic(t, port, 2, r, key, "lb")
			g.Eventually(func() bool { return n1.View().Members[1].Alive }, 5*time.Second).Should(BeTrue())
			// The rogue claims to be m2 holding the VIP, and gossips a newer
			// membership, from 127.0.0.3.
			rogue, err := Start(Config{
				Self: "rogue", Members: []Member{{Name: "rogue", Address: loopback(3)}, {Name: "m1", Address: loopback(1)}},
				Version: 99, Dynamic: true, Port: port, Keys: tc.keys, Label: tc.label,
				ProbeInterval: 100 * time.Millisecond, ProbeTimeout: 50 * time.Millisecond,
				SuspicionMult: 2, GossipInterval: 20 * time.Millisecond, RejoinInterval: 100 * time.Millisecond,
			}, Meta{Eligible: true, Holding: true, ConfigDigest: "d"}, logr.Discard())
			g.Expect(err).NotTo(HaveOccurred())
			defer func() { _ = rogue.Close() }()
			g.Consistently(func() string {
				v := n1.View()
				var b strings.Builder
				for _, mv := range append(v.Members, v.Others...) {
					fmt.Fprintf(&b, "%s alive=%v v=%d h=%v;", mv.Name, mv.Alive, mv.Meta.Version, mv.Meta.Holding)
				}
				return b.String()
			}, 2*time.Second, 50*time.Millisecond).Should(Equal("m1 alive=true v=1 h=false;m2 alive=true v=1 h=false;"))
			g.Expect(n1.Roster().Version).To(Equal(int64(1)))
			g.Expect(len(rogue.View().Members[1:])).To(Equal(1))
			g.Expect(rogue.View().Members[1].Alive).To(BeFalse(), "the rogue never sees m1")
		})
	}
}

// TestConfirmedAtIsMonotonic: the contact time keeps Go's monotonic clock
// reading, so the agent's now.Sub(ConfirmedAt) ignores wall clock steps (a
// wall-clock value, as before, would make an NTP step release or keep the
// VIP for nothing).
func TestConfirmedAtIsMonotonic(t *testing.T) {
	g := NewWithT(t)
	port := freePortN(t, 1)
	n := startDynamic(t, port, 1, roster(1, 1), nil, "")
	before := time.Now()
	n.ConfirmQuorum()
	at := n.ConfirmedAt()
	g.Expect(at.String()).To(ContainSubstring(" m=+"), "carries a monotonic reading")
	// A wall-clock step: the same instant with the monotonic reading
	// stripped and shifted by an hour still measures the same elapsed time
	// against a monotonic now.
	g.Expect(time.Since(at)).To(BeNumerically("<", time.Since(before)+time.Millisecond))
	g.Expect(at.Round(0).Add(time.Hour).Sub(at)).To(Equal(time.Hour), "without the reading, wall time decides")
}

// TestAddedMemberDoesNotDropHolder: growing 1 → 2 while the new machine
// is still booting keeps the single member's hold (direct contact and
// quorum) but not its right to claim.
func TestAddedMemberDoesNotDropHolder(t *testing.T) {
	g := NewWithT(t)
	port := freePortN(t, 2)
	n1 := startDynamic(t, port, 1, roster(1, 1), [][]byte{[]byte("0123456789abcdef")}, "")
	g.Expect(n1.SetRoster(roster(2, 1, 2))).To(BeTrue())
	before := time.Now()
	reached, needed := n1.ConfirmQuorum()
	g.Expect([]int{reached, needed}).To(Equal([]int{1, 2}), "a claim still needs both")
	g.Expect(n1.ConfirmedAt()).To(BeTemporally(">=", before), "holding rests on the members seen so far")
	v := n1.View()
	g.Expect(v.Members[1].Joining).To(BeTrue())
	d := Decide(v)
	g.Expect(d.Quorum).To(BeTrue())
	g.Expect(d.ClaimQuorum).To(BeFalse())

	// Once m2 has been seen, it counts like any member.
	n2 := startDynamic(t, port, 2, roster(2, 1, 2), [][]byte{[]byte("0123456789abcdef")}, "")
	g.Eventually(func() bool { return n1.View().Members[1].Alive }, 5*time.Second, 20*time.Millisecond).Should(BeTrue())
	g.Expect(n1.View().Members[1].Joining).To(BeFalse())
	g.Expect(n2.Close()).To(Succeed())
	g.Eventually(func() bool { return Decide(n1.View()).Quorum }, 5*time.Second, 20*time.Millisecond).Should(BeFalse(),
		"a seen member that dies counts as down")
}

// TestVersionAndDigestMoveTogether: with a Digest function the membership
// changes the gossiped version and digest in one step with the roster (a
// peer that saw the new version with the old digest would count this
// member as misconfigured and drop it from its quorum).
func TestVersionAndDigestMoveTogether(t *testing.T) {
	g := NewWithT(t)
	port := freePortN(t, 1)
	digest := func(r Roster) string { return fmt.Sprintf("d%d", len(r.Members)) }
	m, err := Start(Config{Self: "m1", Members: roster(1, 1).Members, Version: 1, Dynamic: true, Port: port,
		ProbeInterval: 300 * time.Millisecond, ProbeTimeout: 150 * time.Millisecond, SuspicionMult: 4,
		GossipInterval: 20 * time.Millisecond, RejoinInterval: time.Second, Digest: digest},
		Meta{ConfigDigest: "from-caller"}, logr.Discard())
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = m.Close() }()
	v := m.View()
	g.Expect([]any{v.Version, v.Digest}).To(Equal([]any{int64(1), "d1"}))
	m.SetMeta(Meta{Eligible: true, ConfigDigest: "stale", Version: 7})
	v = m.View()
	g.Expect([]any{v.Version, v.Digest, v.Members[0].Meta.Eligible}).To(Equal([]any{int64(1), "d1", true}),
		"the caller sets eligibility, not the version or digest")
	g.Expect(m.SetRoster(roster(2, 1, 2))).To(BeTrue())
	v = m.View()
	g.Expect([]any{v.Version, v.Digest, v.Members[0].Meta.Version, v.Members[0].Meta.ConfigDigest}).
		To(Equal([]any{int64(2), "d2", int64(2), "d2"}))
}

// TestJoinerKnownByItsAckLearnsMembership: a joiner that knows nobody
// (version 0, no members) and that the members first hear of through its
// ack to their direct pings (the ack carries its alive message, so every
// member takes it for alive and none joins it) still learns the version
// that added it at once, not when a periodic push/pull happens to pick it.
// Before the members pushed to nodes that run an older version, about half
// of these rounds timed out.
func TestJoinerKnownByItsAckLearnsMembership(t *testing.T) {
	key := [][]byte{[]byte("0123456789abcdef0123456789abcdef")}
	for round := 0; round < 8; round++ {
		t.Run(fmt.Sprintf("round %d", round), func(t *testing.T) {
			g := NewWithT(t)
			port := freePortN(t, 4)
			v2 := roster(2, 1, 2, 3, 4)
			var ns []*node
			for i := 1; i <= 3; i++ {
				ns = append(ns, startDynamic(t, port, i, v2, key, "lb"))
			}
			// The members ping m4 directly every probe interval and try to
			// join it every rejoin interval: started a little after them,
			// m4 is reached first by either.
			time.Sleep(time.Duration(round) * 45 * time.Millisecond)
			joiner := startDynamic(t, port, 4, Roster{}, key, "lb")
			g.Eventually(func() int64 { return joiner.Roster().Version }, 3*time.Second, 20*time.Millisecond).Should(Equal(int64(2)),
				"the joiner learns the version that added it")
			g.Eventually(func() bool { return joiner.View().Member }, 3*time.Second, 20*time.Millisecond).Should(BeTrue())
		})
	}
}
