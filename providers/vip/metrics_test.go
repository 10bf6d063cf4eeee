package vip

import (
	"testing"

	. "github.com/onsi/gomega"

	agentv1 "github.com/caplb/caplb/api/agent/v1alpha1"
	lbv1 "github.com/caplb/caplb/api/v1alpha1"
)

// spec.backend.<kind>.agent.metrics becomes the agent's admin.listen; the rendered file passes
// the agent's own validation and, after its defaults, listens where the table says.
func TestRenderedAdminListen(t *testing.T) {
	m := agentv1.Membership{Version: 1, Members: []agentv1.MemberConfig{{Name: "n1", Address: "10.0.0.1"}}}
	for _, tc := range []struct {
		name    string
		bgp     bool
		metrics *lbv1.AgentMetrics
		want    string // admin.listen after the agent's defaults
	}{
		{"unset: loopback as before", false, nil, "127.0.0.1:7473"},
		{"empty: node address, default port", false, &lbv1.AgentMetrics{}, "node-address:7473"},
		{"port only", true, &lbv1.AgentMetrics{Port: 9473}, "node-address:9473"},
		{"every address", false, &lbv1.AgentMetrics{Address: "0.0.0.0"}, "0.0.0.0:7473"},
		{"IPv6 address and port", true, &lbv1.AgentMetrics{Address: "fd00::11", Port: 9100}, "[fd00::11]:9100"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			lb := arpLB()
			if tc.bgp {
				lb = bgpLB()
			}
			lb.Spec.Backend.VIP().Agent.Metrics = tc.metrics
			cfg, err := RenderAgentConfig(lb, "192.0.2.10", m, map[int]bool{0: true})
			g.Expect(err).NotTo(HaveOccurred())
			if tc.metrics == nil {
				g.Expect(cfg.Admin.Listen).To(BeEmpty(), "unset renders no admin.listen, so existing files do not change")
			}
			cfg.NodeName = "n1"
			cfg.Default()
			g.Expect(cfg.Admin.Listen).To(Equal(tc.want))
			g.Expect(cfg.Validate()).To(Succeed())
		})
	}
}

func TestValidateMetrics(t *testing.T) {
	b := NewARP(Options{AgentImage: "img:1"})
	for _, tc := range []struct {
		name    string
		metrics lbv1.AgentMetrics
		mutate  func(*lbv1.LoadBalancer)
		want    string // "" for valid
	}{
		{"defaults", lbv1.AgentMetrics{}, nil, ""},
		{"node IP and port", lbv1.AgentMetrics{Address: "10.0.0.11", Port: 9473}, nil, ""},
		{"every address", lbv1.AgentMetrics{Address: "::"}, nil, ""},
		{"hostname", lbv1.AgentMetrics{Address: "node-1"}, nil,
			"spec.backend.arp.agent.metrics.address: Invalid value: \"node-1\": must be an IP address"},
		{"loopback", lbv1.AgentMetrics{Address: "127.0.0.1"}, nil,
			"spec.backend.arp.agent.metrics.address: Invalid value: \"127.0.0.1\": must be a unicast node address Prometheus can reach"},
		{"multicast", lbv1.AgentMetrics{Address: "224.0.0.1"}, nil, "spec.backend.arp.agent.metrics.address"},
		{"port out of range", lbv1.AgentMetrics{Port: 70000}, nil, "spec.backend.arp.agent.metrics.port: Invalid value: 70000: must be a port"},
		{"API server's port", lbv1.AgentMetrics{Port: 6443}, nil,
			"spec.backend.arp.agent.metrics.port: Invalid value: 6443: is already used on the node by spec.targetPort"},
		{"election port", lbv1.AgentMetrics{Port: 7946}, nil, "by the agent's election port"},
		{"extra port", lbv1.AgentMetrics{Port: 9345}, func(lb *lbv1.LoadBalancer) { lb.Spec.Backend.ARP.ExtraPorts = []int32{9345} },
			"by spec.backend.arp.extraPorts[0]"},
		{"health port", lbv1.AgentMetrics{Port: 10256}, func(lb *lbv1.LoadBalancer) {
			lb.Spec.Backend.ARP.Agent.Health = &lbv1.AgentHealth{Type: lbv1.AgentHealthHTTP, Port: 10256}
		}, "by spec.backend.arp.agent.health.port"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			lb := arpLB()
			if tc.mutate != nil {
				tc.mutate(lb)
			}
			lb.Spec.Backend.ARP.Agent.Metrics = &tc.metrics
			errs := b.Validate(lb)
			if tc.want == "" {
				g.Expect(errs).To(BeEmpty())
				return
			}
			g.Expect(errs.ToAggregate()).To(MatchError(ContainSubstring(tc.want)))
		})
	}
	// On the bgp backend the paths name bgp.
	lb := bgpLB()
	lb.Spec.Backend.BGP.Agent.Metrics = &lbv1.AgentMetrics{Port: 9345}
	g := NewWithT(t)
	g.Expect(NewBGP(Options{AgentImage: "img:1"}).Validate(lb).ToAggregate()).To(MatchError(ContainSubstring(
		"spec.backend.bgp.agent.metrics.port: Invalid value: 9345: is already used on the node by spec.backend.bgp.extraPorts[0]")))
}
