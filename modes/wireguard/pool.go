package wireguard

import (
	"net/netip"
	"sort"
	"sync"
	"time"

	wgapi "github.com/caplb/caplb/api/wireguard/v1alpha1"
)

// pool is the gateway's set of members (one entry per public key: a node rotating its key has two
// for a while) with their health, quiesce state and open connections.
type pool struct {
	mu       sync.Mutex
	backends map[Key]*backend
	rr       uint64 // round-robin among equally loaded members
	rise     int
	fall     int
	// quiescedNodes survive key rotation and restarts (state file).
	quiescedNodes map[string]bool
}

type backend struct {
	node   string
	pub    Key
	addr   netip.Addr
	static bool

	healthy     bool
	seen        bool // at least one health result
	okRun       int
	failRun     int
	lastErr     string
	lastChecked time.Time

	// draining: deregistered (key rotation, member shutdown); removed once its connections are
	// gone or at drainDeadline.
	draining      bool
	drainDeadline time.Time
	// quiesceDeadline: when the node was quiesced; its open connections close at this time.
	quiesceDeadline time.Time

	// lastSeen: last registration (or the gateway's start, for members from the state file).
	lastSeen time.Time

	conns  map[*proxied]struct{}
	served uint64
	failed uint64

	stopHealth func()
}

func newPool(rise, fall int) *pool {
	return &pool{backends: map[Key]*backend{}, rise: rise, fall: fall, quiescedNodes: map[string]bool{}}
}

// eligibleLocked: receives new connections.
func (p *pool) eligibleLocked(b *backend) bool {
	return !b.draining && !p.quiescedNodes[b.node]
}

// pick chooses the member for a new connection: among eligible healthy members not yet tried,
// the least loaded, round-robin among equals. When no healthy member is left it falls back to
// eligible members whose health is failing (so that a cluster whose every /readyz fails, e.g.
// during bootstrap, still answers: the client then sees the API server's own error). Quiesced
// and draining members are never picked.
func (p *pool) pick(tried map[Key]bool) *backend {
	p.mu.Lock()
	defer p.mu.Unlock()
	var healthy, fallback []*backend
	for _, b := range p.backends {
		if tried[b.pub] || !p.eligibleLocked(b) {
			continue
		}
		if b.healthy {
			healthy = append(healthy, b)
		} else {
			fallback = append(fallback, b)
		}
	}
	cands := healthy
	if len(cands) == 0 {
		cands = fallback
	}
	if len(cands) == 0 {
		return nil
	}
	sort.Slice(cands, func(i, j int) bool { return cands[i].addr.Less(cands[j].addr) })
	p.rr++
	best := -1
	n := len(cands)
	for k := 0; k < n; k++ {
		i := int((p.rr + uint64(k)) % uint64(n))
		if best < 0 || len(cands[i].conns) < len(cands[best].conns) {
			best = i
		}
	}
	return cands[best]
}

// attach records an open connection; it fails when the member stopped being eligible meanwhile.
func (p *pool) attach(b *backend, c *proxied) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.backends[b.pub] != b || !p.eligibleLocked(b) {
		return false
	}
	b.conns[c] = struct{}{}
	b.served++
	return true
}

func (p *pool) detach(b *backend, c *proxied) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(b.conns, c)
}

// dialFailed counts a failed client dial as a health failure at once: the member is skipped until
// its health check passes rise times again.
func (p *pool) dialFailed(b *backend, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	b.failed++
	b.healthy, b.okRun, b.failRun, b.lastErr = false, 0, p.fall, "dial: "+err.Error()
}

// healthResult applies one check; it reports a change of health.
func (p *pool) healthResult(b *backend, err error, now time.Time) (changed, healthy bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	b.lastChecked = now
	was := b.healthy
	if err == nil {
		b.okRun++
		b.failRun = 0
		b.lastErr = ""
		if b.okRun >= p.rise {
			b.healthy = true
		}
	} else {
		b.failRun++
		b.okRun = 0
		b.lastErr = err.Error()
		if b.failRun >= p.fall {
			b.healthy = false
		}
	}
	changed = was != b.healthy || (!b.seen && err != nil)
	b.seen = true
	return changed, b.healthy
}

// expired returns the connections to close now (quiesced or draining past their deadline) and
// the draining members to remove (no connections left, or past the deadline).
func (p *pool) expired(now time.Time) (closeConns []*proxied, remove []*backend) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for k, b := range p.backends {
		deadline := time.Time{}
		if b.draining {
			deadline = b.drainDeadline
		} else if p.quiescedNodes[b.node] {
			deadline = b.quiesceDeadline
		}
		if !deadline.IsZero() && !now.Before(deadline) {
			for c := range b.conns {
				closeConns = append(closeConns, c)
			}
		}
		if b.draining && (len(b.conns) == 0 || !now.Before(deadline)) {
			remove = append(remove, b)
			delete(p.backends, k)
		}
	}
	return closeConns, remove
}

// forget marks registered members silent since before cutoff (no registration, no handshake)
// as draining with an immediate deadline, so that expired removes them.
func (p *pool) forget(handshakes map[Key]time.Time, cutoff, now time.Time) []*backend {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []*backend
	for _, b := range p.backends {
		if b.static || b.draining || b.lastSeen.After(cutoff) || handshakes[b.pub].After(cutoff) {
			continue
		}
		b.draining, b.drainDeadline = true, now
		out = append(out, b)
	}
	return out
}

func (p *pool) status() []wgapi.MemberStatus {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]wgapi.MemberStatus, 0, len(p.backends))
	for _, b := range p.backends {
		state := "active"
		switch {
		case b.draining:
			state = "draining"
		case p.quiescedNodes[b.node]:
			state = "quiesced"
		}
		out = append(out, wgapi.MemberStatus{Node: b.node, PublicKey: b.pub.String(), Address: b.addr.String(), Static: b.static,
			Healthy: b.healthy, State: state, Connections: len(b.conns), Served: b.served, DialFailed: b.failed,
			LastError: b.lastErr, LastChecked: b.lastChecked})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Node != out[j].Node {
			return out[i].Node < out[j].Node
		}
		return out[i].PublicKey < out[j].PublicKey
	})
	return out
}

// quiesce sets or clears a node's quiesce; it reports whether the node has any member.
func (p *pool) quiesce(node string, on bool, drain time.Duration, now time.Time) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	found := false
	for _, b := range p.backends {
		if b.node == node {
			found = true
			if on && !p.quiescedNodes[node] {
				b.quiesceDeadline = now.Add(drain)
			}
		}
	}
	if on {
		p.quiescedNodes[node] = true
	} else {
		delete(p.quiescedNodes, node)
	}
	return found
}
