package v1alpha1

import (
	"encoding/json"
	"fmt"
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

// Status is a gateway's GET /status: every member with its connection count and health.
type Status struct {
	Name          string         `json:"name"`
	PublicKey     string         `json:"publicKey"`
	TunnelAddress string         `json:"tunnelAddress"`
	Members       []MemberStatus `json:"members"`
}

// MemberStatus is one member as /status reports it.
type MemberStatus struct {
	Node        string    `json:"node"`
	PublicKey   string    `json:"publicKey"`
	Address     string    `json:"address"`
	Static      bool      `json:"static,omitempty"`
	Healthy     bool      `json:"healthy"`
	State       string    `json:"state"` // active, quiesced, draining
	Connections int       `json:"connections"`
	Served      uint64    `json:"served"`
	DialFailed  uint64    `json:"dialFailed"`
	LastError   string    `json:"lastError,omitempty"`
	LastChecked time.Time `json:"lastChecked,omitzero"`
	Endpoint    string    `json:"endpoint,omitempty"`
	Handshake   time.Time `json:"lastHandshake,omitzero"`
}
