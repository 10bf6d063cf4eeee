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
//
// With notify set the prober also re-probes every key it was asked about, every interval, by
// itself, and calls notify when a key's result changes (its first result, reachable <->
// unreachable, another target): the LoadBalancer is reconciled when its endpoint's health
// changes instead of being requeued every interval. Polling cost the manager N/interval
// reconciles a second at steady state (1,000/s with 10,000 LoadBalancers and the default 10s),
// which starved convergence at scale.
type prober struct {
	dialer Dialer
	now    func() time.Time
	slots  chan struct{}
	notify func(key string)

	mu       sync.Mutex
	results  map[string]probeResult
	inflight map[string]chan struct{} // closed when the probe lands
	watched  map[string]*watch        // keys re-probed by the prober (notify mode)
}

// watch is a key the prober re-probes every interval.
type watch struct {
	target            string
	interval, timeout time.Duration
	timer             *time.Timer
}

// probeResult is one finished probe.
type probeResult struct {
	target string
	at     time.Time
	err    error
}

func newProber(d Dialer, now func() time.Time, notify func(key string)) *prober {
	return &prober{dialer: d, now: now, slots: make(chan struct{}, maxConcurrentProbes), notify: notify,
		results: map[string]probeResult{}, inflight: map[string]chan struct{}{}, watched: map[string]*watch{}}
}

// last returns the newest result for key and target, whether it is fresh (younger than interval),
// and when the caller should look again (never, in notify mode: the prober tells). When the result
// is stale or missing it starts a probe (unless one runs) and waits at most firstProbeWait.
func (p *prober) last(key, target string, interval, timeout time.Duration) (res probeResult, known bool, next time.Duration) {
	now := p.now()
	p.mu.Lock()
	if p.notify != nil {
		w := p.watched[key]
		if w == nil {
			w = &watch{}
			p.watched[key] = w
		}
		w.target, w.interval, w.timeout = target, interval, timeout
	}
	poll := func(d time.Duration) time.Duration {
		if p.notify != nil {
			return 0
		}
		return d
	}
	cached, ok := p.results[key]
	ok = ok && cached.target == target
	age := now.Sub(cached.at)
	if ok && age >= 0 && age < interval {
		p.mu.Unlock()
		return cached, true, poll(interval - age)
	}
	done, running := p.inflight[key]
	if !running {
		done = p.startLocked(key, target, timeout)
	}
	p.mu.Unlock()
	if ok {
		// Stale but known: report it until the new probe lands.
		return cached, true, poll(timeout + probePending)
	}
	select {
	case <-done:
		p.mu.Lock()
		cached, ok = p.results[key]
		p.mu.Unlock()
		if ok && cached.target == target {
			return cached, true, poll(interval)
		}
	case <-time.After(firstProbeWait):
	}
	return probeResult{}, false, poll(probePending)
}

// startLocked starts a probe of key; p.mu is held.
func (p *prober) startLocked(key, target string, timeout time.Duration) chan struct{} {
	done := make(chan struct{})
	p.inflight[key] = done
	go p.run(key, target, timeout, done)
	return done
}

func (p *prober) run(key, target string, timeout time.Duration, done chan struct{}) {
	p.slots <- struct{}{}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	conn, err := p.dialer.DialContext(ctx, "tcp", target)
	cancel()
	<-p.slots
	if err == nil {
		_ = conn.Close()
	}
	p.mu.Lock()
	defer close(done)
	if p.inflight[key] != done {
		p.mu.Unlock()
		return // forgotten (Release) while dialing
	}
	delete(p.inflight, key)
	prev, had := p.results[key]
	changed := !had || prev.target != target || (prev.err == nil) != (err == nil)
	p.results[key] = probeResult{target: target, at: p.now(), err: err}
	if w := p.watched[key]; w != nil {
		if w.timer != nil {
			w.timer.Stop()
		}
		w.timer = time.AfterFunc(w.interval, func() { p.reprobe(key) })
	}
	p.mu.Unlock()
	if changed && p.notify != nil {
		p.notify(key)
	}
}

// reprobe starts the periodic probe of a watched key.
func (p *prober) reprobe(key string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	w := p.watched[key]
	if w == nil {
		return
	}
	if _, running := p.inflight[key]; !running {
		p.startLocked(key, w.target, w.timeout)
	}
}

// forget drops what is known about key and stops re-probing it.
func (p *prober) forget(key string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.results, key)
	delete(p.inflight, key)
	if w := p.watched[key]; w != nil && w.timer != nil {
		w.timer.Stop()
	}
	delete(p.watched, key)
}

// netDialer is the default Dialer.
var _ Dialer = &net.Dialer{}
