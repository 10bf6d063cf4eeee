package flows

import (
	"sync"
	"time"
)

// A quiescing member with quiesce.busyDrain waits, after its drain, for the connections that
// still carry requests to move (an HTTP/2 API server's GOAWAY sends their next requests to the
// successor). Which connections carry requests is told from the bytes their clients sent: a
// request is hundreds of bytes, while a connection left with a watch (its client moved its
// requests on a GOAWAY, the watch stream stays until it ends) only sends flow-control updates,
// tens of bytes per 4 KiB of events.
const (
	// busyWindow is how far back a connection's client must have sent busyBytes.
	busyWindow = 2 * time.Second
	// busyBytes is what a connection's client sends in busyWindow to count as busy: a
	// ConfigMap PUT is ~350 bytes, so a client-go writer slowed to one write a second counts
	// (a 1 KiB-a-second threshold let such a writer's connection be reset with a write in
	// flight, in one CI run of three); a watch's flow-control updates stay near 1 % of the
	// events it receives, and a Lease renewal every 2 s alone does not count.
	busyBytes = 512
	// BusySampleEvery bounds how often the kernel is asked.
	BusySampleEvery = 100 * time.Millisecond
)

// ConnSample is one connection as the kernel reported it.
type ConnSample struct {
	// Key names the connection (its addresses and ports).
	Key string
	// Received is the bytes its client sent (tcpi_bytes_received).
	Received uint64
	// SinceData is the time since the client last sent data (tcpi_last_data_recv).
	SinceData time.Duration
}

// byteMark is a connection's received count at one time.
type byteMark struct {
	at       time.Time
	received uint64
}

// BusyTracker keeps each connection's byte counts over the last busyWindow and counts the busy
// ones. Pure: the kernel's samples come in, a count goes out.
type BusyTracker struct {
	mu    sync.Mutex
	marks map[string][]byteMark
	last  time.Time
	busy  int
}

// Due reports whether a new sample is wanted at now.
func (b *BusyTracker) Due(now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.last.IsZero() || now.Sub(b.last) >= BusySampleEvery
}

// Count returns the last count without sampling.
func (b *BusyTracker) Count() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.busy
}

// Observe records the connections seen at now and returns how many are busy. A connection
// seen for less than busyWindow counts as busy when its client sent anything within the
// window: conservative, it only holds the VIP a little longer.
func (b *BusyTracker) Observe(now time.Time, conns []ConnSample) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	seen := make(map[string][]byteMark, len(conns))
	busy := 0
	for _, c := range conns {
		marks := append(b.marks[c.Key], byteMark{at: now, received: c.Received})
		// Keep the newest mark at least busyWindow old as the base, and everything after it.
		base := 0
		for i := range marks {
			if now.Sub(marks[i].at) >= busyWindow {
				base = i
			}
		}
		marks = marks[base:]
		seen[c.Key] = marks
		if now.Sub(marks[0].at) >= busyWindow {
			if c.Received-marks[0].received >= busyBytes {
				busy++
			}
		} else if c.SinceData < busyWindow {
			busy++
		}
	}
	b.marks, b.last, b.busy = seen, now, busy
	return busy
}
