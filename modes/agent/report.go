package agent

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	agentv1 "github.com/caplb/caplb/api/agent/v1alpha1"
	"github.com/caplb/caplb/modes/election"
)

// report is what the agent tells the manager on its Node (AgentStatus):
// the manager counts a member active, and a quiesce done, only on this.
func (a *Agent) report(now time.Time, healthy bool, v election.View) agentv1.AgentStatus {
	r := agentv1.AgentStatus{Holding: a.holding}
	switch {
	case a.ml != nil:
		r.MembershipVersion, r.Member = v.Version, v.Member
	case a.store != nil:
		cur := a.store.current()
		r.MembershipVersion = cur.Version
		r.Member = !a.cfg.Membership.Dynamic || cur.Has(a.cfg.NodeName)
	default:
		r.MembershipVersion, r.Member = a.cfg.Membership.Version, true
	}
	r.Eligible = healthy && !a.quiescing
	quiet := a.quiescing && !a.holding
	if a.cfg.Mode == agentv1.ModeBGP {
		r.InDataPlane = a.holding
		// Withdrawn routes take the drain period to leave the peers'
		// tables and the flows on them to finish.
		quiet = quiet && (a.releasedAt.IsZero() || now.Sub(a.releasedAt) >= a.cfg.Quiesce.Drain.Duration)
	} else {
		// ARP: a member in the data plane serves the VIP or stands by to
		// take it over.
		r.InDataPlane = a.holding || (r.Eligible && r.Member)
	}
	r.Quiesced = quiet
	switch {
	case r.Quiesced:
		r.Reason = "quiesced: " + a.quiesceReason()
	case a.quiescing && a.holding:
		r.Reason = "quiescing: " + a.quiesceReason() + "; handing over"
	case a.quiescing:
		r.Reason = "quiescing: " + a.quiesceReason() + "; draining"
	case a.lastFailOpen:
		r.Reason = "fail-open: unhealthy, but no member is eligible"
	case !r.Member:
		r.Reason = "not a member of the membership it runs"
	case !healthy:
		r.Reason = "local API server unhealthy"
	case a.holding:
		r.Reason = "holding the VIP"
	default:
		r.Reason = "standing by"
	}
	return r
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
