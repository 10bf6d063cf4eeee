//go:build linux

package flows

import (
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// tcpEstablished is the kernel's TCP_ESTABLISHED state.
const tcpEstablished = 1

// SampleBusy feeds b the established connections to vips as the kernel has them now (sock_diag
// with tcp_info) and returns how many carry requests. An error reading the sockets counts as one
// busy connection: the drain then runs to busyDrain rather than reset requests in flight.
func SampleBusy(b *BusyTracker, now time.Time, vips []netip.Addr) (int, error) {
	isVIP := map[netip.Addr]bool{}
	// An IPv4 client of a dual-stack listener is an AF_INET6 socket.
	families := []uint8{unix.AF_INET6}
	for _, v := range vips {
		v = v.Unmap().WithZone("")
		if v.Is4() && !isVIP[v] && len(families) == 1 {
			families = append(families, unix.AF_INET)
		}
		isVIP[v] = true
	}
	local := localAddrs()
	var conns []ConnSample
	for _, fam := range families {
		socks, err := netlink.SocketDiagTCPInfo(fam)
		if err != nil {
			return b.Observe(now, []ConnSample{{Key: "unreadable"}}), fmt.Errorf("flows: listing TCP sockets: %w", err)
		}
		for _, s := range socks {
			m := s.InetDiagMsg
			if m == nil || s.TCPInfo == nil || m.State != tcpEstablished {
				continue
			}
			if addr, ok := netip.AddrFromSlice(m.ID.Source); !ok || !isVIP[addr.Unmap()] {
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
