package agent

import (
	"fmt"
	"math/rand/v2"
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

func (a *Agent) requestQuiesce(source, reason string) {
	a.quiesceC <- quiesceRequest{source: source, reason: reason}
}

// applyQuiesce runs on the loop: the node quiesces while any source asks.
func (a *Agent) applyQuiesce(q quiesceRequest) {
	if q.reason == "" {
		delete(a.quiesceBy, q.source)
	} else {
		a.quiesceBy[q.source] = q.reason
	}
	if a.exiting {
		return
	}
	on := len(a.quiesceBy) > 0
	if on != a.quiescing {
		a.quiescing = on
		a.log.Info("quiesce request", "quiescing", on, "source", q.source, "reason", q.reason)
	}
}

// quiesceReason names what asks this node to stay out ("" if nothing).
func (a *Agent) quiesceReason() string {
	switch {
	case a.exiting:
		return "exiting"
	case a.quiesceBy["node"] != "":
		return a.quiesceBy["node"]
	case a.quiesceBy["admin"] != "":
		return a.quiesceBy["admin"]
	}
	return ""
}

// failOpen: election.failOpen, default true.
func (a *Agent) failOpen() bool {
	return a.cfg.Election.FailOpen == nil || *a.cfg.Election.FailOpen
}

// bootstrap: dynamic membership at version 0 with no members, the state of
// a new cluster's first machines before the manager issued version 1.
func (a *Agent) bootstrap(v election.View) bool {
	return a.cfg.Membership.Dynamic && v.Version == 0 && len(v.Members) == 0
}

// decideBootstrap: with no membership yet, the first eligible node takes the
// VIP alone, after checking that nobody answers for it (another node booted
// from the same data may hold it already). It keeps it until version 1
// arrives (then the normal rules apply; version 1's single member keeps
// holding without a gap) or the agent exits.
func (a *Agent) decideBootstrap(now time.Time, eligible, healthy bool) (bool, string) {
	switch {
	case a.holding && a.exiting:
		return false, "exiting (bootstrap membership: nobody to hand over to)"
	case a.holding:
		return true, "bootstrap membership: holding the VIP alone until the manager issues version 1"
	case !eligible:
		return false, "bootstrap membership: not eligible: " + a.ineligibleReason(healthy)
	case now.Before(a.nextProbe):
		return false, a.lastProbe + " (probing again shortly)"
	}
	if a.prober == nil {
		return true, "bootstrap membership: first eligible node, holding the VIP alone"
	}
	res, err := a.prober.probe(a.vips)
	// Jitter keeps two nodes that collided from probing in step again.
	backoff := time.Second + rand.N(time.Second)
	a.nextProbe = now.Add(backoff)
	switch {
	case err != nil:
		a.lastProbe = fmt.Sprintf("bootstrap membership: probing the VIP failed: %v", err)
		return false, a.lastProbe
	case res.answered:
		a.lastProbe = "bootstrap membership: another host answers for the VIP; waiting as a non-member"
		return false, a.lastProbe
	case res.competing:
		a.lastProbe = "bootstrap membership: another node probes for the VIP; backing off"
		return false, a.lastProbe
	}
	return true, "bootstrap membership: nobody answers for the VIP; holding it alone"
}

// pullNewer: a peer advertises a newer membership than this node runs; ask
// it for the document at once rather than wait for the push/pull interval.
func (a *Agent) pullNewer(now time.Time, v election.View, d election.Decision) {
	if !d.Stale(v) || now.Sub(a.pulledAt) < a.cfg.Election.ProbeInterval.Duration*5 {
		return
	}
	a.pulledAt = now
	var names []string
	for _, m := range append(append([]election.MemberView(nil), v.Members...), v.Others...) {
		if m.Alive && m.Meta.Version > v.Version {
			names = append(names, m.Name)
		}
	}
	go a.ml.Pull(names)
}

// digest summarises what members on one membership version must agree on:
// the mode, the VIPs and (dynamic) the running roster.
func (a *Agent) digest() string {
	if a.ml == nil || !a.cfg.Membership.Dynamic {
		return a.cfg.Digest()
	}
	return digestFor(a.cfg, a.ml.Roster())
}

// digestFor is the digest of cfg with r's members.
func digestFor(cfg *agentv1.AgentConfiguration, r election.Roster) string {
	c := *cfg
	c.Members = r.Document().Members
	return c.Digest()
}
