package wireguard

import (
	"fmt"
	"net/http"

	wgapi "github.com/caplb/caplb/api/wireguard/v1alpha1"
	"github.com/caplb/caplb/internal/buildinfo"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// gatewayCollector exports the gateway's state as /status reports it, read once per scrape. The
// pool already keeps every count (connections, served, dial failures) and the tunnel keeps the
// handshakes; a collector of constant metrics mirrors them instead of keeping a second set of
// counters that could disagree with /status.
type gatewayCollector struct {
	status func() wgapi.Status

	info        *prometheus.Desc
	connections *prometheus.Desc
	healthy     *prometheus.Desc
	served      *prometheus.Desc
	dialFailed  *prometheus.Desc
	handshake   *prometheus.Desc
}

func newGatewayCollector(status func() wgapi.Status) *gatewayCollector {
	member := []string{"node", "public_key"}
	return &gatewayCollector{
		status: status,
		// Always 1 while the gateway serves, members or not: what a "gateway down" alert and the
		// dashboard's gateway row select gateway targets by.
		info: prometheus.NewDesc("caplb_wireguard_gateway_info",
			"The WireGuard gateway: always 1, with its name, public key and tunnel address as labels.",
			[]string{"gateway", "public_key", "tunnel_address"}, nil),
		connections: prometheus.NewDesc("caplb_wireguard_member_connections",
			"Open client connections per member key.", []string{"node", "public_key", "state"}, nil),
		healthy: prometheus.NewDesc("caplb_wireguard_member_healthy",
			"1 while the member's /readyz passes through the tunnel.", member, nil),
		served: prometheus.NewDesc("caplb_wireguard_member_connections_total",
			"Client connections served per member key.", member, nil),
		dialFailed: prometheus.NewDesc("caplb_wireguard_member_dial_failures_total",
			"Client connections the gateway could not open to the member through the tunnel.", member, nil),
		handshake: prometheus.NewDesc("caplb_wireguard_member_last_handshake_timestamp_seconds",
			"Unix time of the last WireGuard handshake with the member; absent until the first.", member, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *gatewayCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.info, c.connections, c.healthy, c.served, c.dialFailed, c.handshake} {
		ch <- d
	}
}

// Collect implements prometheus.Collector: one /status snapshot, so that a scrape's families
// agree with each other.
func (c *gatewayCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.status()
	ch <- prometheus.MustNewConstMetric(c.info, prometheus.GaugeValue, 1, st.Name, st.PublicKey, st.TunnelAddress)
	for _, m := range st.Members {
		healthy := 0.0
		if m.Healthy {
			healthy = 1
		}
		ch <- prometheus.MustNewConstMetric(c.connections, prometheus.GaugeValue, float64(m.Connections), m.Node, m.PublicKey, m.State)
		ch <- prometheus.MustNewConstMetric(c.healthy, prometheus.GaugeValue, healthy, m.Node, m.PublicKey)
		ch <- prometheus.MustNewConstMetric(c.served, prometheus.CounterValue, float64(m.Served), m.Node, m.PublicKey)
		ch <- prometheus.MustNewConstMetric(c.dialFailed, prometheus.CounterValue, float64(m.DialFailed), m.Node, m.PublicKey)
		// A zero time is "never": exporting it as 0 would read as a 56-year-old handshake.
		if !m.Handshake.IsZero() {
			ch <- prometheus.MustNewConstMetric(c.handshake, prometheus.GaugeValue,
				float64(m.Handshake.UnixNano())/1e9, m.Node, m.PublicKey)
		}
	}
}

// metricsHandler is the gateway's /metrics: its own registry (nothing from the process-wide
// default one, so that two gateways in one test process do not collide) with the build and the
// gateway's state.
func metricsHandler(status func() wgapi.Status, build buildinfo.Labels) (http.Handler, error) {
	reg := prometheus.NewRegistry()
	if err := buildinfo.Register(reg, build); err != nil {
		return nil, err
	}
	if err := reg.Register(newGatewayCollector(status)); err != nil {
		return nil, fmt.Errorf("registering the gateway collector: %w", err)
	}
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), nil
}
