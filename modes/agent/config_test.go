package agent

import (
	"strings"
	"testing"
	"time"

	agentv1 "github.com/caplb/caplb/api/agent/v1alpha1"

	. "github.com/onsi/gomega"
	"sigs.k8s.io/yaml"
)

const validYAML = `
apiVersion: agent.loadbalancer.cluster.x-k8s.io/v1alpha1
kind: AgentConfiguration
nodeName: cp-1
vips: ["192.0.2.10", "2001:db8::10"]
members:
- {name: cp-1, address: 192.0.2.11}
- {name: cp-2, address: 192.0.2.12}
- {name: cp-3, address: 192.0.2.13}
health:
  caFile: /etc/kubernetes/pki/ca.crt
election:
  secretKeyFile: /etc/caplb/gossip.key
`

func TestParseDefaults(t *testing.T) {
	g := NewWithT(t)
	c, err := agentv1.Parse([]byte(validYAML))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(c.Mode).To(Equal(agentv1.ModeARP))
	g.Expect(c.Port).To(Equal(6443))
	g.Expect(c.Health.URL).To(Equal("https://127.0.0.1:6443/readyz"))
	g.Expect(c.Health.Interval.Duration).To(Equal(200 * time.Millisecond))
	g.Expect(c.Health.Rise).To(Equal(2))
	g.Expect(c.Election.Port).To(Equal(7946))
	g.Expect(c.Election.ProbeInterval.Duration).To(Equal(100 * time.Millisecond))
	g.Expect(c.Quiesce.Drain.Duration).To(Equal(500 * time.Millisecond))
	g.Expect(c.Admin.Listen).To(Equal("127.0.0.1:7473"))
	g.Expect(c.ParsedVIPs()).To(HaveLen(2))
	g.Expect(c.Digest()).To(HaveLen(8))
}

func TestParseErrorsNameTheField(t *testing.T) {
	cases := []struct {
		name, yaml string
		want       []string
	}{
		{"bad member address", strings.Replace(validYAML, "192.0.2.13", "10.0.0.x", 1),
			[]string{`members[2].address: "10.0.0.x" is not an IP address`}},
		{"unknown field", validYAML + "bogus: 1\n", []string{`unknown field "bogus"`}},
		{"bad mode", validYAML + "mode: vrrp\n", []string{`mode: "vrrp" is not a mode; use "arp" or "bgp"`}},
		{"bad vip", strings.Replace(validYAML, `"192.0.2.10"`, `"fe80::1"`, 1), []string{`vips[0]: "fe80::1" cannot be a VIP`}},
		{"broadcast vip", strings.Replace(validYAML, `"192.0.2.10"`, `"255.255.255.255"`, 1), []string{`vips[0]: "255.255.255.255" cannot be a VIP`}},
		{"IPv4-mapped vip", strings.Replace(validYAML, `"192.0.2.10"`, `"::ffff:192.0.2.10"`, 1), []string{`vips[0]: "::ffff:192.0.2.10" cannot be a VIP`}},
		{"multicast vip", strings.Replace(validYAML, `"192.0.2.10"`, `"224.0.0.18"`, 1), []string{`vips[0]: "224.0.0.18" cannot be a VIP`}},
		{"node not a member", strings.Replace(validYAML, "nodeName: cp-1", "nodeName: cp-9", 1),
			[]string{`nodeName: "cp-9" is not among members`}},
		{"duplicate member", strings.Replace(validYAML, "name: cp-3", "name: cp-2", 1), []string{`members[2].name: "cp-2" is listed twice`}},
		{"https without CA", strings.Replace(validYAML, "  caFile: /etc/kubernetes/pki/ca.crt", "  interval: 1s", 1),
			[]string{"health.caFile: is empty", "insecureSkipVerify: true"}},
		{"bad duration", validYAML + "quiesce: {drain: soon}\n", []string{`quiesce.drain: "soon" is not a duration`}},
		{"duration without a unit names the field", validYAML + "quiesce: {drain: 200}\n", []string{`quiesce.drain: 200 is not a duration; write it with a unit`}},
		{"nested duration", validYAML + "  probeInterval: fast\n", []string{`election.probeInterval: "fast" is not a duration`}},
		{"probe timeout too long", validYAML + "  probeTimeout: 200ms\n",
			[]string{"election.probeTimeout: 200ms must be shorter than election.probeInterval (100ms)"}},
		{"contact timeout too short", validYAML + "  contactTimeout: 150ms\n",
			[]string{"election.contactTimeout: 150ms is shorter than 2 x election.probeInterval (200ms)"}},
		{"contact timeout below three ping tries", validYAML + "  probeTimeout: 90ms\n  contactTimeout: 300ms\n",
			[]string{"election.contactTimeout: 300ms is shorter than election.probeInterval + 3 x election.probeTimeout (370ms)"}},
		{"arp gossip needs a key", strings.Replace(validYAML, "  secretKeyFile: /etc/caplb/gossip.key\n", "  port: 7946\n", 1),
			[]string{"election.secretKeyFile: is empty", "election.insecure: true"}},
		{"insecure and a key", validYAML + "  insecure: true\n", []string{"election.insecure: is set together with a key file"}},
		{"secondary key without a primary", strings.Replace(validYAML, "  secretKeyFile: /etc/caplb/gossip.key\n", "  secondaryKeyFiles: [/k]\n  insecure: true\n", 1),
			[]string{"election.secondaryKeyFiles: needs election.secretKeyFile"}},
		{"relative control socket", validYAML + "admin: {controlSocket: agent.sock}\n", []string{`admin.controlSocket: "agent.sock" is not an absolute path`}},
		{"bgp needs its section", validYAML + "mode: bgp\n", []string{"bgp: is required in bgp mode"}},
		{"bgp ipv6 vip without an ipv6 peer", validYAML + "mode: bgp\nbgp: {asn: 64512, peers: [{address: 192.0.2.1, asn: 64500}]}\n",
			[]string{"vips: bgp.peers: VIP 2001:db8::10 needs an IPv6 peer"}},
		{"busyDrain with spread", validYAML + "quiesce: {busyDrain: 10s}\narp: {loadBalancing: spread}\n",
			[]string{"quiesce.busyDrain: 10s cannot be used with arp.loadBalancing spread", "set quiesce.busyDrain to 0s or arp.loadBalancing to single"}},
		{"bgp flow sharing needs the gossip key", strings.NewReplacer("  secretKeyFile: /etc/caplb/gossip.key\n", "  insecure: true\n", `, "2001:db8::10"`, "").Replace(validYAML) +
			"mode: bgp\nbgp: {asn: 64512, peers: [{address: 192.0.2.1, asn: 64500}]}\n",
			[]string{"election.insecure: cannot carry bgp.flowSharing", "bgp.flowSharing: false"}},
		{"claimWhenSilent in bgp mode", validYAML + "mode: bgp\nbgp: {asn: 64512, peers: [{address: 192.0.2.1, asn: 64500}, {address: 2001:db8::1, asn: 64500}]}\narp: {claimWhenSilent: true}\n",
			[]string{"arp.claimWhenSilent: only the arp mode claims a VIP by ARP"}},
		{"several errors at once", "vips: []\nmembers: []\nport: 70000\n",
			[]string{"vips: is empty", "members: is empty", "port: 70000 is out of range"}},
	}
	for _, tc := range cases {
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

// TestExplicitZeros: 0 where it means something is kept; a missing field
// takes the default.
func TestExplicitZeros(t *testing.T) {
	g := NewWithT(t)
	c, err := agentv1.Parse([]byte(validYAML + "quiesce: {drain: 0s}\narp: {burstCount: 0}\n"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(c.Quiesce.Drain.Duration).To(BeZero())
	g.Expect(c.ARP.BurstCount).To(BeZero())
	c, err = agentv1.Parse([]byte(validYAML))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(c.Quiesce.Drain.Duration).To(Equal(500 * time.Millisecond))
	g.Expect(c.ARP.BurstCount).To(Equal(5))

	// A configuration rendered from the type (the manager, the lab) leaves
	// unset durations out, so they take their defaults rather than an
	// explicit 0.
	r := agentv1.New()
	r.NodeName, r.VIPs = "cp-1", []string{"192.0.2.10"}
	r.Members = []agentv1.MemberConfig{{Name: "cp-1", Address: "192.0.2.11"}}
	r.Health.InsecureSkipVerify, r.Election.Insecure = true, true
	b, err := yaml.Marshal(r)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(b)).NotTo(ContainSubstring("drain"))
	c, err = agentv1.Parse(b)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(c.Quiesce.Drain.Duration).To(Equal(500 * time.Millisecond))
	g.Expect(c.ARP.BurstCount).To(Equal(5))
}

func TestSampleConfigParses(t *testing.T) {
	g := NewWithT(t)
	_, err := agentv1.Load("../../config/agent/agent.yaml")
	g.Expect(err).NotTo(HaveOccurred())
}
