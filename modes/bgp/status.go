package bgp

import (
	"sort"
	"strings"
	"sync"
	"time"

	agentv1 "github.com/caplb/caplb/api/agent/v1alpha1"

	"github.com/go-logr/logr"
	api "github.com/osrg/gobgp/v3/api"

	"github.com/caplb/caplb/modes/dataplane"
)

// peerTracker folds gobgp's peer state events and log-derived errors into dataplane.PeerStatus, logs
// every change once, and keeps the metrics current.
type peerTracker struct {
	log     logr.Logger
	metrics *metrics
	now     func() time.Time

	mu    sync.Mutex
	order []string
	peers map[string]*dataplane.PeerStatus
}

func newPeerTracker(log logr.Logger, m *metrics, peers []agentv1.BGPPeer, now func() time.Time) *peerTracker {
	t := &peerTracker{log: log, metrics: m, now: now, peers: map[string]*dataplane.PeerStatus{}}
	for _, p := range peers {
		addr := canonicalAddr(p.Address)
		t.order = append(t.order, addr)
		t.peers[addr] = &dataplane.PeerStatus{Address: addr, ASN: p.ASN, State: "idle", Since: now()}
		m.sessionUp.WithLabelValues(addr).Set(0)
	}
	return t
}

// state records a state change from gobgp's watcher.
func (t *peerTracker) state(addr string, s api.PeerState_SessionState) {
	name := strings.ToLower(s.String())
	if name == "unknown" {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	p, ok := t.peers[addr]
	if !ok || p.State == name {
		return
	}
	old := p.State
	p.State, p.Since = name, t.now()
	up := 0.0
	if name == dataplane.PeerEstablished {
		up = 1
	}
	t.metrics.sessionUp.WithLabelValues(addr).Set(up)
	t.metrics.sessionChanges.WithLabelValues(addr, name).Inc()
	switch {
	case name == dataplane.PeerEstablished:
		t.log.Info("BGP session established", "peer", addr, "peerASN", p.ASN)
		p.LastError, p.LastErrorTime = "", nil
	case old == dataplane.PeerEstablished:
		kv := []any{"peer", addr, "state", name}
		if p.LastError != "" {
			kv = append(kv, "reason", p.LastError)
		}
		t.log.Info("BGP session down; the router drops this node's routes", kv...)
	default:
		t.log.V(1).Info("BGP session state", "peer", addr, "from", old, "to", name)
	}
}

// event records a session problem. Repeats of the same message (a connect error every retry)
// are counted but logged once, so a dead peer does not flood the log.
func (t *peerTracker) event(addr string, ev peerEvent) {
	t.mu.Lock()
	defer t.mu.Unlock()
	p, ok := t.peers[addr]
	if !ok {
		return
	}
	if ev.kind != "" {
		t.metrics.peerErrors.WithLabelValues(addr, ev.kind).Inc()
	}
	now := t.now()
	repeat := p.LastError == ev.message
	p.LastError, p.LastErrorTime = ev.message, &now
	if repeat {
		t.log.V(1).Info("BGP session problem persists", "peer", addr, "error", ev.message)
		return
	}
	t.log.Error(nil, "BGP session problem", "peer", addr, "peerASN", p.ASN, "state", p.State, "error", ev.message)
}

func (t *peerTracker) snapshot() []dataplane.PeerStatus {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]dataplane.PeerStatus, 0, len(t.order))
	for _, a := range t.order {
		out = append(out, *t.peers[a])
	}
	return out
}

func (t *peerTracker) established(addr string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	p, ok := t.peers[addr]
	return ok && p.State == dataplane.PeerEstablished
}

func sortedStrings(m map[string]struct{}) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
