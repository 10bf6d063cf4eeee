//go:build linux

package main

import (
	"context"
	"net/netip"
	"sync"
	"time"

	"github.com/caplb/caplb/e2e/lab/arplab"
)

// attempt is one client connect to VIP:port.
type attempt struct {
	Start, End time.Time
	Node       string // who answered; "" when it failed
	Err        string
}

// holding is one sample of which kernels hold the VIP.
type holding struct {
	At      time.Time
	Holders []string
	// ClientSees: the node the client's ARP entry for the VIP points to
	// (sampled in spread mode only).
	ClientSees string
}

// recorder runs the client probe (a connect every interval, each in its own
// goroutine so that a hanging one never delays the next) and samples the
// nodes' kernels for the VIP.
type recorder struct {
	c        *arplab.Cluster
	vip      netip.Addr
	interval time.Duration
	timeout  time.Duration
	// view, in spread mode, samples the client's ARP entry for the VIP.
	view *clientView

	mu       sync.Mutex
	attempts []attempt
	samples  []holding
	stop     context.CancelFunc
	wg       sync.WaitGroup
}

func startRecorder(c *arplab.Cluster, vip netip.Addr, interval, timeout time.Duration, view *clientView) *recorder {
	ctx, cancel := context.WithCancel(context.Background())
	r := &recorder{c: c, vip: vip, interval: interval, timeout: timeout, stop: cancel, view: view}
	r.wg.Add(2)
	go r.probeLoop(ctx)
	go r.sampleLoop(ctx)
	return r
}

func (r *recorder) probeLoop(ctx context.Context) {
	defer r.wg.Done()
	t := time.NewTicker(r.interval)
	defer t.Stop()
	var inflight sync.WaitGroup
	defer inflight.Wait()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		inflight.Add(1)
		go func() {
			defer inflight.Done()
			a := attempt{Start: time.Now()}
			actx, cancel := context.WithTimeout(context.Background(), r.timeout)
			node, err := r.c.Connect(actx, r.vip)
			cancel()
			a.End = time.Now()
			if err != nil {
				a.Err = err.Error()
			} else {
				a.Node = node
			}
			r.mu.Lock()
			r.attempts = append(r.attempts, a)
			r.mu.Unlock()
		}()
	}
}

func (r *recorder) sampleLoop(ctx context.Context) {
	defer r.wg.Done()
	t := time.NewTicker(2 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		h, err := r.c.Holders(r.vip)
		if err != nil {
			continue
		}
		sample := holding{At: time.Now(), Holders: h}
		if r.view != nil {
			sample.ClientSees = r.view.sees(r.vip)
		}
		r.mu.Lock()
		r.samples = append(r.samples, sample)
		r.mu.Unlock()
	}
}

// window returns the attempts started and samples taken in [from, to].
func (r *recorder) window(from, to time.Time) ([]attempt, []holding) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var as []attempt
	for _, a := range r.attempts {
		if !a.Start.Before(from) && !a.Start.After(to) {
			as = append(as, a)
		}
	}
	var hs []holding
	for _, h := range r.samples {
		if !h.At.Before(from) && !h.At.After(to) {
			hs = append(hs, h)
		}
	}
	return as, hs
}

// firstAnswerBy waits until an attempt that started after since was
// answered by a node other than old; it returns that attempt.
func (r *recorder) firstAnswerBy(since time.Time, old string, timeout time.Duration) (attempt, bool) {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		r.mu.Lock()
		var best *attempt
		for i := range r.attempts {
			a := &r.attempts[i]
			if a.Start.After(since) && a.Node != "" && a.Node != old && (best == nil || a.End.Before(best.End)) {
				best = a
			}
		}
		r.mu.Unlock()
		if best != nil {
			// Attempts finish out of order: give slower ones that started
			// earlier a moment to land before trusting "first".
			time.Sleep(r.timeout)
			r.mu.Lock()
			for i := range r.attempts {
				a := &r.attempts[i]
				if a.Start.After(since) && a.Node != "" && a.Node != old && a.End.Before(best.End) {
					best = a
				}
			}
			res := *best
			r.mu.Unlock()
			return res, true
		}
		time.Sleep(5 * time.Millisecond)
	}
	return attempt{}, false
}

// firstAnswerAfterMove is firstAnswerBy for the spread mode, where every
// member answers: it waits until the client's ARP entry for the VIP points
// to a node other than old, and returns the first connect started after
// that which succeeded, with Node set to the node the client now sends to.
func (r *recorder) firstAnswerAfterMove(since time.Time, old string, timeout time.Duration) (attempt, bool) {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		r.mu.Lock()
		var moved holding
		for _, h := range r.samples {
			if h.At.After(since) && h.ClientSees != "" && h.ClientSees != old {
				moved = h
				break
			}
		}
		var best *attempt
		for i := range r.attempts {
			a := &r.attempts[i]
			if !moved.At.IsZero() && a.Start.After(moved.At) && a.Err == "" && (best == nil || a.End.Before(best.End)) {
				best = a
			}
		}
		r.mu.Unlock()
		if best != nil {
			time.Sleep(r.timeout)
			r.mu.Lock()
			for i := range r.attempts {
				a := &r.attempts[i]
				if a.Start.After(moved.At) && a.Err == "" && a.End.Before(best.End) {
					best = a
				}
			}
			res := *best
			r.mu.Unlock()
			res.Node = moved.ClientSees
			return res, true
		}
		time.Sleep(5 * time.Millisecond)
	}
	return attempt{}, false
}

func (r *recorder) close() {
	r.stop()
	r.wg.Wait()
}

// reset drops history (between trials, to bound memory).
func (r *recorder) reset() {
	r.mu.Lock()
	r.attempts, r.samples = nil, nil
	r.mu.Unlock()
}
