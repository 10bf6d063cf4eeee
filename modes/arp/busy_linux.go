//go:build linux

package arp

import (
	"net/netip"
	"time"

	"github.com/caplb/caplb/modes/flows"
)

// BusyConnections counts the connections to the VIPs held here whose clients still send
// requests (see modes/flows/busy.go), sampling the kernel at most every flows.BusySampleEvery. An error reading
// the sockets counts every connection as busy: the drain then runs to busyDrain, as it would
// for clients that never move, rather than reset requests in flight.
func (a *Announcer) BusyConnections() int {
	now := time.Now()
	if !a.busy.Due(now) {
		return a.busy.Count()
	}
	a.mu.Lock()
	vips := make([]netip.Addr, 0, len(a.held))
	for v := range a.held {
		vips = append(vips, v)
	}
	a.mu.Unlock()
	n, err := flows.SampleBusy(&a.busy, now, vips)
	if err != nil {
		a.log.Error(err, "counting busy connections failed; treating them all as busy")
	}
	return n
}
