// Package flows shares TCP flow ownership between the members that announce a VIP over BGP.
//
// Every member announces the VIP and the router spreads flows over them by ECMP. When a member
// joins or withdraws, the router rehashes and established flows land on a member that has no
// socket for them: its kernel answers with a RST and the client's request fails. So each member
// lists the flows it terminates (List) and gossips them (Encode, Decode); a member that receives
// a segment of another member's flow sends it on unchanged to that owner (Forwarder: nftables
// dup to the owner's address as next hop, the packet keeping the VIP as its destination) instead
// of resetting it. The owner must be on-link: members on one L2 segment, as BGP members peering
// with one top-of-rack router usually are. New connections (SYN) are never forwarded.
package flows

import (
	"net/netip"
	"slices"
)

// Flow is one TCP connection to a VIP, as the member that terminates it sees it.
type Flow struct {
	Client  netip.AddrPort // the remote end
	Service netip.AddrPort // the VIP and its port
}

// Table is the name of the Forwarder's nftables tables, one per family (table ip caplb_flows,
// table ip6 caplb_flows): dup exists in the ip and ip6 families, not in inet.
const Table = "caplb_flows"

// MaxFlows is the most flows one encoded list carries: a bound on what a peer can make a member
// allocate, far above the connections one API server holds.
const MaxFlows = 1 << 16

// compareFlows orders flows by service, then client: List's order, and the grouping Encode uses.
func compareFlows(a, b Flow) int {
	if c := a.Service.Compare(b.Service); c != 0 {
		return c
	}
	return a.Client.Compare(b.Client)
}

// sortFlows sorts flows in place and drops duplicates.
func sortFlows(flows []Flow) []Flow {
	slices.SortFunc(flows, compareFlows)
	return slices.Compact(flows)
}

// normalize returns f with IPv4-mapped IPv6 addresses as IPv4 and zones dropped (a dual-stack
// socket reports an IPv4 peer as ::ffff:a.b.c.d, but on the wire, and in the nftables maps,
// the flow is IPv4), and whether it is a well-formed flow: both ends valid and of one family.
func normalize(f Flow) (Flow, bool) {
	n := Flow{
		Client:  netip.AddrPortFrom(f.Client.Addr().Unmap().WithZone(""), f.Client.Port()),
		Service: netip.AddrPortFrom(f.Service.Addr().Unmap().WithZone(""), f.Service.Port()),
	}
	ok := n.Client.Addr().IsValid() && n.Service.Addr().IsValid() && n.Client.Addr().Is4() == n.Service.Addr().Is4()
	return n, ok
}
