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
	// Silent names the VIP holder that has not answered this member's
	// direct pings for a while ("" when none): when a majority reports the
	// same holder silent, the others treat it as failed without waiting
	// for gossip's verdict (see the agent's fastfail.go).
	Silent string `json:"s,omitempty"`
}

// MemberView is one configured member as a member sees it.
type MemberView struct {
	Name string
	// Alive: memberlist considers the member alive or suspect (not dead, not
	// left, and known at all).
	Alive bool
	Meta  Meta
}

// View is a member's picture of the group, with members in preference order.
type View struct {
	Self    string
	Members []MemberView
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
	// Reason explains the decision in a few words, for logs and status.
	Reason string
}

// Majority is the smallest number of members that is more than half of n.
func Majority(n int) int { return n/2 + 1 }

// Decide applies the election rule to v. It is pure and deterministic.
func Decide(v View) Decision {
	var d Decision
	for _, m := range v.Members {
		if m.Alive || m.Name == v.Self {
			d.Seen++
		}
	}
	d.Quorum = d.Seen >= Majority(len(v.Members))
	alive := func(m MemberView) bool { return m.Alive || m.Name == v.Self }

	for _, m := range v.Members {
		if alive(m) && m.Meta.Holding && m.Meta.Eligible {
			d.Owner, d.OwnerHolds = m.Name, true
			d.Reason = fmt.Sprintf("%s already holds the VIP and is eligible", m.Name)
			break
		}
	}
	if d.Owner == "" {
		for _, m := range v.Members {
			if alive(m) && m.Meta.Eligible {
				d.Owner = m.Name
				d.Reason = fmt.Sprintf("%s is the most preferred eligible member and nobody eligible holds the VIP", m.Name)
				break
			}
		}
	}
	if d.Owner == "" {
		d.Reason = "no member is eligible"
	}
	if !d.Quorum {
		d.Reason = fmt.Sprintf("no quorum: %d of %d members seen, %d needed", d.Seen, len(v.Members), Majority(len(v.Members)))
	}
	return d
}
