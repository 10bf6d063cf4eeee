//go:build linux

package realcp

import (
	"context"
	"slices"
	"sync"
	"time"
)

// HolderSample is who held the VIP at one instant.
type HolderSample struct {
	At      time.Time
	Holders []string
}

// HolderCounts are holder samples over a stretch of time: how many, and in how many the VIP
// had no owner or two.
type HolderCounts struct {
	Samples   int `json:"samples"`
	NoOwner   int `json:"no_owner"`
	TwoOwners int `json:"two_owners"`
}

// Add is the counts of both stretches.
func (h HolderCounts) Add(o HolderCounts) HolderCounts {
	return HolderCounts{Samples: h.Samples + o.Samples, NoOwner: h.NoOwner + o.NoOwner, TwoOwners: h.TwoOwners + o.TwoOwners}
}

// countHolders counts the samples taken in [from, to).
func countHolders(samples []HolderSample, from, to time.Time) HolderCounts {
	var c HolderCounts
	for _, s := range samples {
		if s.At.Before(from) || !s.At.Before(to) {
			continue
		}
		c.Samples++
		switch {
		case len(s.Holders) == 0:
			c.NoOwner++
		case len(s.Holders) > 1:
			c.TwoOwners++
		}
	}
	return c
}

// holderLog samples the VIP's holders in the background: while it runs it is the only reader
// of the machines' netlink handles (they are not safe for concurrent use), and the scenario
// reads its last sample instead.
type holderLog struct {
	mu      sync.Mutex
	samples []HolderSample
	stop    context.CancelFunc
	done    chan struct{}
}

func sampleHolders(ctx context.Context, every time.Duration, holders func() []string) *holderLog {
	ctx, cancel := context.WithCancel(ctx)
	h := &holderLog{stop: cancel, done: make(chan struct{})}
	go func() {
		defer close(h.done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			s := HolderSample{At: time.Now(), Holders: holders()}
			h.mu.Lock()
			h.samples = append(h.samples, s)
			h.mu.Unlock()
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return h
}

// last is the latest sample's holders (nil before the first).
func (h *holderLog) last() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.samples) == 0 {
		return nil
	}
	return slices.Clone(h.samples[len(h.samples)-1].Holders)
}

// end stops the sampling and returns every sample.
func (h *holderLog) end() []HolderSample {
	h.stop()
	<-h.done
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.samples
}
