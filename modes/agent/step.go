package agent

import (
	"fmt"
	"maps"
	"net/netip"
	"time"

	agentv1 "github.com/caplb/caplb/api/agent/v1alpha1"

	"github.com/caplb/caplb/modes/dataplane"
	"github.com/caplb/caplb/modes/election"
)

// step is the agent's whole decision: from the state and the inputs of one
// moment, the next state and what the data plane, the gossip and the log
// must do. It is pure: the loop (loop.go) gathers the inputs before it and
// applies the output after it.
func (r rules) step(st loopState, in inputs) (loopState, output) {
	var out output
	now, self := in.now, r.cfg.NodeName
	st.quiesceBy = maps.Clone(st.quiesceBy)
	if st.quiesceBy == nil {
		st.quiesceBy = map[string]string{}
	}
	if in.exit && !st.exiting {
		st.exiting, st.quiescing, st.handoverStart = true, true, now
		out.note("exit requested: handing over before releasing", "holding", st.holding)
	}
	for _, q := range in.quiesce {
		st = st.request(q, &out)
	}
	switch {
	case !st.quiescing:
		st.quiesceSince = time.Time{}
	case st.quiesceSince.IsZero():
		st.quiesceSince = now
	}

	// Once a successor announces the VIPs, the hand-over runs to its end
	// even if the API server recovers meanwhile: reclaiming as the more
	// preferred holder would move the VIP back and forth. A node outside
	// the membership it runs is never eligible (the bootstrap membership,
	// version 0 with no members, excepted).
	eligible := in.healthy && !st.quiescing && !st.handingOver && in.linkUp
	view := in.view
	// gossip is the view before a silent holder is treated as failed: the
	// hand-over redirect still sends that holder its own flows (below).
	gossip := view
	var d election.Decision
	if in.election {
		eligible = eligible && (view.Member || r.bootstrap(view))
		st.silent = r.silentHolder(view, in.answers, now)
		out.metaBefore = st.meta(eligible, in.digest)
		if st.holding && r.spreadMode() {
			out.metaBefore.SpreadTo, out.metaBefore.Draining = spreadMeta(view, in.spread, r.memberAddress)
		}
		view = withSelfMeta(view, out.metaBefore)
		gossip = view
		view, st.silentLogged = r.dropSilentHolders(view, st.silent, st.silentLogged, &out)
		d = election.Decide(view)
		st, out.pull = r.pullNewer(st, now, view, d)
	}
	// Out of touch with a majority (a bad link, or this process stalled):
	// the view is stale, so a claim waits a full settle once contact is
	// back, as after a loss of quorum. Otherwise a node that stalled while
	// holding would release and then reclaim from a view that still shows
	// its successor dead, moving the VIP back.
	if in.election && r.lostContact(in) {
		st.quorumSince = time.Time{}
	}
	if d.Quorum && st.quorumSince.IsZero() {
		st.quorumSince, st.quorumLostAt = now, time.Time{}
	} else if !d.Quorum && st.quorumLostAt.IsZero() {
		st.quorumSince, st.quorumLostAt = time.Time{}, now
	}
	if !eligible && st.holding && st.handoverStart.IsZero() {
		st.handoverStart = now
	}
	if eligible || !st.holding {
		st.handoverStart, st.successorAt, st.successor = time.Time{}, time.Time{}, ""
	}

	want, reason, need := r.decide(&st, in, eligible, view, d)
	switch need {
	case needConfirmation:
		out.needConfirmation = true
		return st, out
	case needProbe:
		out.needProbe = true
		return st, out
	case needBusy:
		out.needBusy = true
		return st, out
	}
	if in.busy == nil && r.bgpBusyWindow(st, in) {
		// Read on every step from the withdrawal on, so that the data plane has a history
		// when the drain ends (bgpdrain.go).
		out.needBusy = true
		return st, out
	}
	// Holding while not eligible is the hand-over: stay quiet so that the
	// successor's announcements win the neighbours' caches. With nobody
	// eligible to hand over to (fail-open, a quiesce pending) the holder is
	// the only way to the VIP: it keeps answering and announcing, or a
	// neighbour whose cache expires, or that a brief claimant moved, finds
	// nobody.
	quiet := want && !eligible && eligibleOther(view, self) && !r.handOverStalled(st, in)
	st.waitingReason = ""
	if want == st.holding && reason != d.Reason {
		st.waitingReason = reason
	}
	out.desired = dataplane.Desired{Announce: want, VIPs: r.vips, Quiet: quiet}
	// A claim redirects the flows it did not start to the previous owner,
	// also one treated as failed for its silence: a holder that was only
	// starved of CPU still has its connections, and a RST from us would fail
	// every request in flight on them. The redirect ends with its window, or
	// as soon as gossip says that owner let go or died (then our RST is the
	// fastest news for its clients).
	redirectEnded := false
	if want {
		from := r.handOverFrom(gossip)
		switch {
		case !st.holding:
			out.desired.HandOver, st.redirectFrom = from, netip.Addr{}
			if from != nil {
				st.redirectFrom = from.From
			}
		case !st.redirectFrom.IsValid():
		case from == nil && r.redirectToStarved(st.redirectFrom, gossip, in):
			// Gossip declared the previous owner dead, but its kernel still
			// completes handshakes: starved of CPU while it drains, it still
			// has its connections, and our RST would fail their requests.
			out.desired.HandOver = r.redirectTo(st.redirectFrom)
		case from == nil || from.From != st.redirectFrom:
			st.redirectFrom, redirectEnded = netip.Addr{}, true
		default:
			out.desired.HandOver = from
		}
	} else {
		st.redirectFrom = netip.Addr{}
	}
	if want {
		out.desired.Spread = r.spreadSet(view, eligible)
	}
	out.sync = want != st.holding || quiet != st.quiet || !out.desired.Spread.Equal(st.spread) || redirectEnded ||
		now.Sub(st.lastSync) >= resync
	// A failed Sync that was to claim leaves the VIPs unannounced: nobody
	// is told we hold. A failed release still counts as released.
	out.unsynced = st.become(want && st.holding, reason, now)
	if out.sync {
		st.lastSync, st.quiet, st.spread = now, quiet, out.desired.Spread
	}
	st = st.become(want, reason, now)
	out.eligible, out.view, out.decision = eligible, view, d
	return st, out
}

// request applies one quiesce request: the node quiesces while any source
// asks (an exiting node stays quiescing).
func (st loopState) request(q quiesceRequest, out *output) loopState {
	if q.reason == "" {
		delete(st.quiesceBy, q.source)
	} else {
		st.quiesceBy[q.source] = q.reason
	}
	if st.exiting {
		return st
	}
	if on := len(st.quiesceBy) > 0; on != st.quiescing {
		st.quiescing = on
		out.note("quiesce request", "quiescing", on, "source", q.source, "reason", q.reason)
	}
	return st
}

// withSelfMeta returns v with this node's entry carrying m, as the
// membership shows it once m is set (election.Membership.SetMeta keeps the
// version, and the digest it computes itself).
func withSelfMeta(v election.View, m election.Meta) election.View {
	members := append([]election.MemberView(nil), v.Members...)
	for i := range members {
		if members[i].Name != v.Self {
			continue
		}
		old := members[i].Meta
		m.Version = old.Version
		if old.ConfigDigest != "" {
			m.ConfigDigest = old.ConfigDigest
		}
		members[i].Meta = m
	}
	v.Members = members
	return v
}

// handOverFrom: when this node claims the VIPs from a member that still
// holds them (a graceful hand-over: it drains after we announce), the data
// plane forwards that member's flows to it for the drain window. The holder
// may be outside the roster: a member the latest version removed drains the
// same way, and a handshake whose SYN reached it before the neighbours'
// caches flipped would otherwise get a RST from us. nil in BGP mode, or
// when nobody holds.
func (r rules) handOverFrom(v election.View) *dataplane.HandOver {
	if r.cfg.Mode == agentv1.ModeBGP {
		return nil
	}
	for _, m := range append(append([]election.MemberView{}, v.Members...), v.Others...) {
		if m.Name == r.cfg.NodeName || !m.Alive || !m.Meta.Holding {
			continue
		}
		if addr := r.memberAddress(m); addr.IsValid() {
			return r.redirectTo(addr)
		}
		return nil
	}
	return nil
}

// redirectTo is the hand-over redirect to the previous owner at from.
func (r rules) redirectTo(from netip.Addr) *dataplane.HandOver {
	return &dataplane.HandOver{From: from, Window: r.cfg.Quiesce.Drain.Duration + r.cfg.Quiesce.BusyDrain.Duration + handoverRedirectMargin}
}

// redirectToStarved: the redirect's previous owner at from is the member that
// last held the VIPs and is starved, not gone (starvedHolder).
func (r rules) redirectToStarved(from netip.Addr, v election.View, in inputs) bool {
	h := r.starvedHolder(v, in.answers, in.now)
	if h == "" {
		return false
	}
	for _, m := range append(append([]election.MemberView{}, v.Members...), v.Others...) {
		if m.Name == h {
			return r.memberAddress(m) == from
		}
	}
	return false
}

// handOverStalled: an unhealthy holder has waited quiesce.handoverTimeout
// for a successor that did not announce; it keeps the VIP (handOver) and
// must answer for it again, or a neighbour whose cache expires finds nobody.
func (r rules) handOverStalled(st loopState, in inputs) bool {
	return !in.healthy && !st.exiting && st.successor == "" && !st.handoverStart.IsZero() &&
		in.now.Sub(st.handoverStart) >= r.cfg.Quiesce.HandoverTimeout.Duration
}

// memberAddress is m's node address: the configured one when m is in the
// static member list, else what the membership knows.
func (r rules) memberAddress(m election.MemberView) netip.Addr {
	for _, mc := range r.cfg.Members {
		if mc.Name == m.Name {
			if addr, err := netip.ParseAddr(mc.Address); err == nil {
				return addr
			}
		}
	}
	return m.Address
}

// ineligibleReason names why this node is not eligible in st ("eligible"
// when it is).
func (r rules) ineligibleReason(st loopState, in inputs) string {
	switch {
	case st.exiting:
		return "exiting"
	case st.quiescing:
		return "quiescing"
	case !in.healthy:
		return "local API server unhealthy"
	case st.handingOver:
		return "hand-over in progress"
	case !in.linkUp:
		return "VIP interface down or back up less than " + linkHoldDown.String() + " ago"
	case in.election && !in.roster.Has(r.cfg.NodeName):
		return fmt.Sprintf("not a member of membership version %d", in.roster.Version)
	}
	return "eligible"
}
