package vip

import (
	"context"
	"fmt"
	"strings"

	agentv1 "github.com/caplb/caplb/api/agent/v1alpha1"
	lbv1 "github.com/caplb/caplb/api/v1alpha1"
	"github.com/caplb/caplb/providers"
)

// When a caplb member serves the VIP well enough for kube-vip to step back (the fence, the
// old Machines' pre-drain hold). A BGP agent announces as soon as it runs, whether or not any
// router took its session: kube-vip's withdrawal then would leave the routers no path at all,
// so for bgp a member counts only once every configured router has an Established session
// with it (its report's peersEstablished == peers).

// serves reports whether v's agent reports, fresh, that it holds the VIP (arp) or announces it
// (bgp) and is not quiesced.
func (v agentView) serves() bool {
	return v.reported && v.fresh && !v.dead() && v.status.Holding && !v.status.Quiesced
}

// servesForTakeOver is serves, and for bgp every router has an Established session with it.
func (v agentView) servesForTakeOver(bgp bool) bool {
	return v.serves() && (!bgp || v.status.AllPeersEstablished())
}

// takeOverServer is holder for a kube-vip takeover: a member of m, other than except, that
// serves the VIP by servesForTakeOver; "" when none does.
func (vs views) takeOverServer(m agentv1.Membership, except string, bgp bool) string {
	for _, x := range m.Members {
		if x.Name != except && vs[x.Name].servesForTakeOver(bgp) {
			return x.Name
		}
	}
	return ""
}

// noSessionsYet is the why of a BGP takeover waiting for a member's sessions.
const noSessionsYet = "no caplb member announces the VIP with an Established BGP session to every router yet"

// takeOverWaits says why no caplb member serves the VIP for the takeover yet, "" when one does.
// arp: none is active (the controller put it in rotation, so its agent claims the VIP once
// kube-vip lets go). bgp: no active member's agent reports announcing with every session
// Established; the answer names what each reports and the routers to look at.
func (b *Backend) takeOverWaits(ctx context.Context, lb *lbv1.LoadBalancer, members []providers.Member) string {
	const noneActive = "no caplb member is active yet"
	bg := lb.Spec.Backend.BGP
	if bg == nil {
		if activeMember(members) {
			return ""
		}
		return noneActive
	}
	var nodes []string
	for _, m := range members {
		if m.State == lbv1.TargetActive && m.NodeName != "" {
			nodes = append(nodes, m.NodeName)
		}
	}
	if len(nodes) == 0 {
		return noneActive
	}
	wl, err := b.workload(ctx, lb)
	if err != nil {
		return fmt.Sprintf("the active caplb members' agent reports cannot be read: %v", err)
	}
	vs, _, err := b.readViews(ctx, wl, nodes)
	if err != nil {
		return fmt.Sprintf("the active caplb members' agent reports cannot be read: %v", err)
	}
	seen := make([]string, 0, len(nodes))
	for _, n := range nodes {
		if vs[n].servesForTakeOver(true) {
			return ""
		}
		seen = append(seen, vs[n].sessionsText(n))
	}
	routers := make([]string, 0, len(bg.Peers))
	for _, p := range bg.Peers {
		routers = append(routers, fmt.Sprintf("%s (AS %d)", p.Address, p.ASN))
	}
	return fmt.Sprintf("%s: %s; check the neighbour configuration of the routers %s for the new Machines' addresses",
		noSessionsYet, joinNames(seen), strings.Join(routers, ", "))
}

// sessionsText says what node's report shows of its BGP sessions, for a condition message.
func (v agentView) sessionsText(node string) string {
	switch {
	case !v.reported:
		return node + " has not reported"
	case v.dead():
		return node + " is down or its report is stale"
	case !v.status.Holding || v.status.Quiesced:
		return node + " does not announce the VIP"
	case v.status.Peers == 0:
		return node + " reports no BGP session"
	}
	return fmt.Sprintf("%s has %d of %d Established", node, v.status.PeersEstablished, v.status.Peers)
}
