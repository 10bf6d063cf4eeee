package wireguard

import (
	"encoding/json"
	"fmt"
	"sort"
	"time"
)

// ReportKey is the key of a gateway's report in its report ConfigMap
// (<clusterName>-caplb-gateway-<gateway name>, in the LoadBalancer's namespace): what the
// management side reads to put members into rotation and to release a quiesced member's
// pre-drain hook. See docs/backends/wireguard.md.
const ReportKey = "report.json"

// Report is a gateway's status as the management cluster reads it: the /status members (with
// their open connection counts), the nodes the gateway keeps out of rotation, and when it was
// taken. A report older than the reader's staleness bound counts as silence.
type Report struct {
	// Time the report was taken.
	Time time.Time `json:"time"`
	// QuiescedNodes are the nodes this gateway sends no new connections to.
	QuiescedNodes []string `json:"quiescedNodes"`
	// Status is GET /status.
	Status Status `json:"status"`
}

// ParseReport decodes a report and checks the fields a reader relies on.
func ParseReport(b []byte) (Report, error) {
	var r Report
	if err := json.Unmarshal(b, &r); err != nil {
		return r, fmt.Errorf("parse gateway report: %w", err)
	}
	if r.Time.IsZero() {
		return r, fmt.Errorf("gateway report has no time")
	}
	return r, nil
}

// Report returns the gateway's current report.
func (g *Gateway) Report(now time.Time) Report {
	st := g.Status()
	g.pool.mu.Lock()
	q := make([]string, 0, len(g.pool.quiescedNodes))
	for n := range g.pool.quiescedNodes {
		q = append(q, n)
	}
	g.pool.mu.Unlock()
	sort.Strings(q)
	return Report{Time: now, QuiescedNodes: q, Status: st}
}
