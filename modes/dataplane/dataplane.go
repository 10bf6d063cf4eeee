// Package dataplane is the seam between the agent loop (modes/agent), which decides, and the
// node-side data planes (modes/arp, modes/bgp), which announce. Like MetalLB's speaker, a data
// plane is told the whole desired state each time and converges to it.
package dataplane

import (
	"context"
	"net/netip"
)

// Desired is what the agent wants this node to announce.
type Desired struct {
	// Announce is true when this node should attract traffic for VIPs: in ARP mode only the
	// elected owner (it holds the addresses and answers ARP/NDP); in BGP mode every eligible
	// member (it advertises /32 and /128 routes).
	Announce bool
	// VIPs are the virtual addresses of the load balancer, IPv4 and/or IPv6.
	VIPs []netip.Addr
}

// Dataplane converges the node to a Desired state.
type Dataplane interface {
	// Sync makes the node's announcements match desired. The agent calls it on every change of
	// role and periodically; it must be idempotent and cheap when nothing changed. An error is
	// logged and retried by the agent on its next tick.
	Sync(ctx context.Context, desired Desired) error

	// Close withdraws every announcement and removes every address the data plane added. The
	// agent calls it on every exit path (signal, error, panic recovery); it must be idempotent
	// and must not depend on ctx being live for local cleanup.
	Close(ctx context.Context) error
}
