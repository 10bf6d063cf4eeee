//go:build linux

package wglab

import (
	"context"
	"sync"
	"time"
)

// Result is one client request.
type Result struct {
	Start, End time.Time
	Node       string
	Err        error
}

// Load runs workers that each send requests back to back (Pause apart) until Stop.
type Load struct {
	mu      sync.Mutex
	results []Result
	cancel  context.CancelFunc
	wg      sync.WaitGroup
}

// StartLoad starts workers sending GET /name through the gateways.
func (c *Client) StartLoad(workers int, pause time.Duration) *Load {
	ctx, cancel := context.WithCancel(context.Background())
	ld := &Load{cancel: cancel}
	for range workers {
		ld.wg.Add(1)
		go func() {
			defer ld.wg.Done()
			for ctx.Err() == nil {
				start := time.Now()
				// Requests are not tied to ctx: one in flight when the load stops completes.
				node, err := c.Name(context.Background())
				ld.mu.Lock()
				ld.results = append(ld.results, Result{Start: start, End: time.Now(), Node: node, Err: err})
				ld.mu.Unlock()
				if pause > 0 {
					select {
					case <-ctx.Done():
					case <-time.After(pause):
					}
				}
			}
		}()
	}
	return ld
}

// Stop ends the load and returns every result in start order.
func (ld *Load) Stop() []Result {
	ld.cancel()
	ld.wg.Wait()
	return ld.Snapshot()
}

// Snapshot returns the results so far.
func (ld *Load) Snapshot() []Result {
	ld.mu.Lock()
	defer ld.mu.Unlock()
	out := append([]Result(nil), ld.results...)
	return out
}

// Failures are the failed results.
func Failures(rs []Result) []Result {
	var out []Result
	for _, r := range rs {
		if r.Err != nil {
			out = append(out, r)
		}
	}
	return out
}

// After is the results of requests started at or after t.
func After(rs []Result, t time.Time) []Result {
	var out []Result
	for _, r := range rs {
		if !r.Start.Before(t) {
			out = append(out, r)
		}
	}
	return out
}

// Stall is the longest request (a failed one until it failed) among those started in
// [t, t+window): how long the fault at t held a client up at worst.
func Stall(rs []Result, t time.Time, window time.Duration) time.Duration {
	var worst time.Duration
	for _, r := range rs {
		if r.Start.Before(t) || !r.Start.Before(t.Add(window)) {
			continue
		}
		worst = max(worst, r.End.Sub(r.Start))
	}
	return worst
}
