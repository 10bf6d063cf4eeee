package static

import (
	"context"
	"net"
	"sync"
	"time"
)

// maxConcurrentProbes bounds the dials in flight across all LoadBalancers, so that thousands of
// blackholed endpoints cost at most this many goroutines and sockets.
const maxConcurrentProbes = 64

// probePending is how soon a reconcile looks again while the first probe of an endpoint runs.
const probePending = 200 * time.Millisecond

// firstProbeWait is how long a reconcile waits for the first probe of an endpoint it has no
// result for: an endpoint that answers (most do, within a millisecond) is then reported in the
// same reconcile, without a second reconcile and status write; a blackholed one costs a worker
// this long once, never healthCheck.timeout.
const firstProbeWait = 50 * time.Millisecond

// prober runs endpoint probes off the reconcile path: a reconcile reads the last result and, when
// it is older than the interval, starts a probe in the background and returns at once. A blackholed
// endpoint then costs one goroutine for healthCheck.timeout instead of a reconcile worker, so it
// cannot stall hook handling for other LoadBalancers.
type prober struct {
	dialer Dialer
	now    func() time.Time
	slots  chan struct{}

	mu       sync.Mutex
	results  map[string]probeResult
	inflight map[string]chan struct{} // closed when the probe lands
}

// probeResult is one finished probe.
type probeResult struct {
	target string
	at     time.Time
	err    error
}

func newProber(d Dialer, now func() time.Time) *prober {
	return &prober{dialer: d, now: now, slots: make(chan struct{}, maxConcurrentProbes),
		results: map[string]probeResult{}, inflight: map[string]chan struct{}{}}
}

// last returns the newest result for key and target, whether it is fresh (younger than interval),
// and when the caller should look again. When the result is stale or missing it starts a probe
// (unless one runs) and never waits for it.
func (p *prober) last(key, target string, interval, timeout time.Duration) (res probeResult, known bool, next time.Duration) {
	now := p.now()
	p.mu.Lock()
	cached, ok := p.results[key]
	ok = ok && cached.target == target
	age := now.Sub(cached.at)
	if ok && age >= 0 && age < interval {
		p.mu.Unlock()
		return cached, true, interval - age
	}
	done, running := p.inflight[key]
	if !running {
		done = make(chan struct{})
		p.inflight[key] = done
		go p.run(key, target, timeout, done)
	}
	p.mu.Unlock()
	if ok {
		// Stale but known: report it until the new probe lands.
		return cached, true, timeout + probePending
	}
	select {
	case <-done:
		p.mu.Lock()
		cached, ok = p.results[key]
		p.mu.Unlock()
		if ok && cached.target == target {
			return cached, true, interval
		}
	case <-time.After(firstProbeWait):
	}
	return probeResult{}, false, probePending
}

func (p *prober) run(key, target string, timeout time.Duration, done chan struct{}) {
	p.slots <- struct{}{}
	defer func() { <-p.slots }()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	conn, err := p.dialer.DialContext(ctx, "tcp", target)
	if err == nil {
		_ = conn.Close()
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	defer close(done)
	if p.inflight[key] != done {
		return // forgotten (Release) while dialing
	}
	delete(p.inflight, key)
	p.results[key] = probeResult{target: target, at: p.now(), err: err}
}

// forget drops what is known about key.
func (p *prober) forget(key string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.results, key)
	delete(p.inflight, key)
}

// netDialer is the default Dialer.
var _ Dialer = &net.Dialer{}
