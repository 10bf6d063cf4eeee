//go:build linux

package flows

import (
	"fmt"
	"net"
	"net/netip"
	"time"
)

// tcpEstablished is the kernel's TCP_ESTABLISHED state.
const tcpEstablished = 1

// SampleBusy feeds b the established connections to vips as the kernel has them now (sock_diag
// with tcp_info) and returns how many carry requests. An error reading the sockets counts as one
// busy connection: the drain then runs to busyDrain rather than reset requests in flight.
func SampleBusy(b *BusyTracker, now time.Time, vips []netip.Addr) (int, error) {
	isVIP := map[netip.Addr]bool{}
	for _, v := range vips {
		isVIP[v.Unmap().WithZone("")] = true
	}
	local := localAddrs()
	socks, err := vipSocketsIn(vips, statesEstablished, true)
	if err != nil {
		return b.Observe(now, []ConnSample{{Key: "unreadable"}}), err
	}
	var conns []ConnSample
	for _, s := range socks {
		m := s.InetDiagMsg
		if m == nil || s.TCPInfo == nil || m.State != tcpEstablished {
			continue
		}
		// A client on this node (the kubelet and the agent reach the API server at the VIP,
		// which is local here) is not moved by a GOAWAY and goes with the node: not waited for.
		if remote, ok := netip.AddrFromSlice(m.ID.Destination); ok && (isVIP[remote.Unmap()] || local[remote.Unmap()]) {
			continue
		}
		conns = append(conns, ConnSample{
			Key:       fmt.Sprintf("%s:%d-%s:%d", m.ID.Source, m.ID.SourcePort, m.ID.Destination, m.ID.DestinationPort),
			Received:  s.TCPInfo.Bytes_received,
			SinceData: time.Duration(s.TCPInfo.Last_data_recv) * time.Millisecond,
		})
	}
	return b.Observe(now, conns), nil
}

// localAddrs are this node's own addresses but loopback ones (an unreadable list is empty: every
// client counts).
func localAddrs() map[netip.Addr]bool {
	out := map[netip.Addr]bool{}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return out
	}
	for _, a := range addrs {
		if p, err := netip.ParsePrefix(a.String()); err == nil && !p.Addr().IsLoopback() {
			out[p.Addr().Unmap()] = true
		}
	}
	return out
}
