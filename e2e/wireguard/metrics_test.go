//go:build linux

package wireguard_test

import (
	"runtime"
	"strings"
	"time"

	. "github.com/onsi/gomega"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/caplb/caplb/e2e/lab/wglab"
)

// expectGatewayMetrics scrapes the real gateway binary's /metrics after every member answered
// through it and parses it as Prometheus would: the build, the gateway, and per member its
// health, a WireGuard handshake through the NAT and the connections it served.
func expectGatewayMetrics(g Gomega, w *wglab.Lab, gw *wglab.Gateway, members int) {
	text, err := w.GatewayMetrics(gw)
	g.Expect(err).NotTo(HaveOccurred())
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(text))
	g.Expect(err).NotTo(HaveOccurred(), text)
	label := func(m *dto.Metric, name string) string {
		for _, l := range m.GetLabel() {
			if l.GetName() == name {
				return l.GetValue()
			}
		}
		return ""
	}
	g.Expect(fams).To(HaveKey("caplb_build_info"), text)
	g.Expect(label(fams["caplb_build_info"].GetMetric()[0], "goversion")).To(Equal(runtime.Version()))
	g.Expect(fams).To(HaveKey("caplb_wireguard_gateway_info"), text)
	g.Expect(label(fams["caplb_wireguard_gateway_info"].GetMetric()[0], "gateway")).To(Equal(gw.Name))
	for _, name := range []string{"caplb_wireguard_member_healthy", "caplb_wireguard_member_last_handshake_timestamp_seconds",
		"caplb_wireguard_member_connections_total"} {
		g.Expect(fams).To(HaveKey(name), text)
		g.Expect(fams[name].GetMetric()).To(HaveLen(members), name)
		for _, m := range fams[name].GetMetric() {
			node := label(m, "node")
			switch name {
			case "caplb_wireguard_member_healthy":
				g.Expect(m.GetGauge().GetValue()).To(Equal(1.0), node)
			case "caplb_wireguard_member_last_handshake_timestamp_seconds":
				g.Expect(time.Since(time.Unix(int64(m.GetGauge().GetValue()), 0))).To(BeNumerically("<", time.Minute), node)
			}
		}
	}
	served := 0.0
	for _, m := range fams["caplb_wireguard_member_connections_total"].GetMetric() {
		served += m.GetCounter().GetValue()
	}
	g.Expect(served).To(BeNumerically(">=", members), "every member answered a client")
}
