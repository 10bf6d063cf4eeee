package agent

import (
	"strings"
	"testing"

	agentv1 "github.com/caplb/caplb/api/agent/v1alpha1"

	. "github.com/onsi/gomega"
)

// withHealth replaces validYAML's health section with the given lines (two-space indented).
func withHealth(lines ...string) string {
	h := "health:\n"
	for _, l := range lines {
		h += "  " + l + "\n"
	}
	return strings.Replace(validYAML, "health:\n  caFile: /etc/kubernetes/pki/ca.crt\n", h, 1)
}

func TestHealthDefaults(t *testing.T) {
	for _, tc := range []struct {
		name string
		yaml string
		want agentv1.HealthConfig // only Type, URL, Address, CAFile and ServerName are compared
	}{
		{"https by default, as before", validYAML, agentv1.HealthConfig{Type: "https",
			URL: "https://127.0.0.1:6443/readyz", CAFile: "/etc/kubernetes/pki/ca.crt", ServerName: "kubernetes"}},
		{"https on the configured port", withHealth("insecureSkipVerify: true") + "port: 8443\n",
			agentv1.HealthConfig{Type: "https", URL: "https://127.0.0.1:8443/readyz", ServerName: "kubernetes"}},
		{"an http:// URL without a type stays plain http", withHealth("url: http://127.0.0.1:10254/healthz"),
			agentv1.HealthConfig{Type: "http", URL: "http://127.0.0.1:10254/healthz"}},
		{"http default URL", withHealth("type: http") + "port: 80\n",
			agentv1.HealthConfig{Type: "http", URL: "http://127.0.0.1:80/healthz"}},
		{"tcp default address", withHealth("type: tcp") + "port: 443\n",
			agentv1.HealthConfig{Type: "tcp", Address: "127.0.0.1:443"}},
		{"tcp address given", withHealth("type: tcp", "address: 10.0.0.5:8443"),
			agentv1.HealthConfig{Type: "tcp", Address: "10.0.0.5:8443"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			c, err := agentv1.Parse([]byte(tc.yaml))
			g.Expect(err).NotTo(HaveOccurred())
			h := c.Health
			g.Expect(agentv1.HealthConfig{Type: h.Type, URL: h.URL, Address: h.Address, CAFile: h.CAFile, ServerName: h.ServerName}).To(Equal(tc.want))
			g.Expect(h.Interval.Duration).NotTo(BeZero())
			g.Expect(h.Timeout.Duration).NotTo(BeZero())
			g.Expect([]int{h.Rise, h.Fall}).To(Equal([]int{2, 2}), "rise and fall apply to every kind")
		})
	}
}

func TestHealthValidation(t *testing.T) {
	for _, tc := range []struct {
		name string
		yaml string
		want []string
	}{
		{"unknown type lists the supported ones", withHealth("type: udp"),
			[]string{`health.type: "udp" is not a health check type; use one of https, http, tcp`}},
		{"caFile on tcp", withHealth("type: tcp", "caFile: /etc/kubernetes/pki/ca.crt"),
			[]string{"health.caFile: is meaningless for type tcp; remove it"}},
		{"serverName and insecureSkipVerify on http", withHealth("type: http", "serverName: x", "insecureSkipVerify: true"),
			[]string{"health.serverName: is meaningless for type http; remove it", "health.insecureSkipVerify: is meaningless for type http; remove it"}},
		{"url on tcp", withHealth("type: tcp", "url: http://127.0.0.1/healthz"),
			[]string{"health.url: is meaningless for type tcp; remove it"}},
		{"address on http", withHealth("type: http", "address: 127.0.0.1:80"),
			[]string{"health.address: is meaningless for type http; remove it"}},
		{"https URL for type http", withHealth("type: http", "url: https://127.0.0.1/healthz"),
			[]string{`health.url: "https://127.0.0.1/healthz" is not an http:// URL; type http needs one`}},
		{"http URL for type https", withHealth("type: https", "url: http://127.0.0.1/readyz", "insecureSkipVerify: true"),
			[]string{`health.url: "http://127.0.0.1/readyz" is not an https:// URL`}},
		{"tcp address without a port", withHealth("type: tcp", "address: 127.0.0.1"),
			[]string{`health.address: "127.0.0.1" is not host:port`}},
		{"tcp address port out of range", withHealth("type: tcp", "address: 127.0.0.1:70000"),
			[]string{`health.address: "127.0.0.1:70000": port 70000 is out of range`}},
		{"https still needs a CA", withHealth("type: https"),
			[]string{"health.caFile: is empty"}},
		{"rise below 1", withHealth("type: tcp", "rise: -1"),
			[]string{"health.rise: -1 must be at least 1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			_, err := agentv1.Parse([]byte(tc.yaml))
			g.Expect(err).To(HaveOccurred())
			for _, w := range tc.want {
				g.Expect(err.Error()).To(ContainSubstring(w))
			}
		})
	}
}
