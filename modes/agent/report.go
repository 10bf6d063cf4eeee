package agent

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	agentv1 "github.com/caplb/caplb/api/agent/v1alpha1"

	"github.com/caplb/caplb/modes/dataplane"
)

// report is what the agent tells the manager on its Node (AgentStatus):
// the manager counts a member active, and a quiesce done, only on this.
func (r rules) report(st loopState, in inputs) agentv1.AgentStatus {
	rep := agentv1.AgentStatus{Holding: st.holding, MembershipVersion: in.runningVersion, Member: in.runningMember}
	rep.Eligible = in.healthy && !st.quiescing
	quiet := st.quiescing && !st.holding
	busy := 0
	unrouted := false
	if r.cfg.Mode == agentv1.ModeBGP {
		rep.PeersEstablished, rep.Peers = sessions(in.peers)
		// Announcing reaches clients only through a router that has the session up: a member
		// whose every session is down (a router that refuses it, a wrong AS) is not in rotation,
		// whatever it announces. Sessions not read yet (Peers 0) do not hold it back.
		unrouted = rep.Peers > 0 && rep.PeersEstablished == 0
		rep.InDataPlane = st.holding && !unrouted
		// Withdrawn routes take the drain period to leave the peers'
		// tables and the flows on them to finish.
		quiet = quiet && (st.releasedAt.IsZero() || in.now.Sub(st.releasedAt) >= r.cfg.Quiesce.Drain.Duration)
		busy = r.bgpBusyHere(st, in)
		quiet = quiet && busy == 0
	} else {
		// ARP: a member in the data plane serves the VIP or stands by to
		// take it over.
		rep.InDataPlane = st.holding || (rep.Eligible && rep.Member)
		// Spread: the holder forwarded connections here; they drain until
		// it counts none or the drain period ends.
		if quiet && r.spreadMode() {
			drained, _ := r.spreadDrained(in.view)
			quiet = drained || in.now.Sub(st.quiesceSince) >= r.cfg.Quiesce.Drain.Duration
		}
	}
	rep.Quiesced = quiet
	switch {
	case rep.Quiesced:
		rep.Reason = "quiesced: " + st.quiesceReason()
	case st.quiescing && st.holding:
		rep.Reason = "quiescing: " + st.quiesceReason() + "; handing over"
	case st.quiescing && busy > 0:
		rep.Reason = fmt.Sprintf("quiescing: %s; %d connection(s) here still carry requests", st.quiesceReason(), busy)
	case st.quiescing && r.spreadMode():
		rep.Reason = "quiescing: " + st.quiesceReason() + "; draining connections forwarded here"
	case st.quiescing:
		rep.Reason = "quiescing: " + st.quiesceReason() + "; draining"
	case st.lastFailOpen:
		rep.Reason = "fail-open: unhealthy, but no member is eligible"
	case !rep.Member:
		rep.Reason = "not a member of the membership it runs"
	case !in.healthy:
		rep.Reason = "local API server unhealthy"
	case st.holding && unrouted:
		rep.Reason = fmt.Sprintf("announcing, but none of its %d BGP sessions is established", rep.Peers)
	case st.holding:
		rep.Reason = "holding the VIP"
	default:
		rep.Reason = "standing by"
	}
	return rep
}

// sessions counts the BGP sessions that are Established, and all of them. Counts, not the
// sessions' states or times: the report is written on every change, and a count changes only
// when a session comes up or goes down.
func sessions(peers []dataplane.PeerStatus) (established, all int) {
	for _, p := range peers {
		if p.State == dataplane.PeerEstablished {
			established++
		}
	}
	return established, len(peers)
}

// AgentStatus returns the last report, stamped now.
func (a *Agent) AgentStatus() agentv1.AgentStatus {
	a.mu.Lock()
	r := a.status.Report
	a.mu.Unlock()
	if r == nil {
		return agentv1.AgentStatus{Reason: "starting", UpdatedAt: metav1.NowMicro()}
	}
	out := *r
	out.UpdatedAt = metav1.NowMicro()
	return out
}
