package arp

import (
	"sync"
	"time"
)

// A quiescing holder with quiesce.busyDrain waits, after its drain, for the connections that
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
	// busySampleEvery bounds how often the kernel is asked.
	busySampleEvery = 100 * time.Millisecond
)

// connSample is one connection as the kernel reported it.
type connSample struct {
	// key names the connection (its addresses and ports).
	key string
	// received is the bytes its client sent (tcpi_bytes_received).
	received uint64
	// sinceData is the time since the client last sent data (tcpi_last_data_recv).
	sinceData time.Duration
}

// byteMark is a connection's received count at one time.
type byteMark struct {
	at       time.Time
	received uint64
}

// busyTracker keeps each connection's byte counts over the last busyWindow and counts the busy
// ones. Pure: the kernel's samples come in, a count goes out.
type busyTracker struct {
	mu    sync.Mutex
	marks map[string][]byteMark
	last  time.Time
	busy  int
}

// due reports whether a new sample is wanted at now.
func (b *busyTracker) due(now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.last.IsZero() || now.Sub(b.last) >= busySampleEvery
}

// count returns the last count without sampling.
func (b *busyTracker) count() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.busy
}

// observe records the connections seen at now and returns how many are busy. A connection
// seen for less than busyWindow counts as busy when its client sent anything within the
// window: conservative, it only holds the VIP a little longer.
func (b *busyTracker) observe(now time.Time, conns []connSample) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	seen := make(map[string][]byteMark, len(conns))
	busy := 0
	for _, c := range conns {
		marks := append(b.marks[c.key], byteMark{at: now, received: c.received})
		// Keep the newest mark at least busyWindow old as the base, and everything after it.
		base := 0
		for i := range marks {
			if now.Sub(marks[i].at) >= busyWindow {
				base = i
			}
		}
		marks = marks[base:]
		seen[c.key] = marks
		if now.Sub(marks[0].at) >= busyWindow {
			if c.received-marks[0].received >= busyBytes {
				busy++
			}
		} else if c.sinceData < busyWindow {
			busy++
		}
	}
	b.marks, b.last, b.busy = seen, now, busy
	return busy
}
