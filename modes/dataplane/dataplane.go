// Package dataplane is the seam between the agent loop (modes/agent), which decides, and the
// node-side data planes (modes/arp, modes/bgp), which announce. Like MetalLB's speaker, a data
// plane is told the whole desired state each time and converges to it.
package dataplane

import (
	"context"
	"net/netip"
	"slices"
	"time"

	"github.com/caplb/caplb/modes/flows"
)

// Desired is what the agent wants this node to announce.
type Desired struct {
	// Announce is true when this node should attract traffic for VIPs: in ARP mode only the
	// elected owner (it holds the addresses and answers ARP/NDP); in BGP mode every eligible
	// member (it advertises /32 and /128 routes).
	Announce bool
	// VIPs are the virtual addresses of the load balancer, IPv4 and/or IPv6.
	VIPs []netip.Addr
	// Quiet keeps the VIPs held (connections still arriving are served) but neither announces
	// nor defends them: the drain of a make-before-break hand-over, while the successor's
	// announcements move the neighbours. It is entered before the VIPs change and left after,
	// so that a release never announces the VIPs it removes. Data planes in which every member
	// announces (BGP) ignore it.
	Quiet bool
	// HandOver, on the Sync that claims the VIPs from a member still holding them, asks the
	// data plane to send that member's TCP flows back to it for a while (ARP: nftables), so
	// that a graceful hand-over breaks no connection. It is ignored while the VIPs are held
	// already, and by data planes that cannot redirect (BGP).
	HandOver *HandOver
	// Spread, while the VIPs are held, forwards new connections to them across members (the
	// ARP backend's spread mode); nil serves every connection on this node. Data planes in which
	// the routers spread (BGP) ignore it.
	Spread *Spread
}

// Spread is the set a VIP holder forwards new TCP connections to: every eligible member, this
// node included. Connections already established keep their member (conntrack); a member that
// leaves the set gets no new ones and drains.
type Spread struct {
	// Ports are the TCP ports spread (the API port and the extra ports).
	Ports []uint16
	// Source is this node's own address: forwarded connections leave from it, so that the
	// members' replies come back through this node.
	Source netip.Addr
	// Backends are the members' node addresses, in the roster's order, this node's own
	// (Source) among them when it is eligible. Only addresses of Source's family are
	// spread to; VIPs of the other family are served here.
	Backends []netip.Addr
}

// Equal reports whether s and o ask for the same forwarding.
func (s *Spread) Equal(o *Spread) bool {
	if s == nil || o == nil {
		return s == o
	}
	return s.Source == o.Source && slices.Equal(s.Ports, o.Ports) && slices.Equal(s.Backends, o.Backends)
}

// HandOver names the previous holder of the VIPs and how long its flows go back to it.
type HandOver struct {
	// From is the previous holder's node address.
	From netip.Addr
	// Window is how long flows this node did not see start are sent to From.
	Window time.Duration
}

// Dataplane converges the node to a Desired state.
type Dataplane interface {
	// Sync makes the node's announcements match desired. The agent calls it on every change of
	// the desired state and periodically; it must be idempotent and cheap when nothing changed.
	// An error is logged and retried by the agent on its next tick; a Sync that claims the VIPs
	// and fails must leave them unannounced.
	Sync(ctx context.Context, desired Desired) error

	// Status reports what the node's kernel and wire show now (addresses held, sessions), for
	// the agent's /status. It is called after every Sync and must not block on the network.
	Status() Status

	// BusyConnections counts the TCP connections to the VIPs held on this node whose clients
	// still send requests: at least 512 bytes in the last 2 seconds, which a watch's flow-control
	// updates do not reach. The agent asks on every step of a drain with quiesce.busyDrain (25
	// ms apart); the data plane samples the kernel at most every 100 ms and answers from the
	// last sample in between. Data planes whose VIPs are not held by one node (BGP) return 0.
	BusyConnections() int

	// Close withdraws every announcement and removes every address the data plane added. The
	// agent calls it on every exit path (signal, error, panic recovery); it must be idempotent
	// and must not depend on ctx being live for local cleanup.
	Close(ctx context.Context) error
}

// FlowSharer is implemented by data planes in which the routers choose a member per flow (BGP
// ECMP): when a member joins or leaves, the routers rehash and send some established flows to a
// member that has no socket for them. Members exchange the flows they terminate (the agent's
// flowshare.go) and send on the packets of another member's flow to it instead of resetting it.
type FlowSharer interface {
	// LocalFlows lists the TCP connections to the VIPs this node terminates (announced or
	// still held after a withdrawal). Called every flow-sharing interval (200 ms); it reads
	// the kernel's socket table.
	LocalFlows() ([]flows.Flow, error)
	// SetForeignFlows makes the node send on the packets of owners' flows to the owner's node
	// address, and copy those of a flow no list names yet to every peer (the owner takes it, a
	// list interval before its next list would name it): the whole set each time (flows and
	// peers that died or left are absent). Called whenever a member's list or the membership
	// changes.
	SetForeignFlows(owners map[flows.Flow]netip.Addr, peers []netip.Addr) error
}
