//go:build linux

package flows

import (
	"net/netip"
	"slices"
)

// TCP states (include/net/tcp_states.h) in which an accepted connection still receives segments:
// a segment of one of these, rehashed to another member and reset there, breaks the connection.
// Not LISTEN, TIME_WAIT or CLOSE, nor SYN_SENT (a connection this node opened). Half-open
// connections (SYN_RECV request sockets) are not dumped with these states; a full SYN_RECV
// socket (TCP Fast Open) is.
func receiving(state uint8) bool {
	switch state {
	case 1, // ESTABLISHED
		3,  // SYN_RECV
		4,  // FIN_WAIT1
		5,  // FIN_WAIT2
		8,  // CLOSE_WAIT
		9,  // LAST_ACK
		11: // CLOSING
		return true
	}
	return false
}

// receivingStates is receiving's states as sock_diag's state mask.
const receivingStates = 1<<1 | 1<<3 | 1<<4 | 1<<5 | 1<<8 | 1<<9 | 1<<11

// List returns the TCP connections this node terminates whose local address is one of vips and
// whose local port is one of ports (every port when ports is empty), IPv4 and IPv6, sorted by
// service then client: the oldest, at most PerClient per client address and MaxFlows in all, and
// how many it left out. It reads the sockets of the calling thread's network namespace
// (sock_diag), so it sees connections whatever process holds them.
func List(vips []netip.Addr, ports []uint16) (Listing, error) {
	socks, err := vipSocketsIn(vips, receivingStates, false)
	if err != nil {
		return Listing{}, err
	}
	var out []aged
	for _, r := range socks {
		s := r.InetDiagMsg
		if !receiving(s.State) {
			continue
		}
		local, ok := netip.AddrFromSlice(s.ID.Source)
		if !ok {
			continue
		}
		if len(ports) > 0 && !slices.Contains(ports, s.ID.SourcePort) {
			continue
		}
		remote, ok := netip.AddrFromSlice(s.ID.Destination)
		if !ok {
			continue
		}
		out = append(out, aged{flow: Flow{
			Client:  netip.AddrPortFrom(remote.Unmap(), s.ID.DestinationPort),
			Service: netip.AddrPortFrom(local.Unmap(), s.ID.SourcePort),
		}, rank: rankOfInode(s.INode)})
	}
	return selectFlows(out, MaxFlows, PerClient), nil
}
