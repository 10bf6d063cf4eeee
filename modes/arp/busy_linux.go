//go:build linux

package arp

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/vishvananda/netlink"
)

// BusyConnections counts the connections to the VIPs held here whose clients still send
// requests (see busy.go), sampling the kernel at most every busySampleEvery. An error reading
// the sockets counts every connection as busy: the drain then runs to busyDrain, as it would
// for clients that never move, rather than reset requests in flight.
func (a *Announcer) BusyConnections() int {
	now := time.Now()
	if !a.busy.due(now) {
		return a.busy.count()
	}
	a.mu.Lock()
	vips := make([]netip.Addr, 0, len(a.held))
	for v := range a.held {
		vips = append(vips, v)
	}
	a.mu.Unlock()
	n, err := sampleBusy(&a.busy, now, vips)
	if err != nil {
		a.log.Error(err, "counting busy connections failed; treating them all as busy")
	}
	return n
}

// sampleBusy feeds b the established connections to vips as the kernel has them now. An error
// reading the sockets counts as one busy connection.
func sampleBusy(b *busyTracker, now time.Time, vips []netip.Addr) (int, error) {
	var conns []connSample
	for _, v := range vips {
		socks, err := vipSockets(v)
		if err != nil {
			return b.observe(now, []connSample{{key: "unreadable"}}), err
		}
		for _, s := range socks {
			if s.TCPInfo == nil || s.InetDiagMsg.State != tcpEstablished {
				continue
			}
			conns = append(conns, connSample{
				key:       connKey(s.InetDiagMsg),
				received:  s.TCPInfo.Bytes_received,
				sinceData: time.Duration(s.TCPInfo.Last_data_recv) * time.Millisecond,
			})
		}
	}
	return b.observe(now, conns), nil
}

func connKey(m *netlink.Socket) string {
	id := m.ID
	return fmt.Sprintf("%s:%d-%s:%d", id.Source, id.SourcePort, id.Destination, id.DestinationPort)
}
