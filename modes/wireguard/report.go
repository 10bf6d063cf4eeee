package wireguard

import (
	"sort"
	"time"

	wgapi "github.com/caplb/caplb/api/wireguard/v1alpha1"
)

// wgapi.Report returns the gateway's current report.
func (g *Gateway) Report(now time.Time) wgapi.Report {
	st := g.Status()
	g.pool.mu.Lock()
	q := make([]string, 0, len(g.pool.quiescedNodes))
	for n := range g.pool.quiescedNodes {
		q = append(q, n)
	}
	g.pool.mu.Unlock()
	sort.Strings(q)
	return wgapi.Report{Time: now, QuiescedNodes: q, Status: st}
}
