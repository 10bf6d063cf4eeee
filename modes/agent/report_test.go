package agent

import (
	"testing"

	"github.com/go-logr/logr"
	. "github.com/onsi/gomega"

	agentv1 "github.com/caplb/caplb/api/agent/v1alpha1"

	"github.com/caplb/caplb/modes/dataplane"
)

func bgpMode(c *agentv1.AgentConfiguration) { c.Mode = agentv1.ModeBGP }

// sessionsOf are BGP sessions in the given states, one router each.
func sessionsOf(states ...string) []dataplane.PeerStatus {
	out := make([]dataplane.PeerStatus, 0, len(states))
	for i, s := range states {
		out = append(out, dataplane.PeerStatus{Address: "192.0.2." + string(rune('1'+i)), ASN: 64500, State: s})
	}
	return out
}

// TestReportBGPSessions: a BGP agent reports how many of its routers have an Established
// session, whether or not it announces (the manager judges both); an ARP agent reports none, and
// the fields stay out of its annotation.
func TestReportBGPSessions(t *testing.T) {
	announcing := loopState{holding: true, quiesceBy: map[string]string{}}
	for _, tc := range []struct {
		name            string
		tweak           func(*agentv1.AgentConfiguration)
		st              loopState
		peers           []dataplane.PeerStatus
		established, of int
		all             bool
		inDataPlane     bool
	}{
		{name: "announcing, both routers refuse the session: not in rotation", tweak: bgpMode, st: announcing,
			peers: sessionsOf("active", "idle"), of: 2},
		{name: "announcing, one of two up", tweak: bgpMode, st: announcing,
			peers: sessionsOf(dataplane.PeerEstablished, "opensent"), established: 1, of: 2, inDataPlane: true},
		{name: "announcing, both up", tweak: bgpMode, st: announcing,
			peers: sessionsOf(dataplane.PeerEstablished, dataplane.PeerEstablished), established: 2, of: 2, all: true, inDataPlane: true},
		{name: "withdrawn, sessions still counted", tweak: bgpMode, st: loopState{quiesceBy: map[string]string{}},
			peers: sessionsOf(dataplane.PeerEstablished), established: 1, of: 1, all: true},
		{name: "no status read yet", tweak: bgpMode, st: announcing, inDataPlane: true},
		{name: "arp: no sessions to report", st: announcing, peers: sessionsOf(dataplane.PeerEstablished), inDataPlane: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			rep := stepRules(t, tc.tweak).report(tc.st, inputs{now: t0, healthy: true, runningMember: true, peers: tc.peers})
			g.Expect(rep.PeersEstablished).To(Equal(tc.established))
			g.Expect(rep.Peers).To(Equal(tc.of))
			g.Expect(rep.AllPeersEstablished()).To(Equal(tc.all))
			g.Expect(rep.InDataPlane).To(Equal(tc.inDataPlane))
			if tc.st.holding && !tc.inDataPlane {
				g.Expect(rep.Reason).To(Equal("announcing, but none of its 2 BGP sessions is established"))
			}
			if tc.of == 0 {
				g.Expect(rep.String()).NotTo(ContainSubstring("peers"), "omitted when there is nothing to say")
			}
			back, err := agentv1.ParseAgentStatus(rep.String())
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(back).To(Equal(rep), "the annotation carries the counts")
		})
	}
}

// statusDP is a data plane whose status shows BGP sessions.
type statusDP struct {
	*fakeDP
	bgp *dataplane.BGPStatus
}

func (d statusDP) Status() dataplane.Status { return dataplane.Status{BGP: d.bgp} }

// TestPublishReportsSessions: the report written on the Node takes the sessions from the data
// plane's status, which publish reads once per turn.
func TestPublishReportsSessions(t *testing.T) {
	g := NewWithT(t)
	cfg := stepRules(t, bgpMode).cfg
	m, err := newMetrics(nil)
	g.Expect(err).NotTo(HaveOccurred())
	dp := statusDP{fakeDP: &fakeDP{}, bgp: &dataplane.BGPStatus{Peers: sessionsOf(dataplane.PeerEstablished, "active")}}
	a := newAgent(cfg, logr.Discard(), agentParts{dp: dp, health: &fakeHealth{ok: true}, m: m})
	a.publish(inputs{now: t0, healthy: true}, output{})
	r := a.AgentStatus()
	g.Expect(r.PeersEstablished).To(Equal(1))
	g.Expect(r.Peers).To(Equal(2))
	g.Expect(a.Status().BGP.Peers).To(HaveLen(2), "/status shows the sessions as before")
}
