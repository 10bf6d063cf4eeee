package agent

import (
	"errors"
	"net/netip"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	agentv1 "github.com/caplb/caplb/api/agent/v1alpha1"

	"github.com/caplb/caplb/modes/election"
)

// The table tests of the pure step: each case is a state and the inputs of
// one moment, and what the step must decide. No fakes, no clock: the
// members are whatever the case says gossip shows.

var t0 = time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)

// stepRules: self, b and c, in this order of preference unless a case
// reorders the view.
func stepRules(t *testing.T, tweak func(*agentv1.AgentConfiguration)) rules {
	t.Helper()
	cfg, err := agentv1.Parse([]byte(threeMembers))
	if err != nil {
		t.Fatal(err)
	}
	if tweak != nil {
		tweak(cfg)
	}
	return rules{cfg: cfg, vips: cfg.ParsedVIPs()}
}

// redirecting is a settled holder whose claim redirects flows to from.
func redirecting(from netip.Addr) loopState {
	st := settled()
	st.holding, st.redirectFrom, st.lastSync = true, from, t0
	return st
}

// peer is another member as gossip shows it.
func peer(name string, alive bool, m election.Meta) election.MemberView {
	return election.MemberView{Name: name, Alive: alive, Meta: m}
}

var (
	eligiblePeer = election.Meta{Eligible: true}
	holdingPeer  = election.Meta{Eligible: true, Holding: true}
	downPeer     = election.Meta{}
)

// moment is the inputs at now with self healthy, its link up, quorum
// confirmed just now, and the members in order (self's entry is filled in).
func moment(now time.Time, members ...election.MemberView) inputs {
	v := election.View{Self: "self", Member: true}
	for _, m := range members {
		if m.Name == "self" {
			m.Alive = true
		}
		v.Members = append(v.Members, m)
	}
	roster := election.Roster{}
	for _, m := range v.Members {
		roster.Members = append(roster.Members, election.Member{Name: m.Name})
	}
	return inputs{now: now, healthy: true, linkUp: true, election: true, view: v, roster: roster,
		confirmedAt: now, runningMember: true}
}

// self is this node's slot in a view.
var self = election.MemberView{Name: "self"}

// settled is a backup whose quorum is older than any settle.
func settled() loopState {
	return loopState{quorumSince: t0.Add(-time.Minute), quiesceBy: map[string]string{}}
}

// owner is settled and holding.
func owner() loopState {
	st := settled()
	st.holding, st.transitions, st.lastSync = true, 1, t0.Add(-10*time.Millisecond)
	return st
}

func with(in inputs, f func(*inputs)) inputs { f(&in); return in }

func confirmed(in inputs) inputs {
	in.confirmation = &confirmation{reached: 2, needed: 2}
	return in
}

type stepCase struct {
	name  string
	tweak func(*agentv1.AgentConfiguration)
	st    loopState
	in    inputs
	// want
	holding  bool
	needPing bool
	// needBusy: the step asks for the data plane's busy connections.
	needBusy bool
	quiet    bool
	// reason is found in the change's reason, or in what the step waits for.
	reason   string
	handOver netip.Addr
	check    func(g Gomega, st loopState, out output)
}

func runStepCases(t *testing.T, cases []stepCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			r := stepRules(t, tc.tweak)
			before := tc.st
			st, out := r.step(tc.st, tc.in)
			g.Expect(out.needConfirmation).To(Equal(tc.needPing), "asks for a direct-ping round")
			g.Expect(out.needBusy).To(Equal(tc.needBusy), "asks for the busy connections")
			if tc.needPing || tc.needBusy {
				g.Expect(st.holding).To(Equal(before.holding), "no decision without the pings")
				return
			}
			g.Expect(st.holding).To(Equal(tc.holding), "holding; waiting: %q, last: %q", st.waitingReason, st.lastReason)
			g.Expect(out.desired.Announce).To(Equal(tc.holding), "the data plane is told what the state says")
			g.Expect(out.desired.Quiet).To(Equal(tc.quiet), "quiet")
			if tc.holding != before.holding {
				g.Expect(out.sync).To(BeTrue(), "a change of role is synced")
				g.Expect(st.transitions).To(Equal(before.transitions + 1))
			}
			if tc.reason != "" {
				g.Expect(st.waitingReason + " | " + st.lastReason).To(ContainSubstring(tc.reason))
			}
			if tc.handOver.IsValid() {
				g.Expect(out.desired.HandOver).NotTo(BeNil())
				g.Expect(out.desired.HandOver.From).To(Equal(tc.handOver))
				g.Expect(out.desired.HandOver.Window).To(Equal(r.cfg.Quiesce.Drain.Duration+r.cfg.Quiesce.BusyDrain.Duration+handoverRedirectMargin),
					"the redirect lasts as long as the previous holder may drain")
			} else {
				g.Expect(out.desired.HandOver).To(BeNil())
			}
			g.Expect(tc.st).To(Equal(before), "step does not change the state it was given")
			if tc.check != nil {
				tc.check(g, st, out)
			}
		})
	}
}

// TestStepClaim: claim staggering, settling, the direct-ping confirmation
// and the hand-over redirect of a claim.
func TestStepClaim(t *testing.T) {
	staggerStarted := settled()
	staggerStarted.claimSince = t0.Add(-70 * time.Millisecond)
	runStepCases(t, []stepCase{
		{name: "the most preferred eligible member asks for a ping round before it claims",
			st: settled(), in: moment(t0, self, peer("b", true, eligiblePeer), peer("c", true, eligiblePeer)), needPing: true},
		{name: "with a majority answering it claims",
			st: settled(), in: confirmed(moment(t0, self, peer("b", true, eligiblePeer), peer("c", true, eligiblePeer))), holding: true},
		{name: "without a majority answering it waits a probe interval",
			st: settled(), in: with(moment(t0, self, peer("b", true, eligiblePeer)), func(in *inputs) { in.confirmation = &confirmation{reached: 1, needed: 2} }),
			reason: "claim withheld: 1 of 2 needed members answered",
			check:  func(g Gomega, st loopState, _ output) { g.Expect(st.confirmFailAt).To(Equal(t0)) }},
		{name: "quorum just gained: settles first",
			st: loopState{}, in: moment(t0, self, peer("b", true, eligiblePeer)), reason: "settling"},
		{name: "an alive member preferred over self gets a head start",
			st: settled(), in: moment(t0, peer("b", true, downPeer), self, peer("c", true, eligiblePeer)), reason: "claim staggered 60ms"},
		{name: "after the head start self claims",
			st: staggerStarted, in: confirmed(moment(t0, peer("b", true, downPeer), self, peer("c", true, eligiblePeer))), holding: true},
		{name: "the owner preferred but dead: no wait",
			st: settled(), in: moment(t0, peer("b", false, downPeer), self, peer("c", true, eligiblePeer)), needPing: true},
		{name: "no preemption: an eligible holder keeps the VIP",
			st: settled(), in: moment(t0, self, peer("b", true, holdingPeer), peer("c", true, eligiblePeer))},
		{name: "claiming from a holder that drains redirects its flows to it",
			st:       staggerStarted,
			in:       confirmed(moment(t0, peer("b", true, election.Meta{Holding: true, Quiescing: true}), self, peer("c", true, eligiblePeer))),
			holding:  true,
			handOver: netip.MustParseAddr("192.0.2.2")},
		{name: "with quiesce.busyDrain the redirect lasts drain + busyDrain (+ margin)",
			tweak: func(c *agentv1.AgentConfiguration) {
				c.Quiesce.Drain.Duration, c.Quiesce.BusyDrain.Duration = 5*time.Second, 10*time.Second
			},
			st:       staggerStarted,
			in:       confirmed(moment(t0, peer("b", true, election.Meta{Holding: true, Quiescing: true}), self, peer("c", true, eligiblePeer))),
			holding:  true,
			handOver: netip.MustParseAddr("192.0.2.2")},
		{name: "claiming from a holder outside the roster redirects too",
			st: settled(),
			in: with(confirmed(moment(t0, self, peer("b", true, eligiblePeer), peer("c", true, eligiblePeer))), func(in *inputs) {
				in.view.Others = []election.MemberView{{Name: "removed", Alive: true, Address: netip.MustParseAddr("192.0.2.9"),
					Meta: election.Meta{Holding: true, Quiescing: true}}}
			}),
			holding: true, handOver: netip.MustParseAddr("192.0.2.9")},
		{name: "a failed Sync of a claim leaves the state unclaimed",
			st: settled(), in: confirmed(moment(t0, self, peer("b", true, eligiblePeer))), holding: true,
			check: func(g Gomega, _ loopState, out output) {
				g.Expect(out.unsynced.holding).To(BeFalse())
				g.Expect(out.unsynced.lastSync).To(BeZero(), "the re-sync is not put off")
			}},
		{name: "in bgp mode every eligible member announces, without election",
			tweak: func(c *agentv1.AgentConfiguration) { c.Mode = agentv1.ModeBGP },
			st:    loopState{}, in: inputs{now: t0, healthy: true, linkUp: true}, holding: true, reason: "bgp"},
	})
}

// TestStepHandOver: make-before-break, the drain, and the hand-over's end.
func TestStepHandOver(t *testing.T) {
	draining := owner()
	draining.handingOver, draining.successor, draining.successorAt = true, "b", t0.Add(-100*time.Millisecond)
	drained := draining
	drained.successorAt = t0.Add(-500 * time.Millisecond)
	exitWait := owner()
	exitWait.exiting, exitWait.quiescing, exitWait.handoverStart = true, true, t0.Add(-time.Hour)
	runStepCases(t, []stepCase{
		{name: "quiesced owner keeps the VIP, quiet, until a successor announces it",
			st: owner(), in: with(moment(t0, self, peer("b", true, eligiblePeer)), func(in *inputs) {
				in.quiesce = []quiesceRequest{{source: "admin", reason: "admin request"}}
			}),
			holding: true, quiet: true, reason: "handing over",
			check: func(g Gomega, st loopState, out output) {
				g.Expect(st.quiescing).To(BeTrue())
				g.Expect(out.metaBefore.Eligible).To(BeFalse())
				g.Expect(out.metaBefore.Quiescing).To(BeTrue())
			}},
		{name: "a successor announces: drain",
			st: with2(owner(), func(s *loopState) { s.quiescing = true }), in: moment(t0, self, peer("b", true, holdingPeer)),
			holding: true, quiet: true, reason: "draining: b announces the VIPs",
			check: func(g Gomega, st loopState, _ output) { g.Expect(st.handingOver).To(BeTrue()) }},
		{name: "recovered during the drain: still not eligible, the hand-over goes on",
			st: draining, in: moment(t0, self, peer("b", true, holdingPeer)), holding: true, quiet: true,
			check: func(g Gomega, _ loopState, out output) { g.Expect(out.eligible).To(BeFalse()) }},
		{name: "after the drain: released",
			st: drained, in: moment(t0, self, peer("b", true, holdingPeer)), reason: "handed over to b",
			check: func(g Gomega, st loopState, _ output) {
				g.Expect(st.handingOver).To(BeFalse())
				g.Expect(st.releasedAt).To(Equal(t0))
			}},
		{name: "exit asked: hands over like a quiesce",
			st: owner(), in: with(moment(t0, self, peer("b", true, eligiblePeer)), func(in *inputs) { in.exit = true }),
			holding: true, quiet: true,
			check: func(g Gomega, st loopState, out output) {
				g.Expect(st.exiting).To(BeTrue())
				g.Expect(st.handoverStart).To(Equal(t0))
				g.Expect(out.notes).NotTo(BeEmpty())
			}},
		{name: "exiting with no successor within the hand-over timeout: released",
			st: exitWait, in: moment(t0, self, peer("b", true, eligiblePeer)), reason: "no successor announced within"},
		{name: "exiting with nobody eligible: released at once",
			st: with2(owner(), func(s *loopState) { s.exiting, s.quiescing = true, true }), in: moment(t0, self, peer("b", true, downPeer)),
			reason: "exiting and no eligible member"},
		{name: "quiesce with nobody eligible: holds, announcing (the only way to the VIP)",
			st: with2(owner(), func(s *loopState) { s.quiescing = true }), in: moment(t0, self, peer("b", true, downPeer)),
			holding: true, reason: "quiesce pending"},
		{name: "the VIP interface down: released at once",
			st: owner(), in: with(moment(t0, self, peer("b", true, eligiblePeer)), func(in *inputs) { in.linkDown, in.linkUp = true, false }),
			reason: "VIP interface down"},
		{name: "no direct answer from a majority for contactTimeout: a direct-ping round first (a starved holder's answers sit unread)",
			st: owner(), in: with(moment(t0, self, peer("b", true, eligiblePeer)), func(in *inputs) { in.confirmedAt = t0.Add(-time.Second) }),
			needPing: true},
		{name: "no direct answer from a majority, nor to the round: released",
			st: owner(), in: with(moment(t0, self, peer("b", true, eligiblePeer)), func(in *inputs) {
				in.confirmedAt = t0.Add(-time.Second)
				in.confirmation = &confirmation{reached: 1, needed: 2}
			}),
			reason: "no direct answer from a majority for 500ms, nor to a direct-ping round just now",
			check: func(g Gomega, st loopState, _ output) {
				g.Expect(st.quorumSince).To(Equal(t0), "settles again from now")
			}},
		{name: "no answer for contactTimeout but a majority answers the round: keeps the VIP (it was starved, not cut off)",
			st: owner(), in: confirmed(with(moment(t0, self, peer("b", true, eligiblePeer)), func(in *inputs) { in.confirmedAt = t0.Add(-time.Second) })),
			holding: true},
		{name: "a draining holder starved: the round, then the busy count (two I/Os in one turn)",
			tweak: func(c *agentv1.AgentConfiguration) { c.Quiesce.BusyDrain.Duration = 10 * time.Second },
			st: with2(owner(), func(s *loopState) {
				s.quiescing, s.handingOver, s.successor, s.successorAt = true, true, "b", t0.Add(-time.Second)
			}),
			in:       confirmed(with(moment(t0, self, peer("b", true, holdingPeer)), func(in *inputs) { in.confirmedAt = t0.Add(-time.Second) })),
			needBusy: true},
	})
}

// TestStepBusyDrain: with quiesce.busyDrain a drained holder keeps the VIP,
// quiet, while connections still carry requests, for at most busyDrain more.
func TestStepBusyDrain(t *testing.T) {
	busyDrain := func(c *agentv1.AgentConfiguration) {
		c.Quiesce.Drain.Duration, c.Quiesce.BusyDrain.Duration = 5*time.Second, 10*time.Second
	}
	drainedFor := func(d time.Duration) loopState {
		st := with2(owner(), func(s *loopState) { s.quiescing = true })
		st.handingOver, st.successor, st.successorAt = true, "b", t0.Add(-d)
		return st
	}
	busy := func(n int) func(*inputs) { return func(in *inputs) { in.busy = &n } }
	successorHolds := moment(t0, self, peer("b", true, holdingPeer))
	runStepCases(t, []stepCase{
		{name: "during the drain the busy connections are counted (the data plane keeps a history)",
			tweak: busyDrain, st: drainedFor(time.Second), in: successorHolds, needBusy: true},
		{name: "during the drain, busy or not: holds, quiet",
			tweak: busyDrain, st: drainedFor(time.Second), in: with(successorHolds, busy(0)), holding: true, quiet: true,
			reason: "draining: b announces the VIPs"},
		{name: "after the drain with busy connections: holds, quiet, saying how many and how long at most",
			tweak: busyDrain, st: drainedFor(6 * time.Second), in: with(successorHolds, busy(2)), holding: true, quiet: true,
			reason: "2 connection(s) here still carry requests (until they move, at most 9s more)"},
		{name: "after the drain with none busy: released at once",
			tweak: busyDrain, st: drainedFor(6 * time.Second), in: with(successorHolds, busy(0)), reason: "handed over to b"},
		{name: "busyDrain ran out: released with connections still busy, without asking",
			tweak: busyDrain, st: drainedFor(15 * time.Second), in: successorHolds, reason: "handed over to b"},
		{name: "busyDrain off (the default): released after the drain without asking",
			tweak: func(c *agentv1.AgentConfiguration) { c.Quiesce.Drain.Duration = 5 * time.Second },
			st:    drainedFor(6 * time.Second), in: successorHolds, reason: "handed over to b"},
	})
}

// TestStepFailOpen: every API server failing at once keeps the VIP where it
// is, on one holder only, and only with quorum.
func TestStepFailOpen(t *testing.T) {
	unhealthy := func(members ...election.MemberView) inputs {
		return with(moment(t0, members...), func(in *inputs) { in.healthy = false })
	}
	runStepCases(t, []stepCase{
		{name: "unhealthy with nobody eligible keeps the VIP and keeps answering",
			st: owner(), in: unhealthy(self, peer("b", true, downPeer), peer("c", true, downPeer)), holding: true, reason: "fail-open",
			check: func(g Gomega, st loopState, _ output) { g.Expect(st.lastFailOpen).To(BeTrue()) }},
		{name: "failOpen: false releases",
			tweak: func(c *agentv1.AgentConfiguration) { c.Election.FailOpen = new(false) },
			st:    owner(), in: unhealthy(self, peer("b", true, downPeer), peer("c", true, downPeer)), reason: "no eligible member to hand over to"},
		{name: "a preferred member holds too: the less preferred lets go",
			st: owner(), in: unhealthy(peer("b", true, election.Meta{Holding: true}), self, peer("c", true, downPeer)),
			reason: "fail-open: b, preferred over this node, keeps the VIP"},
		{name: "a less preferred member holds too: self keeps it",
			st: owner(), in: unhealthy(self, peer("b", true, election.Meta{Holding: true}), peer("c", true, downPeer)), holding: true},
		{name: "unhealthy with an eligible member: hands over, quiet",
			st: owner(), in: unhealthy(self, peer("b", true, eligiblePeer), peer("c", true, downPeer)), holding: true, quiet: true},
		{name: "never without quorum",
			st: owner(), in: with(unhealthy(self, peer("b", false, downPeer), peer("c", false, downPeer)), func(in *inputs) {
				in.confirmedAt = t0.Add(-time.Second)
				in.confirmation = &confirmation{reached: 1, needed: 2}
			}),
			reason: "quorum"},
		{name: "gossip without quorum asks a majority directly first",
			st: owner(), in: with(unhealthy(self, peer("b", false, downPeer), peer("c", false, downPeer)), func(in *inputs) { in.confirmedAt = t0.Add(-time.Second) }),
			holding: true, needPing: true},
	})
}

// TestStepFailOpenClaim: with nobody holding and nobody eligible (etcd
// without quorum, or the API servers coming back one by one), the most
// preferred alive member that is not quiescing claims the VIP; an unhealthy
// holder whose eligible successor never announces keeps the VIP, answering.
func TestStepFailOpenClaim(t *testing.T) {
	unhealthy := func(in inputs) inputs { in.healthy = false; return in }
	quiescingPeer := election.Meta{Quiescing: true}
	stalled := owner()
	stalled.handoverStart = t0.Add(-6 * time.Second)
	runStepCases(t, []stepCase{
		{name: "nobody holds, nobody eligible, self most preferred: a direct-ping round, then the claim",
			st: settled(), in: unhealthy(moment(t0, self, peer("b", true, downPeer), peer("c", true, downPeer))), needPing: true},
		{name: "confirmed: claims, answering (nobody to be quiet for)",
			st: settled(), in: confirmed(unhealthy(moment(t0, self, peer("b", true, downPeer), peer("c", true, downPeer)))),
			holding: true, reason: "fail-open: nobody holds the VIP and no member is eligible"},
		{name: "a more preferred member alive: it claims, not self",
			st: settled(), in: unhealthy(moment(t0, peer("b", true, downPeer), self, peer("c", true, downPeer))), reason: "not eligible"},
		{name: "the more preferred member quiescing: self claims",
			st: settled(), in: unhealthy(moment(t0, peer("b", true, quiescingPeer), self, peer("c", true, downPeer))), needPing: true},
		{name: "the more preferred member dead: self claims",
			st: settled(), in: unhealthy(moment(t0, peer("b", false, downPeer), self, peer("c", true, downPeer))), needPing: true},
		{name: "someone holds: fail-open is its business",
			st: settled(), in: unhealthy(moment(t0, self, peer("b", true, election.Meta{Holding: true}), peer("c", true, downPeer)))},
		{name: "a removed member still holds: no claim",
			st: settled(), in: with(unhealthy(moment(t0, self, peer("b", true, downPeer), peer("c", true, downPeer))), func(in *inputs) {
				in.view.Others = []election.MemberView{{Name: "gone", Alive: true, Meta: election.Meta{Holding: true}}}
			})},
		{name: "someone eligible: it claims the normal way",
			st: settled(), in: unhealthy(moment(t0, self, peer("b", true, eligiblePeer), peer("c", true, downPeer)))},
		{name: "failOpen: false: no claim",
			tweak: func(c *agentv1.AgentConfiguration) { c.Election.FailOpen = new(false) },
			st:    settled(), in: unhealthy(moment(t0, self, peer("b", true, downPeer), peer("c", true, downPeer)))},
		{name: "self quiescing: no claim",
			st: with2(settled(), func(s *loopState) { s.quiescing = true }),
			in: unhealthy(moment(t0, self, peer("b", true, downPeer), peer("c", true, downPeer)))},
		{name: "healthy self is simply eligible (the normal claim)",
			st: settled(), in: moment(t0, self, peer("b", true, downPeer), peer("c", true, downPeer)), needPing: true},
		{name: "an unhealthy holder whose eligible successor never announced: keeps the VIP after handoverTimeout, answering",
			st: stalled, in: unhealthy(moment(t0, self, peer("b", true, eligiblePeer), peer("c", true, downPeer))),
			holding: true, quiet: false, reason: "no successor announced within 5s: keeping the VIP"},
		{name: "before handoverTimeout it waits quiet",
			st: with2(owner(), func(s *loopState) { s.handoverStart = t0.Add(-time.Second) }),
			in: unhealthy(moment(t0, self, peer("b", true, eligiblePeer), peer("c", true, downPeer))), holding: true, quiet: true},
		{name: "exiting: still released after handoverTimeout",
			st: with2(stalled, func(s *loopState) { s.exiting, s.quiescing = true, true }),
			in: unhealthy(moment(t0, self, peer("b", true, eligiblePeer), peer("c", true, downPeer))), reason: "no successor announced within"},
	})
}

// TestStepSilentHolder: a holder silent to a majority of direct pings is
// treated as failed; silent to us alone, it is only reported.
func TestStepSilentHolder(t *testing.T) {
	// b's latest handshake failed too, after its last answer: gone, not starved.
	answers := func(b, c time.Time) map[string]election.Answers {
		return map[string]election.Answers{"b": {Last: b, Unanswered: b.Add(time.Millisecond)}, "c": {Last: c}}
	}
	long := t0.Add(-time.Second)
	runStepCases(t, []stepCase{
		{name: "silent to us alone: reported, not dropped",
			st: settled(), in: with(moment(t0, peer("b", true, holdingPeer), self, peer("c", true, eligiblePeer)), func(in *inputs) { in.answers = answers(long, t0) }),
			check: func(g Gomega, st loopState, out output) {
				g.Expect(st.silent).To(Equal("b"))
				g.Expect(out.metaBefore.Silent).To(Equal("b"), "gossiped")
				g.Expect(out.decision.Owner).To(Equal("b"))
			}},
		{name: "silent to a majority: treated as failed, the next member claims",
			st: settled(), in: with(confirmed(moment(t0, peer("b", true, holdingPeer), self, peer("c", true, election.Meta{Eligible: true, Silent: "b"}))),
				func(in *inputs) { in.answers = answers(long, t0) }),
			holding: true, handOver: netip.MustParseAddr("192.0.2.2"),
			check: func(g Gomega, st loopState, out output) {
				g.Expect(st.silentLogged).To(Equal("b"))
				g.Expect(out.notes).To(HaveLen(1), "logged once")
				// b may only be starved: its flows go back to it, not to our RST.
				g.Expect(st.redirectFrom).To(Equal(netip.MustParseAddr("192.0.2.2")))
			}},
		{name: "silent to a majority's pings but its kernel completes handshakes (starved): not reported, no claim",
			st: settled(), in: with(confirmed(moment(t0, peer("b", true, holdingPeer), self, peer("c", true, election.Meta{Eligible: true, Silent: "b"}))),
				func(in *inputs) {
					in.answers = map[string]election.Answers{"b": {Last: long, Unanswered: long.Add(time.Millisecond), Listening: long.Add(2 * time.Millisecond)}, "c": {Last: t0}}
				}),
			check: func(g Gomega, st loopState, out output) {
				g.Expect(st.silent).To(BeEmpty())
				g.Expect(out.decision.Owner).To(Equal("b"))
			}},
		{name: "gossip declared the last holder dead, its kernel completes handshakes: claim withheld",
			st: settled(), in: with(confirmed(moment(t0, peer("b", false, downPeer), self, peer("c", true, eligiblePeer))),
				func(in *inputs) {
					in.view.LastHolder = "b"
					in.answers = map[string]election.Answers{"b": {Last: t0.Add(-300 * time.Millisecond), Listening: t0.Add(-50 * time.Millisecond)}, "c": {Last: t0}}
				}),
			reason: "starved of CPU, not gone"},
		{name: "gossip declared the last holder dead and its listener refused a handshake: claim",
			st: settled(), in: with(confirmed(moment(t0, peer("b", false, downPeer), self, peer("c", true, eligiblePeer))),
				func(in *inputs) {
					in.view.LastHolder = "b"
					in.answers = map[string]election.Answers{"b": {Last: t0.Add(-300 * time.Millisecond), Listening: t0.Add(-400 * time.Millisecond),
						Unanswered: t0.Add(-50 * time.Millisecond)}, "c": {Last: t0}}
				}),
			holding: true},
		{name: "the last holder never heard from (a fresh agent): nothing to go by, claim",
			st: settled(), in: with(confirmed(moment(t0, peer("b", false, downPeer), self, peer("c", true, eligiblePeer))),
				func(in *inputs) { in.view.LastHolder = "b"; in.answers = map[string]election.Answers{"c": {Last: t0}} }),
			holding: true},
		{name: "fail-open: the last holder is starved, not gone: no fail-open claim",
			st: settled(), in: with(confirmed(with(moment(t0, self, peer("b", false, downPeer), peer("c", true, downPeer)), func(in *inputs) { in.healthy = false })),
				func(in *inputs) {
					in.view.LastHolder = "b"
					in.answers = map[string]election.Answers{"b": {Last: t0.Add(-300 * time.Millisecond), Listening: t0.Add(-50 * time.Millisecond)}, "c": {Last: t0}}
				}),
			reason: "fail-open claim withheld"},
		{name: "holding with a redirect to a holder that still holds: kept",
			st: redirecting(netip.MustParseAddr("192.0.2.2")), in: moment(t0, peer("b", true, election.Meta{Holding: true, Quiescing: true}), self, peer("c", true, eligiblePeer)),
			holding: true, handOver: netip.MustParseAddr("192.0.2.2"),
			check: func(g Gomega, st loopState, out output) {
				g.Expect(out.sync).To(BeFalse(), "nothing to change")
				g.Expect(st.redirectFrom).To(Equal(netip.MustParseAddr("192.0.2.2")))
			}},
		{name: "the previous owner died: the redirect ends at once (our RST is the fastest news)",
			st: redirecting(netip.MustParseAddr("192.0.2.2")), in: moment(t0, peer("b", false, holdingPeer), self, peer("c", true, eligiblePeer)),
			holding: true,
			check: func(g Gomega, st loopState, out output) {
				g.Expect(out.sync).To(BeTrue(), "the data plane removes the redirect")
				g.Expect(st.redirectFrom.IsValid()).To(BeFalse())
			}},
		{name: "gossip declared the previous owner dead, its kernel completes handshakes (starved while draining): the redirect stays",
			st: redirecting(netip.MustParseAddr("192.0.2.2")), in: with(moment(t0, peer("b", false, downPeer), self, peer("c", true, eligiblePeer)), func(in *inputs) {
				in.view.LastHolder = "b"
				in.answers = map[string]election.Answers{"b": {Last: t0.Add(-300 * time.Millisecond), Listening: t0.Add(-50 * time.Millisecond)}, "c": {Last: t0}}
			}),
			holding: true, handOver: netip.MustParseAddr("192.0.2.2"),
			check: func(g Gomega, st loopState, out output) {
				g.Expect(st.redirectFrom).To(Equal(netip.MustParseAddr("192.0.2.2")))
			}},
		{name: "gossip declared the previous owner dead and its listener refused: the redirect ends",
			st: redirecting(netip.MustParseAddr("192.0.2.2")), in: with(moment(t0, peer("b", false, downPeer), self, peer("c", true, eligiblePeer)), func(in *inputs) {
				in.view.LastHolder = "b"
				in.answers = map[string]election.Answers{"b": {Last: t0.Add(-300 * time.Millisecond), Listening: t0.Add(-250 * time.Millisecond),
					Unanswered: t0.Add(-50 * time.Millisecond)}, "c": {Last: t0}}
			}),
			holding: true,
			check: func(g Gomega, st loopState, out output) {
				g.Expect(out.sync).To(BeTrue())
				g.Expect(st.redirectFrom.IsValid()).To(BeFalse())
			}},
		{name: "the previous owner let go: the redirect ends",
			st: redirecting(netip.MustParseAddr("192.0.2.2")), in: moment(t0, peer("b", true, downPeer), self, peer("c", true, eligiblePeer)),
			holding: true,
			check: func(g Gomega, st loopState, out output) {
				g.Expect(out.sync).To(BeTrue())
				g.Expect(st.redirectFrom.IsValid()).To(BeFalse())
			}},
		{name: "not hearing the others either: this member may be the stalled one",
			st: settled(), in: with(moment(t0, peer("b", true, holdingPeer), self, peer("c", true, election.Meta{Eligible: true, Silent: "b"})),
				func(in *inputs) { in.answers = answers(long, time.Time{}) }),
			check: func(g Gomega, st loopState, _ output) { g.Expect(st.silent).To(BeEmpty()) }},
		{name: "a holder that answered recently is not silent",
			st: settled(), in: with(moment(t0, peer("b", true, holdingPeer), self, peer("c", true, election.Meta{Eligible: true, Silent: "b"})),
				func(in *inputs) { in.answers = answers(t0.Add(-50*time.Millisecond), t0) }),
			check: func(g Gomega, st loopState, _ output) { g.Expect(st.silent).To(BeEmpty()) }},
	})
}

// TestStepQuiesceAndMembership: quiesce sources, membership versions.
func TestStepQuiesceAndMembership(t *testing.T) {
	twoSources := settled()
	twoSources.quiescing, twoSources.quiesceBy = true, map[string]string{"node": "disabled annotation", "admin": "admin request"}
	runStepCases(t, []stepCase{
		{name: "one source withdraws, the other still asks",
			st: twoSources, in: with(moment(t0, self, peer("b", true, eligiblePeer)), func(in *inputs) { in.quiesce = []quiesceRequest{{source: "admin"}} }),
			reason: "not eligible: quiescing",
			check: func(g Gomega, st loopState, _ output) {
				g.Expect(st.quiescing).To(BeTrue())
				g.Expect(st.quiesceReason()).To(Equal("disabled annotation"))
			}},
		{name: "both withdrawn: eligible again",
			st: twoSources, in: with(moment(t0, self, peer("b", true, eligiblePeer)), func(in *inputs) {
				in.quiesce = []quiesceRequest{{source: "admin"}, {source: "node"}}
			}),
			needPing: true},
		{name: "outside the membership it runs: never eligible",
			st: settled(), in: with(moment(t0, peer("b", true, eligiblePeer), peer("c", true, eligiblePeer)), func(in *inputs) {
				in.view.Member, in.view.Version, in.roster.Version = false, 3, 3
			}),
			check: func(g Gomega, st loopState, out output) {
				g.Expect(out.eligible).To(BeFalse())
			}},
		{name: "a peer runs a newer membership: no claim, pull it",
			st: settled(), in: with(moment(t0, self, peer("b", true, election.Meta{Eligible: true, Version: 4}), peer("c", true, eligiblePeer)), func(in *inputs) {
				in.view.Version = 3
			}),
			reason: "claim withheld: a peer runs membership version 4",
			check: func(g Gomega, st loopState, out output) {
				g.Expect(out.pull).To(Equal([]string{"b"}))
				g.Expect(st.pulledAt).To(Equal(t0))
			}},
	})
}

// TestStepBootstrap: the first machine of a new cluster probes before it
// takes the VIP alone.
func TestStepBootstrap(t *testing.T) {
	g := NewWithT(t)
	r := stepRules(t, func(c *agentv1.AgentConfiguration) { c.Membership.Dynamic = true })
	r.probeBootstrap = true
	in := inputs{now: t0, healthy: true, linkUp: true, election: true, view: election.View{Self: "self"}, probeJitter: 300 * time.Millisecond}
	st, out := r.step(loopState{}, in)
	g.Expect(out.needProbe).To(BeTrue())
	g.Expect(st.holding).To(BeFalse())

	in.probe = &probeOutcome{res: probeResult{answered: true}}
	st, _ = r.step(loopState{}, in)
	g.Expect(st.holding).To(BeFalse())
	g.Expect(st.nextProbe).To(Equal(t0.Add(1300*time.Millisecond)), "one second and the jitter")
	g.Expect(st.waitingReason).To(ContainSubstring("another host answers"))

	in.probe = &probeOutcome{err: errors.New("no socket")}
	st, _ = r.step(loopState{}, in)
	g.Expect(st.waitingReason).To(ContainSubstring("probing the VIP failed: no socket"))

	in.probe = &probeOutcome{}
	st, out = r.step(loopState{}, in)
	g.Expect(st.holding).To(BeTrue())
	g.Expect(out.desired.Announce).To(BeTrue())
}

func with2(st loopState, f func(*loopState)) loopState { f(&st); return st }
