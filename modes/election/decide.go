// Package election decides which member of a control plane holds the VIP in
// ARP mode, without any Kubernetes API: membership and failure detection come
// from hashicorp/memberlist (SWIM gossip, as in MetalLB), and every member
// applies the same pure rule (Decide) to its view, so members that see the same
// thing agree on one owner.
//
// The rule:
//   - quorum: a member that sees fewer than a majority of the configured
//     members (itself included) never claims, and releases what it holds;
//   - stickiness: an eligible member that already holds the VIP keeps it, so a
//     member that rejoins (or flaps while rejoining) never takes the VIP away
//     from a healthy owner; if several eligible members hold it (a transient
//     during hand-over or after a partition heals), the most preferred of them
//     wins and the others release;
//   - otherwise the most preferred eligible member (first in the configured
//     member list) is the owner.
//
// Eligibility (local apiserver healthy and not quiescing) and "holding" are
// gossiped in memberlist node metadata.
package election

import (
	"fmt"
	"net/netip"
)

// Meta is what each member gossips about itself.
type Meta struct {
	// Eligible: the member's local apiserver passes its health check and the
	// member is not quiescing.
	Eligible bool `json:"e,omitempty"`
	// Holding: the member has the VIP on its interface and announces it.
	Holding bool `json:"h,omitempty"`
	// Quiescing: the member is leaving (SIGTERM or POST /quiesce) and hands
	// the VIP over before it lets go.
	Quiescing bool `json:"q,omitempty"`
	// ConfigDigest summarises the member list and VIPs, so that members with
	// different configurations notice (they could disagree on the owner).
	ConfigDigest string `json:"c,omitempty"`
	// Version of the membership the member runs (dynamic membership).
	Version int64 `json:"v,omitempty"`
	// Silent names the VIP holder that has not answered this member's
	// direct pings for a while ("" when none): when a majority reports the
	// same holder silent, the others treat it as failed without waiting
	// for gossip's verdict (see the agent's fastfail.go).
	Silent string `json:"s,omitempty"`
	// SpreadTo and Draining: a holder in the ARP spread mode lists the members new connections
	// are forwarded to and those that left that set and still serve forwarded connections, by
	// their index in the membership of Version ("0,2" and "1:14" = member 1, 14 connections),
	// as its kernel has them; a member that left the set reads here when it is drained. Strings,
	// so that Meta stays comparable and small.
	SpreadTo string `json:"t,omitempty"`
	Draining string `json:"d,omitempty"`
}

// MemberView is one configured member as a member sees it.
type MemberView struct {
	Name string
	// Alive: memberlist considers the member alive or suspect (not dead, not
	// left, and known at all).
	Alive bool
	Meta  Meta
	// Address is the member's node address: from the roster for members, from
	// gossip for others (a removed member still handing over is only there).
	Address netip.Addr
	// Joining: the member the latest membership version added, not seen
	// alive yet (a machine still booting). It does not count in the
	// quorum that keeps an owner holding, so adding a member never makes
	// the owner drop the VIP; it counts in the majority a claim needs. With
	// one member added per version, every hold majority still overlaps
	// every claim majority.
	Joining bool
}

// View is a member's picture of the group, with members in preference order.
type View struct {
	Self string
	// Members is the roster this member runs, in preference order.
	Members []MemberView
	// Others are alive nodes outside the roster: joiners, removed members
	// still handing over, members of a version this node has not learned.
	Others []MemberView
	// Version and Digest of the configuration this member runs.
	Version int64
	Digest  string
	// Member: Self is in Members.
	Member bool
	// LastHolder is the other member whose gossip last said it holds the
	// VIP, also after gossip declared it dead: a claim against a holder that
	// may only be starved of CPU checks it is gone first (Answers.Gone).
	LastHolder string
}

// Decision is the outcome of Decide for one view.
type Decision struct {
	// Owner is the member that should hold the VIP, "" when none is eligible.
	Owner string
	// OwnerHolds: the owner already holds the VIP (stickiness applied).
	OwnerHolds bool
	// Quorum: the deciding member sees a majority of the configured members.
	Quorum bool
	// Seen counts the configured members seen alive, the deciding one included.
	Seen int
	// ClaimQuorum: a majority of the members agree with the deciding one
	// (same membership version and configuration digest); only then may it
	// claim.
	ClaimQuorum bool
	// Agreeing counts the members seen alive that agree, self included.
	Agreeing int
	// Conflicting lists alive members on the same version with another
	// configuration: they count for nothing until the configurations agree.
	Conflicting []string
	// Newest is the highest membership version any alive node advertises;
	// above View.Version, the deciding member is stale and never claims.
	Newest int64
	// Reason explains the decision in a few words, for logs and status.
	Reason string
}

// Stale reports whether a peer runs a newer membership than v.
func (d Decision) Stale(v View) bool { return d.Newest > v.Version }

// Majority is the smallest number of members that is more than half of n.
func Majority(n int) int { return n/2 + 1 }

// Decide applies the election rule to v. It is pure and deterministic.
//
// Agreement: a member on the same membership version with a different
// configuration digest (a misconfiguration) counts for nothing: not seen,
// never the owner. A member on another version (a change in flight) counts
// toward the quorum that keeps an owner holding, but only members that agree
// count toward the quorum a claim needs, and a member that sees a newer
// version anywhere never claims (the agent enforces ClaimQuorum and Stale).
// A holder outside the roster (a removed member handing over) is still the
// owner while it is eligible, so that nobody claims against it.
func Decide(v View) Decision {
	d := Decision{Newest: v.Version}
	alive := func(m MemberView) bool { return m.Alive || m.Name == v.Self }
	conflicting := func(m MemberView) bool {
		return m.Name != v.Self && m.Meta.Version == v.Version && m.Meta.ConfigDigest != v.Digest
	}
	agrees := func(m MemberView) bool {
		return m.Name == v.Self || (m.Meta.Version == v.Version && m.Meta.ConfigDigest == v.Digest)
	}
	for _, m := range append(append([]MemberView(nil), v.Members...), v.Others...) {
		if alive(m) && m.Meta.Version > d.Newest {
			d.Newest = m.Meta.Version
		}
	}
	for _, m := range v.Members {
		switch {
		case !alive(m):
		case conflicting(m):
			d.Conflicting = append(d.Conflicting, m.Name)
		default:
			d.Seen++
			if agrees(m) {
				d.Agreeing++
			}
		}
	}
	holdSize := len(v.Members)
	for _, m := range v.Members {
		if m.Joining && !alive(m) {
			holdSize--
			break
		}
	}
	d.Quorum = len(v.Members) > 0 && d.Seen >= Majority(holdSize)
	d.ClaimQuorum = len(v.Members) > 0 && d.Agreeing >= Majority(len(v.Members))

	for _, m := range v.Members {
		if alive(m) && !conflicting(m) && m.Meta.Holding && m.Meta.Eligible {
			d.Owner, d.OwnerHolds = m.Name, true
			d.Reason = fmt.Sprintf("%s already holds the VIP and is eligible", m.Name)
			break
		}
	}
	if d.Owner == "" {
		for _, m := range v.Others {
			if m.Alive && m.Meta.Holding && m.Meta.Eligible && m.Meta.ConfigDigest != "" {
				d.Owner, d.OwnerHolds = m.Name, true
				d.Reason = fmt.Sprintf("%s (not in membership version %d) still holds the VIP and is eligible", m.Name, v.Version)
				break
			}
		}
	}
	if d.Owner == "" {
		for _, m := range v.Members {
			if alive(m) && agrees(m) && m.Meta.Eligible {
				d.Owner = m.Name
				d.Reason = fmt.Sprintf("%s is the most preferred eligible member and nobody eligible holds the VIP", m.Name)
				break
			}
		}
	}
	if d.Owner == "" {
		d.Reason = "no member is eligible"
	}
	switch {
	case len(v.Members) == 0:
		d.Reason = fmt.Sprintf("membership version %d has no members", v.Version)
	case !d.Quorum:
		d.Reason = fmt.Sprintf("no quorum: %d of %d members seen, %d needed", d.Seen, len(v.Members), Majority(len(v.Members)))
	}
	return d
}
