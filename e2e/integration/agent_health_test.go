package integration

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	agentv1 "github.com/caplb/caplb/api/agent/v1alpha1"
	lbv1 "github.com/caplb/caplb/api/v1alpha1"
	"github.com/caplb/caplb/e2e/harness"
)

// An arp LoadBalancer fronting an ingress on 443 with a tcp member check is admitted, and the
// bootstrap Secret's agent file carries that check (and the agent accepts it); the static pod
// does not mount the API server's CA, which a worker may not have.
func testAgentHealthRendered(t *testing.T, s *suite) {
	g := NewWithT(t)
	f := newFixture(t, s, harness.ClusterOptions{})
	f.createLB(t, "10.40.0.50", 0, withARP("10.40.0.50"), func(lb *lbv1.LoadBalancer) {
		lb.Spec.TargetPort = 443
		lb.Spec.Backend.ARP.Agent.Health = &lbv1.AgentHealth{Type: lbv1.AgentHealthTCP, Port: 443}
	})
	var sec *corev1.Secret
	g.Eventually(func(g Gomega) {
		sec = f.bootstrapSecret(g)
		g.Expect(sec.Data).To(HaveKey(agentv1.SecretConfigKey))
	}, flowTimeout).Should(Succeed())
	raw := sec.Data[agentv1.SecretConfigKey]
	g.Expect(string(raw)).To(ContainSubstring("type: tcp"))
	cfg, err := agentv1.Parse(raw)
	g.Expect(err).NotTo(HaveOccurred(), "the agent must accept the rendered file:\n%s", raw)
	g.Expect(cfg.Port).To(Equal(443))
	g.Expect(cfg.Health.Type).To(Equal(agentv1.HealthTCP))
	g.Expect(cfg.Health.Address).To(Equal("127.0.0.1:443"))
	g.Expect(cfg.Health.CAFile).To(BeEmpty())
	pod := &corev1.Pod{}
	g.Expect(yaml.UnmarshalStrict(sec.Data[agentv1.SecretManifestKey], pod)).To(Succeed())
	for _, v := range pod.Spec.Volumes {
		g.Expect(v.HostPath.Path).NotTo(Equal("/etc/kubernetes/pki/ca.crt"), "the tcp check reads no CA")
	}

	// Switching to an http check re-renders the file.
	g.Expect(updateLBSpec(f.ctx, s, f.ns, "lb", func(spec map[string]any) {
		agent := spec["backend"].(map[string]any)["arp"].(map[string]any)["agent"].(map[string]any)
		agent["health"] = map[string]any{"type": "http", "port": int64(10254), "path": "/healthz"}
	})).To(Succeed())
	g.Eventually(func(g Gomega) {
		cfg, err := agentv1.Parse(f.bootstrapSecret(g).Data[agentv1.SecretConfigKey])
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(cfg.Health.Type).To(Equal(agentv1.HealthHTTP))
		g.Expect(cfg.Health.URL).To(Equal("http://127.0.0.1:10254/healthz"))
	}, flowTimeout, 200*time.Millisecond).Should(Succeed())
}

// Bad agent.health and agent.metrics input is refused by the API server with a message that names the field; the
// good forms the docs show are admitted.
func testAgentHealthAdmission(t *testing.T, s *suite) {
	ns, err := s.env.CreateNamespace(t.Context(), "agent-health")
	if err != nil {
		t.Fatal(err)
	}
	spec := func(agent map[string]any) map[string]any {
		sp := validSpec()
		sp["endpoint"] = map[string]any{"host": "10.0.0.10"}
		sp["backend"] = map[string]any{"arp": map[string]any{"agent": agent}}
		return sp
	}
	health := func(h map[string]any) map[string]any { return spec(map[string]any{"health": h}) }
	metrics := func(m map[string]any) map[string]any { return spec(map[string]any{"metrics": m}) }
	for _, tc := range []struct {
		name string
		spec map[string]any
		want []string
	}{
		{"type udp", health(map[string]any{"type": "udp"}),
			[]string{"spec.backend.arp.agent.health.type", `Unsupported value: "udp"`, `"https", "http", "tcp"`}},
		{"path on tcp", health(map[string]any{"type": "tcp", "path": "/healthz"}),
			[]string{"spec.backend.arp.agent.health.path", "applies only to type http or https: remove it for type tcp"}},
		{"path without a leading slash", health(map[string]any{"type": "http", "path": "healthz"}),
			[]string{"spec.backend.arp.agent.health.path", "must start with '/'"}},
		{"port 0", health(map[string]any{"type": "tcp", "port": int64(0)}),
			[]string{"spec.backend.arp.agent.health.port", "greater than or equal to 1"}},
		{"port 70000", health(map[string]any{"type": "tcp", "port": int64(70000)}),
			[]string{"spec.backend.arp.agent.health.port", "less than or equal to 65535"}},
		{"caFile with a tcp check", spec(map[string]any{"caFile": "/etc/kubernetes/pki/ca.crt", "health": map[string]any{"type": "tcp"}}),
			[]string{"spec.backend.arp.agent.caFile", "remove it for health type http or tcp"}},
		{"metrics on a hostname", metrics(map[string]any{"address": "node-1"}),
			[]string{"spec.backend.arp.agent.metrics.address", "must be an IP address", "remove it to bind the node's own address"}},
		{"metrics on loopback", metrics(map[string]any{"address": "127.0.0.1"}),
			[]string{"spec.backend.arp.agent.metrics.address", "not loopback (leave agent.metrics unset to keep 127.0.0.1)"}},
		{"metrics port 70000", metrics(map[string]any{"port": int64(70000)}),
			[]string{"spec.backend.arp.agent.metrics.port", "less than or equal to 65535"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			err := s.env.Client.Create(t.Context(), lbObject(ns, "bad", tc.spec), client.DryRunAll, client.FieldValidation("Strict"))
			g.Expect(err).To(HaveOccurred(), "the API server accepted it")
			g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%v", err)
			for _, w := range tc.want {
				g.Expect(err.Error()).To(ContainSubstring(w))
			}
			t.Logf("rejected: %v", err)
		})
	}
	for _, tc := range []struct {
		name string
		spec map[string]any
	}{
		{"tcp on 443", health(map[string]any{"type": "tcp", "port": int64(443)})},
		{"http with port and path", health(map[string]any{"type": "http", "port": int64(10254), "path": "/healthz?verbose"})},
		{"https on the defaults, with caFile", spec(map[string]any{"caFile": "/etc/kubernetes/pki/ca.crt", "health": map[string]any{"type": "https", "path": "/livez"}})},
		{"empty health", health(map[string]any{})},
		{"metrics on the node address", metrics(map[string]any{})},
		{"metrics on an address and port", metrics(map[string]any{"address": "fd00::11", "port": int64(9473)})},
		{"metrics on every address", metrics(map[string]any{"address": "0.0.0.0"})},
	} {
		t.Run("accepts "+tc.name, func(t *testing.T) {
			err := s.env.Client.Create(t.Context(), lbObject(ns, "good", tc.spec), client.DryRunAll, client.FieldValidation("Strict"))
			NewWithT(t).Expect(err).To(Succeed())
		})
	}
}
