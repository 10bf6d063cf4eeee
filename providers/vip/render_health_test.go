package vip

import (
	"flag"
	"os"
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/yaml"

	agentv1 "github.com/caplb/caplb/api/agent/v1alpha1"
	lbv1 "github.com/caplb/caplb/api/v1alpha1"
)

var updateGolden = flag.Bool("update", false, "rewrite testdata/*.golden from the current rendering")

// goldenLBs are LoadBalancers without agent.health, whose rendering predates it.
func goldenLBs() map[string]*lbv1.LoadBalancer {
	k3s := arpLB()
	k3s.Spec.Backend.ARP.Agent = lbv1.AgentSpec{Flavor: FlavorK3s, CAFile: "/etc/ca.crt", Interface: "eth1"}
	return map[string]*lbv1.LoadBalancer{"arp": arpLB(), "arp-k3s": k3s, "bgp": bgpLB()}
}

// TestRenderWithoutHealthUnchanged: without agent.health the agent's file and static pod are
// byte for byte what caplb rendered before the field existed (testdata/*.golden were written by
// the rendering that predates it; the config files since gained only loadBalancer, the identity
// caplb_agent_info reports, which no agent behaviour reads), so existing nodes see no change.
func TestRenderWithoutHealthUnchanged(t *testing.T) {
	m := agentv1.Membership{Version: 2, Members: []agentv1.MemberConfig{{Name: "n1", Address: "10.0.0.1"}}}
	for name, lb := range goldenLBs() {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			cfg, err := marshalConfig(renderConfig(lb, renderInput{vip: "192.0.2.10", membership: m, passwords: map[int]bool{0: true}}))
			g.Expect(err).NotTo(HaveOccurred())
			man, err := renderManifest(lb, "img:1")
			g.Expect(err).NotTo(HaveOccurred())
			for file, got := range map[string][]byte{name + "-config.golden": cfg, name + "-manifest.golden": man} {
				p := filepath.Join("testdata", file)
				if *updateGolden {
					g.Expect(os.MkdirAll("testdata", 0o755)).To(Succeed())
					g.Expect(os.WriteFile(p, got, 0o644)).To(Succeed())
				}
				want, err := os.ReadFile(p)
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(string(got)).To(Equal(string(want)), file)
			}
		})
	}
}

func TestRenderedHealth(t *testing.T) {
	for _, tc := range []struct {
		name   string
		health *lbv1.AgentHealth
		want   agentv1.HealthConfig // after the agent's Parse: Type, URL, Address, CAFile, ServerName
		// caMounted: the static pod mounts the flavor's CA (only the https check reads it).
		caMounted bool
	}{
		{"unset", nil, agentv1.HealthConfig{Type: "https", URL: "https://127.0.0.1:6443/readyz",
			CAFile: "/etc/kubernetes/pki/ca.crt", ServerName: "kubernetes"}, true},
		{"https on another port and path", &lbv1.AgentHealth{Type: "https", Port: 8443, Path: "/livez"},
			agentv1.HealthConfig{Type: "https", URL: "https://127.0.0.1:8443/livez", CAFile: "/etc/kubernetes/pki/ca.crt", ServerName: "kubernetes"}, true},
		{"http defaults to the LoadBalancer's port and /healthz", &lbv1.AgentHealth{Type: "http"},
			agentv1.HealthConfig{Type: "http", URL: "http://127.0.0.1:6443/healthz"}, false},
		{"http port and path", &lbv1.AgentHealth{Type: "http", Port: 10254, Path: "/healthz?verbose"},
			agentv1.HealthConfig{Type: "http", URL: "http://127.0.0.1:10254/healthz?verbose"}, false},
		{"tcp defaults to the LoadBalancer's port", &lbv1.AgentHealth{Type: "tcp"},
			agentv1.HealthConfig{Type: "tcp", Address: "127.0.0.1:6443"}, false},
		{"tcp port", &lbv1.AgentHealth{Type: "tcp", Port: 443},
			agentv1.HealthConfig{Type: "tcp", Address: "127.0.0.1:443"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			lb := arpLB()
			lb.Spec.Backend.ARP.Agent.Health = tc.health
			c := renderConfig(lb, renderInput{vip: "192.0.2.10"})
			g.Expect(validateRendered(c)).To(Succeed())
			b, err := marshalConfig(c)
			g.Expect(err).NotTo(HaveOccurred())
			parsed, err := agentv1.Parse(b)
			g.Expect(err).NotTo(HaveOccurred(), "%s", b)
			h := parsed.Health
			g.Expect(agentv1.HealthConfig{Type: h.Type, URL: h.URL, Address: h.Address, CAFile: h.CAFile, ServerName: h.ServerName}).To(Equal(tc.want), "%s", b)

			man, err := renderManifest(lb, "img:1")
			g.Expect(err).NotTo(HaveOccurred())
			pod := &corev1.Pod{}
			g.Expect(yaml.UnmarshalStrict(man, pod)).To(Succeed())
			var paths []string
			for _, v := range pod.Spec.Volumes {
				paths = append(paths, v.HostPath.Path)
			}
			if tc.caMounted {
				g.Expect(paths).To(ContainElement("/etc/kubernetes/pki/ca.crt"))
			} else {
				g.Expect(paths).NotTo(ContainElement("/etc/kubernetes/pki/ca.crt"), "a worker may have no such file")
			}
		})
	}
}

// TestValidateHealth: the manager repeats the CRD's rules for objects stored before them.
func TestValidateHealth(t *testing.T) {
	ap := field.NewPath("spec", "backend", "arp", "agent")
	for _, tc := range []struct {
		name  string
		agent lbv1.AgentSpec
		want  []string
	}{
		{"unset", lbv1.AgentSpec{}, nil},
		{"tcp on a port", lbv1.AgentSpec{Health: &lbv1.AgentHealth{Type: "tcp", Port: 443}}, nil},
		{"unknown type", lbv1.AgentSpec{Health: &lbv1.AgentHealth{Type: "udp"}},
			[]string{`spec.backend.arp.agent.health.type: Unsupported value: "udp": supported values: "https", "http", "tcp"`}},
		{"path on tcp", lbv1.AgentSpec{Health: &lbv1.AgentHealth{Type: "tcp", Path: "/healthz"}},
			[]string{"spec.backend.arp.agent.health.path", "applies only to type http or https"}},
		{"path without a slash", lbv1.AgentSpec{Health: &lbv1.AgentHealth{Type: "http", Path: "healthz"}},
			[]string{"spec.backend.arp.agent.health.path", "must start with '/'"}},
		{"port out of range", lbv1.AgentSpec{Health: &lbv1.AgentHealth{Port: 70000}},
			[]string{"spec.backend.arp.agent.health.port", "1-65535"}},
		{"caFile with tcp", lbv1.AgentSpec{CAFile: "/ca.crt", Health: &lbv1.AgentHealth{Type: "tcp"}},
			[]string{"spec.backend.arp.agent.caFile", "remove it for health type tcp"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			errs := validateHealth(ap, tc.agent)
			if tc.want == nil {
				g.Expect(errs).To(BeEmpty())
				return
			}
			g.Expect(errs).NotTo(BeEmpty())
			for _, w := range tc.want {
				g.Expect(errs.ToAggregate().Error()).To(ContainSubstring(w))
			}
		})
	}
}
