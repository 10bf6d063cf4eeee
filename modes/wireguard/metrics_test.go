package wireguard

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	wgapi "github.com/caplb/caplb/api/wireguard/v1alpha1"
	"github.com/caplb/caplb/internal/buildinfo"

	. "github.com/onsi/gomega"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// scrapeMetrics GETs /metrics from h as Prometheus does (text format) and parses the answer, so
// that a malformed exposition fails here rather than in a user's Prometheus.
func scrapeMetrics(g Gomega, h http.Handler) map[string]*dto.MetricFamily {
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
	req.Header.Set("Accept", "text/plain")
	h.ServeHTTP(rec, req)
	g.Expect(rec.Code).To(Equal(http.StatusOK), rec.Body.String())
	return parseMetrics(g, rec.Body)
}

// parseMetrics parses a Prometheus text exposition.
func parseMetrics(g Gomega, body io.Reader) map[string]*dto.MetricFamily {
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(body)
	g.Expect(err).NotTo(HaveOccurred())
	return fams
}

// sample is one series of a family: its labels and value.
type sample struct {
	labels map[string]string
	value  float64
}

func samples(f *dto.MetricFamily) []sample {
	var out []sample
	for _, m := range f.GetMetric() {
		s := sample{labels: map[string]string{}}
		for _, l := range m.GetLabel() {
			s.labels[l.GetName()] = l.GetValue()
		}
		switch f.GetType() {
		case dto.MetricType_COUNTER:
			s.value = m.GetCounter().GetValue()
		default:
			s.value = m.GetGauge().GetValue()
		}
		out = append(out, s)
	}
	return out
}

// The gateway's /metrics after known pool events: every family with its type, labels and value.
func TestGatewayMetricsAfterEvents(t *testing.T) {
	build := buildinfo.Labels{Version: "v9.8.7", Revision: "abcdef012345", GoVersion: "go1.26.1"}
	handshake := time.Unix(1_700_000_000, 500_000_000)
	p := newPool(1, 1)
	mk := func(node string, i byte) *backend {
		var k Key
		k[0] = i
		b := &backend{node: node, pub: k, conns: map[*proxied]struct{}{}}
		p.backends[k] = b
		return b
	}
	m0, m1 := mk("cp-0", 1), mk("cp-1", 2)
	k0, k1 := m0.pub.String(), m1.pub.String()
	now := time.Now()
	p.healthResult(m0, nil, now)                       // cp-0 healthy
	p.healthResult(m1, errors.New("readyz: 500"), now) // cp-1 not
	g := NewWithT(t)
	g.Expect(p.attach(m0, &proxied{})).To(BeTrue()) // one open connection to cp-0
	closed := &proxied{}
	g.Expect(p.attach(m0, closed)).To(BeTrue()) // and one served and closed
	p.detach(m0, closed)
	p.dialFailed(m1, errors.New("connection refused")) // one failed dial to cp-1
	p.quiesce("cp-1", true, time.Minute, now)          // cp-1 out of rotation
	status := func() wgapi.Status {
		st := wgapi.Status{Name: "gw-a", PublicKey: "gwkey", TunnelAddress: "fd00::1", Members: p.status()}
		for i := range st.Members {
			if st.Members[i].Node == "cp-0" { // cp-1 never completed a handshake
				st.Members[i].Handshake = handshake
			}
		}
		return st
	}

	for _, tc := range []struct {
		name   string
		build  buildinfo.Labels
		family string
		typ    dto.MetricType
		want   []sample // nil: the family is absent
	}{
		{"build", build, "caplb_build_info", dto.MetricType_GAUGE, []sample{
			{map[string]string{"version": "v9.8.7", "revision": "abcdef012345", "goversion": "go1.26.1"}, 1}}},
		{"no build when unknown", buildinfo.Labels{}, "caplb_build_info", 0, nil},
		{"gateway info", build, "caplb_wireguard_gateway_info", dto.MetricType_GAUGE, []sample{
			{map[string]string{"gateway": "gw-a", "public_key": "gwkey", "tunnel_address": "fd00::1"}, 1}}},
		{"open connections by state", build, "caplb_wireguard_member_connections", dto.MetricType_GAUGE, []sample{
			{map[string]string{"node": "cp-0", "public_key": k0, "state": "active"}, 1},
			{map[string]string{"node": "cp-1", "public_key": k1, "state": "quiesced"}, 0}}},
		{"health", build, "caplb_wireguard_member_healthy", dto.MetricType_GAUGE, []sample{
			{map[string]string{"node": "cp-0", "public_key": k0}, 1},
			{map[string]string{"node": "cp-1", "public_key": k1}, 0}}},
		{"served", build, "caplb_wireguard_member_connections_total", dto.MetricType_COUNTER, []sample{
			{map[string]string{"node": "cp-0", "public_key": k0}, 2},
			{map[string]string{"node": "cp-1", "public_key": k1}, 0}}},
		{"dial failures", build, "caplb_wireguard_member_dial_failures_total", dto.MetricType_COUNTER, []sample{
			{map[string]string{"node": "cp-0", "public_key": k0}, 0},
			{map[string]string{"node": "cp-1", "public_key": k1}, 1}}},
		{"handshake only once there was one", build, "caplb_wireguard_member_last_handshake_timestamp_seconds", dto.MetricType_GAUGE, []sample{
			{map[string]string{"node": "cp-0", "public_key": k0}, 1_700_000_000.5}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			h, err := metricsHandler(status, tc.build)
			g.Expect(err).NotTo(HaveOccurred())
			fams := scrapeMetrics(g, h)
			if tc.want == nil {
				g.Expect(fams).NotTo(HaveKey(tc.family))
				return
			}
			g.Expect(fams).To(HaveKey(tc.family))
			g.Expect(fams[tc.family].GetType()).To(Equal(tc.typ))
			g.Expect(samples(fams[tc.family])).To(ConsistOf(tc.want))
		})
	}
}

// A gateway without members still says it is there: the info series is what the "gateway down"
// alert and the dashboard select gateway targets by.
func TestGatewayMetricsWithoutMembers(t *testing.T) {
	g := NewWithT(t)
	h, err := metricsHandler(func() wgapi.Status { return wgapi.Status{Name: "gw-empty"} }, buildinfo.Labels{})
	g.Expect(err).NotTo(HaveOccurred())
	fams := scrapeMetrics(g, h)
	g.Expect(fams).To(HaveKey("caplb_wireguard_gateway_info"))
	g.Expect(fams).NotTo(HaveKey("caplb_wireguard_member_healthy"))
}

// --metrics-listen is checked before anything starts, and otherwise overrides the configuration
// (a gateway run --from-secret has a rendered configuration without a metrics listener).
func TestGatewayMetricsListenFlag(t *testing.T) {
	g := NewWithT(t)
	cmd := NewGatewayCommand()
	cmd.SetArgs([]string{"--metrics-listen", "7477", "--config", "/nonexistent"})
	cmd.SilenceUsage, cmd.SilenceErrors = true, true
	g.Expect(cmd.Execute()).To(MatchError(ContainSubstring(`--metrics-listen "7477"`)))

	gw := &Gateway{metricsListen: ":1"}
	WithMetricsListen("127.0.0.1:7477")(gw)
	g.Expect(gw.metricsListen).To(Equal("127.0.0.1:7477"))
}
