package agent

import (
	"time"

	agentv1 "github.com/caplb/caplb/api/agent/v1alpha1"

	"github.com/caplb/caplb/modes/election"
)

// quiesceRequest comes from one source: "admin" (the control socket),
// "node" (the Node's quiesce or disabled annotation, or the
// exclude-from-external-load-balancers label). reason "" withdraws it.
type quiesceRequest struct {
	source, reason string
}

// requestQuiesce hands a request to the loop, which applies it in its next
// step.
func (a *Agent) requestQuiesce(source, reason string) {
	a.quiesceC <- quiesceRequest{source: source, reason: reason}
}

// quiesceReason names what asks this node to stay out ("" if nothing).
func (st loopState) quiesceReason() string {
	switch {
	case st.exiting:
		return "exiting"
	case st.quiesceBy["node"] != "":
		return st.quiesceBy["node"]
	case st.quiesceBy["admin"] != "":
		return st.quiesceBy["admin"]
	}
	return ""
}

// pullNewer: a peer advertises a newer membership than this node runs; ask
// it for the document at once rather than wait for the push/pull interval
// (at most every five probe intervals).
func (r rules) pullNewer(st loopState, now time.Time, v election.View, d election.Decision) (loopState, []string) {
	if !d.Stale(v) || now.Sub(st.pulledAt) < r.cfg.Election.ProbeInterval.Duration*5 {
		return st, nil
	}
	st.pulledAt = now
	var names []string
	for _, m := range append(append([]election.MemberView(nil), v.Members...), v.Others...) {
		if m.Alive && m.Meta.Version > v.Version {
			names = append(names, m.Name)
		}
	}
	return st, names
}

// digestFor is the digest of cfg with r's members: what members on one
// membership version must agree on (the mode, the VIPs and the roster).
func digestFor(cfg *agentv1.AgentConfiguration, r election.Roster) string {
	c := *cfg
	c.Members = r.Document().Members
	return c.Digest()
}
