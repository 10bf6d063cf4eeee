package flows

import (
	"cmp"
	"math"
	"net/netip"
	"slices"
)

// PerClient is the most flows of one client address a member shares: a client (or a NAT in
// front of many) with more connections must not push the others' out of the list (MaxFlows).
// Generous, so that a NAT's clients keep theirs in any real control plane.
const PerClient = MaxFlows / 4

// Listing is what a member shares: its flows, sorted by service then client, and how many it
// left out (PerClient, MaxFlows).
type Listing struct {
	Flows []Flow
	Cut   int
}

// aged is a flow and its creation rank: smaller is older.
type aged struct {
	flow Flow
	rank uint64
}

// rankOfInode ranks a socket by its inode, which the kernel numbers in creation order; an
// orphaned socket (inode 0: closing, its application gone) ranks last.
func rankOfInode(inode uint32) uint64 {
	if inode == 0 {
		return math.MaxUint64
	}
	return uint64(inode)
}

// selectFlows keeps the oldest flows, at most perClient per client address and max in all: an
// established connection keeps its place in the list whatever connections come after it.
func selectFlows(cands []aged, max, perClient int) Listing {
	cands = slices.Clone(cands)
	slices.SortStableFunc(cands, func(a, b aged) int {
		if c := cmp.Compare(a.rank, b.rank); c != 0 {
			return c
		}
		return compareFlows(a.flow, b.flow)
	})
	perAddr := map[netip.Addr]int{}
	kept := make([]Flow, 0, min(len(cands), max))
	cut := 0
	for _, c := range cands {
		a := c.flow.Client.Addr()
		if len(kept) == max || perAddr[a] == perClient {
			cut++
			continue
		}
		perAddr[a]++
		kept = append(kept, c.flow)
	}
	return Listing{Flows: sortFlows(kept), Cut: cut}
}
