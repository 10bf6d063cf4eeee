package agent

import (
	"net/netip"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	agentv1 "github.com/caplb/caplb/api/agent/v1alpha1"

	"github.com/caplb/caplb/modes/dataplane"
	"github.com/caplb/caplb/modes/election"
)

func spreadOn(c *agentv1.AgentConfiguration) {
	c.ARP.LoadBalancing = agentv1.LoadBalancingSpread
	c.ExtraPorts = []int{9345}
}

var selfAddr, bAddr, cAddr = netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.2"), netip.MustParseAddr("192.0.2.3")

// wantSpread checks the step's Desired.Spread (nil: served locally).
func wantSpread(backends ...netip.Addr) func(Gomega, loopState, output) {
	return func(g Gomega, st loopState, out output) {
		if backends == nil {
			g.Expect(out.desired.Spread).To(BeNil())
			return
		}
		g.Expect(out.desired.Spread).To(Equal(&dataplane.Spread{Ports: []uint16{6443, 9345}, Source: selfAddr, Backends: backends}))
		if out.sync {
			g.Expect(st.spread).To(Equal(out.desired.Spread), "the synced set is remembered")
		}
	}
}

// TestStepSpread: which members the holder deals connections to, from the
// health they gossip, and when the set changes the data plane is synced.
func TestStepSpread(t *testing.T) {
	all := &dataplane.Spread{Ports: []uint16{6443, 9345}, Source: selfAddr, Backends: []netip.Addr{selfAddr, bAddr, cAddr}}
	spreading := owner()
	spreading.spread = all
	runStepCases(t, []stepCase{
		{name: "the holder deals to every eligible member, itself first (roster order)", tweak: spreadOn,
			st: owner(), in: moment(t0, self, peer("b", true, eligiblePeer), peer("c", true, eligiblePeer)), holding: true,
			check: wantSpread(selfAddr, bAddr, cAddr)},
		{name: "an unchanged set is not synced again before the resync", tweak: spreadOn,
			st: spreading, in: moment(t0, self, peer("b", true, eligiblePeer), peer("c", true, eligiblePeer)), holding: true,
			check: func(g Gomega, st loopState, out output) {
				g.Expect(out.sync).To(BeFalse())
				wantSpread(selfAddr, bAddr, cAddr)(g, st, out)
			}},
		{name: "a member turning ineligible (unhealthy, quiesced, disabled) leaves the set at once", tweak: spreadOn,
			st: spreading, in: moment(t0, self, peer("b", true, downPeer), peer("c", true, eligiblePeer)), holding: true,
			check: func(g Gomega, st loopState, out output) {
				g.Expect(out.sync).To(BeTrue(), "a changed set is synced")
				wantSpread(selfAddr, cAddr)(g, st, out)
			}},
		{name: "a dead member leaves the set", tweak: spreadOn,
			st: spreading, in: moment(t0, self, peer("b", false, eligiblePeer), peer("c", true, eligiblePeer)), holding: true,
			check: wantSpread(selfAddr, cAddr)},
		{name: "nobody else eligible: served here, no NAT", tweak: spreadOn,
			st: spreading, in: moment(t0, self, peer("b", true, downPeer), peer("c", true, downPeer)), holding: true,
			check: wantSpread()},
		{name: "a draining holder deals to the others, not to itself", tweak: spreadOn,
			st: spreading, in: with(moment(t0, self, peer("b", true, holdingPeer), peer("c", true, eligiblePeer)), func(in *inputs) { in.healthy = false }),
			holding: true, quiet: true,
			check: wantSpread(bAddr, cAddr)},
		{name: "single mode (the default) never spreads",
			st: owner(), in: moment(t0, self, peer("b", true, eligiblePeer), peer("c", true, eligiblePeer)), holding: true,
			check: wantSpread()},
		{name: "a backup never spreads", tweak: spreadOn,
			st: settled(), in: moment(t0, peer("b", true, holdingPeer), self, peer("c", true, eligiblePeer)),
			check: wantSpread()},
		{name: "the holder gossips its kernel's set and draining members by roster index", tweak: spreadOn,
			st: spreading, in: with(moment(t0, self, peer("b", true, downPeer), peer("c", true, eligiblePeer)), func(in *inputs) {
				in.spread = &dataplane.SpreadStatus{
					Backends: []dataplane.SpreadBackend{{Address: selfAddr}, {Address: cAddr}},
					Draining: []dataplane.SpreadBackend{{Address: bAddr, Connections: 4}, {Address: netip.MustParseAddr("192.0.2.9"), Connections: 1}},
				}
			}), holding: true,
			check: func(g Gomega, _ loopState, out output) {
				g.Expect(out.metaBefore.SpreadTo).To(Equal("0,2"))
				g.Expect(out.metaBefore.Draining).To(Equal("1:4"), "an address outside the roster cannot be named")
			}},
	})
}

// TestReportSpreadDrain: a quiesced member the holder forwarded connections
// to reports itself quiesced only once the holder lists it neither in its
// set nor among the draining, or its drain period ran out.
func TestReportSpreadDrain(t *testing.T) {
	quiesced := settled()
	quiesced.quiescing, quiesced.quiesceSince = true, t0.Add(-100*time.Millisecond)
	quiesced.quiesceBy = map[string]string{"admin": "POST /quiesce"}
	holder := func(m election.Meta) election.MemberView {
		m.Eligible, m.Holding = true, true
		return peer("b", true, m)
	}
	cases := []struct {
		name   string
		tweak  func(*agentv1.AgentConfiguration)
		st     loopState
		in     inputs
		want   bool
		reason string
	}{
		{"still in the holder's set", spreadOn, quiesced, moment(t0, self, holder(election.Meta{SpreadTo: "0,1,2"}), peer("c", true, eligiblePeer)), false, "quiescing: POST /quiesce; draining connections forwarded here"},
		{"left the set, connections left", spreadOn, quiesced, moment(t0, self, holder(election.Meta{SpreadTo: "1,2", Draining: "0:3"}), peer("c", true, eligiblePeer)), false, "quiescing: POST /quiesce; draining connections forwarded here"},
		{"left the set, none left", spreadOn, quiesced, moment(t0, self, holder(election.Meta{SpreadTo: "1,2"}), peer("c", true, eligiblePeer)), true, "quiesced"},
		{"the holder runs another membership version: waits for the drain period", spreadOn, quiesced,
			moment(t0, self, holder(election.Meta{SpreadTo: "1,2", Version: 7}), peer("c", true, eligiblePeer)), false, "quiescing: POST /quiesce; draining connections forwarded here"},
		{"the drain period ran out", func(c *agentv1.AgentConfiguration) { spreadOn(c); c.Quiesce.Drain.Duration = 50 * time.Millisecond },
			quiesced, moment(t0, self, holder(election.Meta{SpreadTo: "0,1,2"}), peer("c", true, eligiblePeer)), true, "quiesced"},
		{"nobody holds: nothing forwarded here", spreadOn, quiesced, moment(t0, self, peer("b", true, eligiblePeer), peer("c", true, eligiblePeer)), true, "quiesced"},
		{"single mode: out of the VIP is quiesced", nil, quiesced, moment(t0, self, holder(election.Meta{}), peer("c", true, eligiblePeer)), true, "quiesced"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			rep := stepRules(t, tc.tweak).report(tc.st, tc.in)
			g.Expect(rep.Quiesced).To(Equal(tc.want), rep.Reason)
			g.Expect(rep.Reason).To(HavePrefix(tc.reason))
		})
	}
}
