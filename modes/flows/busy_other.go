//go:build !linux

package flows

import (
	"net/netip"
	"time"
)

// SampleBusy counts one busy connection: the sockets cannot be read (not Linux).
func SampleBusy(b *BusyTracker, now time.Time, vips []netip.Addr) (int, error) {
	return b.Observe(now, []ConnSample{{Key: "unreadable"}}), errNotLinux
}
