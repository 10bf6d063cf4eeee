package agent

import (
	"fmt"
	"time"

	agentv1 "github.com/caplb/caplb/api/agent/v1alpha1"

	"github.com/caplb/caplb/modes/election"
)

// need is I/O that decide cannot do itself (it is pure): the loop does it
// and steps again with the outcome in the inputs.
type need int

const (
	needNothing need = iota
	// needConfirmation: a claim is due once a majority answers direct
	// pings (inputs.confirmation).
	needConfirmation
	// needProbe: a bootstrap claim is due once nobody answers for the VIP
	// (inputs.probe).
	needProbe
	// needBusy: a draining holder with quiesce.busyDrain counts the
	// connections that still carry requests (inputs.busy).
	needBusy
)

// decide returns whether this node should hold the VIPs and why, updating
// the timers of st it owns (claimSince, confirmFailAt, the hand-over's).
func (r rules) decide(st *loopState, in inputs, eligible bool, v election.View, d election.Decision) (bool, string, need) {
	now, self, e := in.now, r.cfg.NodeName, r.cfg.Election
	if r.cfg.Mode == agentv1.ModeBGP {
		if eligible {
			return true, "eligible (bgp: every eligible member announces)", needNothing
		}
		return false, "not eligible: " + r.ineligibleReason(*st, in), needNothing
	}
	if r.bootstrap(v) {
		return r.decideBootstrap(st, in, eligible)
	}
	settled := !st.quorumSince.IsZero() && now.Sub(st.quorumSince) >= e.Settle.Duration
	if st.holding || !(eligible && d.Quorum && d.Owner == self) {
		st.claimSince = time.Time{}
	}
	// A holder whose background pings went unanswered for contactTimeout may
	// have been starved of CPU rather than cut off (the answers then sit in
	// its socket unread): it asks a majority directly once more before it
	// lets go. A real minority gets no answer and releases a direct-ping
	// round (at most 3 x probeTimeout) later.
	lost := st.holding && d.Quorum && r.lostContact(in)
	if lost {
		c := in.confirmation
		if c == nil {
			return true, "", needConfirmation
		}
		lost = c.reached < c.needed
	}
	switch {
	case st.holding && in.linkDown:
		// Nobody can be reached to hand over to: let go at once, as
		// keepalived's track_interface does (linkwatch.go).
		return false, "VIP interface down", needNothing
	case !d.Quorum && st.holding && r.holdThroughNoQuorum(*st, in):
		return true, "gossip shows no quorum, but a majority answered direct pings just now", needNothing
	case !d.Quorum && st.holding:
		// A holder starved of CPU (a member booting beside it) reads its
		// probes' answers late, and gossip declares the others dead on its
		// side first: it asks a majority directly, handshakes included,
		// before it lets go. A real minority gets no answer and releases
		// one direct-ping round later.
		c := in.confirmation
		if c == nil {
			return true, "", needConfirmation
		}
		if c.reached >= c.needed {
			return true, "gossip shows no quorum, but a majority answered a direct-ping round just now", needNothing
		}
		return false, d.Reason, needNothing
	case !d.Quorum:
		return false, d.Reason, needNothing
	case lost:
		return false, fmt.Sprintf("no direct answer from a majority for %v, nor to a direct-ping round just now", e.ContactTimeout.Duration), needNothing
	case eligible && d.Owner == self:
		if st.holding {
			return true, d.Reason, needNothing
		}
		if !settled {
			return false, "quorum regained; settling before claiming", needNothing
		}
		if d.Stale(v) {
			return false, fmt.Sprintf("claim withheld: a peer runs membership version %d, this node %d", d.Newest, v.Version), needNothing
		}
		if !d.ClaimQuorum {
			return false, fmt.Sprintf("claim withheld: %d of %d members agree on membership version %d and the configuration (conflicting: %v)", d.Agreeing, len(v.Members), v.Version, d.Conflicting), needNothing
		}
		// Members ahead of us in preference that are alive may be eligible
		// with news that has not reached us yet (a quiesce cancelled, a
		// health check recovered): give their claim a head start, a few
		// gossip rounds each, rather than claim together and flip the
		// neighbours' caches twice. With the owner dead and nobody alive
		// ahead, there is no wait.
		if st.claimSince.IsZero() {
			st.claimSince = now
		}
		if wait := time.Duration(aliveAhead(v, self)) * claimStagger(r.cfg); now.Sub(st.claimSince) < wait {
			return false, fmt.Sprintf("claim staggered %v behind members preferred over this one", wait), needNothing
		}
		if h := r.starvedHolder(v, in.answers, now); h != "" {
			return false, fmt.Sprintf(starvedWithheld, "claim", h), needNothing
		}
		if ok, why, n := r.vipSilent(st, in, v, "claim"); !ok {
			return false, why, n
		}
		return r.confirmClaim(st, in, "claim", d.Reason)
	case eligible:
		if st.holding {
			return false, "yielding: " + d.Reason, needNothing
		}
		return false, d.Reason, needNothing
	case !st.holding && r.failOpenClaim(*st, in, v):
		if !settled {
			return false, "fail-open: quorum regained; settling before claiming", needNothing
		}
		if h := r.starvedHolder(v, in.answers, now); h != "" {
			return false, fmt.Sprintf(starvedWithheld, "fail-open claim", h), needNothing
		}
		if ok, why, n := r.vipSilent(st, in, v, "fail-open claim"); !ok {
			return false, why, n
		}
		return r.confirmClaim(st, in, "fail-open claim",
			"fail-open: nobody holds the VIP and no member is eligible; this node, the most preferred, claims it")
	case !st.holding:
		return false, "not eligible: " + r.ineligibleReason(*st, in), needNothing
	}
	return r.handOver(st, in, v)
}

// starvedWithheld is the reason of a claim withheld from a starved holder.
const starvedWithheld = "%s withheld: %s, which holds the VIP, answers no ping but its kernel still completes handshakes (starved of CPU, not gone)"

// confirmClaim is the last step of every claim: a majority must answer
// direct pings now (not only gossip), at most one round per probe interval.
// what names the claim in the reasons; reason is the claim's own.
func (r rules) confirmClaim(st *loopState, in inputs, what, reason string) (bool, string, need) {
	if in.now.Sub(st.confirmFailAt) < r.cfg.Election.ProbeInterval.Duration {
		return false, what + " withheld: a majority did not answer direct pings", needNothing
	}
	c := in.confirmation
	if c == nil {
		return false, "", needConfirmation
	}
	if c.reached < c.needed {
		st.confirmFailAt = in.now
		return false, fmt.Sprintf("%s withheld: %d of %d needed members answered direct pings", what, c.reached, c.needed), needNothing
	}
	return true, reason, needNothing
}

// failOpenClaim: nobody alive holds the VIP and no member is eligible (every
// API server failing at once: etcd without quorum, or coming back one by
// one), and this node, unhealthy but neither quiescing nor exiting, is the
// most preferred alive member that is not quiescing. Fail-open keeps the
// VIP on a holder; this claims it when the holder was lost (it died, or a
// starved one let go), so that recovery tools still reach an API server
// and clients find one the moment it turns ready.
func (r rules) failOpenClaim(st loopState, in inputs, v election.View) bool {
	if !r.failOpen() || in.healthy || st.quiescing || st.exiting || !in.linkUp || !v.Member {
		return false
	}
	for _, m := range append(append([]election.MemberView{}, v.Members...), v.Others...) {
		if m.Name != r.cfg.NodeName && m.Alive && (m.Meta.Holding || m.Meta.Eligible) {
			return false
		}
	}
	for _, m := range v.Members {
		if m.Name == r.cfg.NodeName {
			return true
		}
		if m.Alive && !m.Meta.Quiescing {
			return false // a member preferred over this one claims
		}
	}
	return false
}

// handOver decides for a holder that is not eligible: make-before-break.
// It keeps the VIPs until another member announces them (plus the drain
// period), so that clients never find nobody at the VIP.
func (r rules) handOver(st *loopState, in inputs, v election.View) (bool, string, need) {
	now, self := in.now, r.cfg.NodeName
	successor, candidate := "", false
	for _, m := range v.Members {
		if m.Name == self || !m.Alive {
			continue
		}
		if m.Meta.Holding && m.Meta.Eligible && successor == "" {
			successor = m.Name
		}
		candidate = candidate || m.Meta.Eligible
	}
	if successor != "" {
		st.handingOver = true
		if st.successor != successor {
			st.successor, st.successorAt = successor, now
		}
		return r.drain(st, in, successor)
	}
	st.successor, st.successorAt = "", time.Time{}
	waited := now.Sub(st.handoverStart)
	st.lastFailOpen = false
	switch {
	case !in.healthy && !candidate && !st.exiting && !st.quiescing && v.Member && r.failOpen():
		// Fail-open: every member's API server failing at once is etcd
		// losing quorum, not this node; the VIP stays where it is so that
		// recovery tools reach an endpoint. Only with quorum (checked
		// before): a minority never holds. Only one holder fails open: a
		// real API server's /readyz fails on each node a little apart, so a
		// member can claim from a failing owner and fail itself during the
		// owner's drain, leaving two holders with nobody to hand over to;
		// the less preferred one lets go.
		if other := holderAhead(v, self); other != "" {
			return false, fmt.Sprintf("fail-open: %s, preferred over this node, keeps the VIP", other), needNothing
		}
		st.lastFailOpen = true
		return true, "fail-open: local API server unhealthy but no member is eligible; keeping the VIP", needNothing
	case !in.healthy && !candidate:
		return false, "local API server unhealthy and no eligible member to hand over to", needNothing
	case st.exiting && !candidate:
		return false, "exiting and no eligible member to hand over to", needNothing
	case st.exiting && waited >= r.cfg.Quiesce.HandoverTimeout.Duration:
		return false, fmt.Sprintf("no successor announced within %v (%s)", r.cfg.Quiesce.HandoverTimeout.Duration, r.ineligibleReason(*st, in)), needNothing
	case !in.healthy && waited >= r.cfg.Quiesce.HandoverTimeout.Duration && r.failOpen():
		// An eligible member that does not claim (its view withholds the
		// claim, or its health flaps while the API servers come back one by
		// one) is no reason to leave the VIP with nobody: an unhealthy API
		// server may still serve (a SIGTERMed one does for its
		// shutdown-delay-duration). Keep it, answering again (handOverStalled).
		return true, fmt.Sprintf("no successor announced within %v: keeping the VIP, answering for it, until one does", r.cfg.Quiesce.HandoverTimeout.Duration), needNothing
	case !in.healthy && waited >= r.cfg.Quiesce.HandoverTimeout.Duration:
		return false, fmt.Sprintf("no successor announced within %v (%s)", r.cfg.Quiesce.HandoverTimeout.Duration, r.ineligibleReason(*st, in)), needNothing
	case !candidate:
		return true, "quiesce pending: no eligible member to hand over to", needNothing
	}
	return true, "handing over: waiting for a successor to announce", needNothing
}

// drain decides for a holder whose successor announces the VIPs. The drain
// applies to every hand-over (quiesce, exit, unhealthy): we are quiet
// already, so it serves stragglers whose caches have not moved yet, and the
// successor sends our established flows back to us. After it, with
// quiesce.busyDrain, connections still carrying requests keep us holding
// until they are gone or busyDrain ran out: the API server's GOAWAY moves
// them without failing a request, where our reset at the release would fail
// the writes in flight. The count is read on every step of the drain, so
// that the data plane has a second of history when the drain ends.
func (r rules) drain(st *loopState, in inputs, successor string) (bool, string, need) {
	drained := in.now.Sub(st.successorAt)
	busyDrain := r.cfg.Quiesce.BusyDrain.Duration
	if busyDrain > 0 && drained < r.cfg.Quiesce.Drain.Duration+busyDrain {
		if in.busy == nil {
			return false, "", needBusy
		}
		if drained >= r.cfg.Quiesce.Drain.Duration && *in.busy > 0 {
			return true, fmt.Sprintf("draining: %s announces the VIPs; %d connection(s) here still carry requests (until they move, at most %v more)",
				successor, *in.busy, r.cfg.Quiesce.Drain.Duration+busyDrain-drained), needNothing
		}
	}
	if drained >= r.cfg.Quiesce.Drain.Duration {
		return false, fmt.Sprintf("handed over to %s (%s)", successor, r.ineligibleReason(*st, in)), needNothing
	}
	return true, fmt.Sprintf("draining: %s announces the VIPs", successor), needNothing
}

// decideBootstrap: with no membership yet, the first eligible node takes the
// VIP alone, after checking that nobody answers for it (another node booted
// from the same data may hold it already). It keeps it until version 1
// arrives (then the normal rules apply; version 1's single member keeps
// holding without a gap) or the agent exits.
func (r rules) decideBootstrap(st *loopState, in inputs, eligible bool) (bool, string, need) {
	now := in.now
	switch {
	case st.holding && st.exiting:
		return false, "exiting (bootstrap membership: nobody to hand over to)", needNothing
	case st.holding:
		return true, "bootstrap membership: holding the VIP alone until the manager issues version 1", needNothing
	case !eligible:
		return false, "bootstrap membership: not eligible: " + r.ineligibleReason(*st, in), needNothing
	case now.Before(st.nextProbe):
		return false, st.lastProbe + " (probing again shortly)", needNothing
	case !r.probeBootstrap:
		return true, "bootstrap membership: first eligible node, holding the VIP alone", needNothing
	case in.probe == nil:
		return false, "", needProbe
	}
	st.nextProbe = now.Add(time.Second + in.probeJitter)
	switch p := in.probe; {
	case p.err != nil:
		st.lastProbe = fmt.Sprintf("bootstrap membership: probing the VIP failed: %v", p.err)
		return false, st.lastProbe, needNothing
	case p.res.answered:
		st.lastProbe = "bootstrap membership: another host answers for the VIP; waiting as a non-member"
		return false, st.lastProbe, needNothing
	case p.res.competing:
		st.lastProbe = "bootstrap membership: another node probes for the VIP; backing off"
		return false, st.lastProbe, needNothing
	}
	return true, "bootstrap membership: nobody answers for the VIP; holding it alone", needNothing
}

// vipSilent: with arp.claimWhenSilent, a claim made while no member holds or last held the VIP
// waits until no other host answers ARP for it (another speaker, kube-vip during a takeover,
// still has it). Once a member held it, hand-overs are the membership's own: a quiet old holder
// still answers ARP while it drains, and waiting for its silence would stop the VIP for the drain.
func (r rules) vipSilent(st *loopState, in inputs, v election.View, what string) (bool, string, need) {
	if !r.cfg.ARP.ClaimWhenSilent || r.cfg.Mode != agentv1.ModeARP || v.LastHolder != "" || heldByMember(v, r.cfg.NodeName) {
		return true, "", needNothing
	}
	now := in.now
	switch {
	case !r.canProbe:
		return false, what + " withheld: arp.claimWhenSilent is set but no ARP prober runs here", needNothing
	case now.Before(st.nextProbe):
		return false, st.lastProbe + " (probing again shortly)", needNothing
	case in.probe == nil:
		return false, "", needProbe
	}
	st.nextProbe = now.Add(silentProbeBackoff)
	switch p := in.probe; {
	case p.err != nil:
		st.lastProbe = fmt.Sprintf("%s withheld: probing the VIP failed: %v", what, p.err)
		return false, st.lastProbe, needNothing
	case p.res.answered:
		st.lastProbe = what + " withheld: another host answers ARP for the VIP (arp.claimWhenSilent: a takeover waits until it lets go)"
		return false, st.lastProbe, needNothing
	case p.res.competing:
		st.lastProbe = what + " withheld: another host probes for the VIP"
		return false, st.lastProbe, needNothing
	}
	st.lastProbe = ""
	return true, "", needNothing
}

// silentProbeBackoff separates a takeover's probes: short, since the VIP has no holder from the
// moment the other speaker lets go until this member claims (a probe takes 400 ms).
const silentProbeBackoff = 100 * time.Millisecond

// heldByMember: gossip says a member other than self holds the VIP.
func heldByMember(v election.View, self string) bool {
	for _, m := range append(append([]election.MemberView{}, v.Members...), v.Others...) {
		if m.Name != self && m.Alive && m.Meta.Holding {
			return true
		}
	}
	return false
}

// failOpen: election.failOpen, default true.
func (r rules) failOpen() bool {
	return r.cfg.Election.FailOpen == nil || *r.cfg.Election.FailOpen
}

// bootstrap: dynamic membership at version 0 with no members, the state of
// a new cluster's first machines before the manager issued version 1.
func (r rules) bootstrap(v election.View) bool {
	return r.cfg.Membership.Dynamic && v.Version == 0 && len(v.Members) == 0
}
