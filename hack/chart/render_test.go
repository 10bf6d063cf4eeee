package chart

import (
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"path/filepath"
	"strings"
	"testing"

	agentv1 "github.com/caplb/caplb/api/agent/v1alpha1"
	. "github.com/onsi/gomega"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// root is the repository root, from this package's directory.
var root = filepath.Join("..", "..")

const ns = "caplb-system"

// agentValues turns the agent on with a three-node ARP configuration.
func agentValues() map[string]any {
	return values(`
agent:
  enabled: true
  config:
    vips: ["192.0.2.10"]
    members:
    - {name: cp-1, address: 192.0.2.11}
    - {name: cp-2, address: 192.0.2.12}
    - {name: cp-3, address: 192.0.2.13}
`)
}

func values(s string) map[string]any {
	m := map[string]any{}
	if err := yaml.Unmarshal([]byte(s), &m); err != nil {
		panic(err)
	}
	return m
}

func load(t *testing.T) *chart.Chart {
	t.Helper()
	c, err := Load(root)
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	return c
}

func TestLint(t *testing.T) {
	for name, vals := range map[string]map[string]any{"defaults": nil, "agent": agentValues()} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			kv, err := chartutil.ParseKubeVersion(KubeVersion)
			g.Expect(err).NotTo(HaveOccurred())
			l := lint.AllWithKubeVersion(filepath.Join(root, Dir), vals, ns, kv)
			var bad []string
			for _, m := range l.Messages {
				// INFO (e.g. "icon is recommended") is advice; a warning or error fails.
				if m.Severity >= support.WarningSev {
					bad = append(bad, m.Error())
				}
			}
			g.Expect(bad).To(BeEmpty())
		})
	}
}

// TestTemplateMatrix renders each combination of the optional parts and checks which objects come
// out and that every image is pinned to the chart's appVersion.
func TestTemplateMatrix(t *testing.T) {
	c := load(t)
	always := []string{"CustomResourceDefinition//loadbalancers.loadbalancer.cluster.x-k8s.io",
		"CustomResourceDefinition//loadbalancerclasses.loadbalancer.cluster.x-k8s.io",
		"Deployment/" + ns + "/caplb-controller-manager", "ClusterRole//caplb-manager",
		"ClusterRole//caplb-manager-node-targets", "Service/" + ns + "/caplb-controller-manager-metrics"}
	for _, tc := range []struct {
		name    string
		values  string
		want    []string
		notWant []string
		args    []string
	}{
		{name: "defaults", want: append(always, "Secret/"+ns+"/caplb-webhook-service-cert", "ValidatingWebhookConfiguration//caplb-validating-webhook-configuration"),
			notWant: []string{"Certificate/" + ns + "/caplb-serving-cert", "DaemonSet/" + ns + "/caplb-agent", "ServiceMonitor/" + ns + "/caplb-controller-manager", "PrometheusRule/" + ns + "/caplb"},
			args:    []string{"--webhook-port=9443", "--node-targets-namespace=" + ns}},
		{name: "cert-manager", values: "webhook: {certManager: {enabled: true}}",
			want:    append(always, "Certificate/"+ns+"/caplb-serving-cert", "Issuer/"+ns+"/caplb-selfsigned-issuer"),
			notWant: []string{"Secret/" + ns + "/caplb-webhook-service-cert"}},
		{name: "webhook off", values: "webhook: {enabled: false}", want: always,
			notWant: []string{"ValidatingWebhookConfiguration//caplb-validating-webhook-configuration", "Service/" + ns + "/caplb-webhook-service"},
			args:    []string{"--webhook-port=0"}},
		{name: "monitoring", values: "metrics: {serviceMonitor: {enabled: true, labels: {release: kps}}, prometheusRule: {enabled: true}}",
			want: append(always, "ServiceMonitor/"+ns+"/caplb-controller-manager", "PrometheusRule/"+ns+"/caplb")},
		{name: "no node targets", values: "manager: {nodeTargets: {enabled: false}}",
			notWant: []string{"ClusterRole//caplb-manager-node-targets", "ClusterRoleBinding//caplb-manager-node-targets"}},
		{name: "agent only", values: "manager: {enabled: false}\ncrds: {enabled: false}",
			want:    []string{"DaemonSet/" + ns + "/caplb-agent", "ConfigMap/" + ns + "/caplb-agent", "Secret/" + ns + "/caplb-agent-gossip"},
			notWant: []string{"Deployment/" + ns + "/caplb-controller-manager", "CustomResourceDefinition//loadbalancers.loadbalancer.cluster.x-k8s.io", "ClusterRole//caplb-manager"}},
		{name: "agent with existing gossip secret", values: "agent: {gossip: {existingSecret: my-key}}",
			want: append(always, "DaemonSet/"+ns+"/caplb-agent"), notWant: []string{"Secret/" + ns + "/caplb-agent-gossip"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			vals := chartutil.CoalesceTables(values(tc.values), agentIfNamed(tc.name))
			objs, err := Render(c, ns, vals)
			g.Expect(err).NotTo(HaveOccurred())
			keys := Keys(objs)
			g.Expect(keys).To(ContainElements(tc.want))
			for _, k := range tc.notWant {
				g.Expect(keys).NotTo(ContainElement(k))
			}
			for _, img := range images(objs) {
				g.Expect(img).To(HaveSuffix(":"+c.Metadata.AppVersion), "every image is pinned to the chart's appVersion")
			}
			if len(tc.args) > 0 {
				g.Expect(managerArgs(t, objs)).To(ContainElements(tc.args))
			}
		})
	}
}

// TestAgentProbeFollowsAdminListen: the liveness probe reaches the admin listener wherever
// agent.config.admin.listen puts it (a probe on the wrong address would restart every agent).
func TestAgentProbeFollowsAdminListen(t *testing.T) {
	c := load(t)
	for listen, want := range map[string]map[string]any{
		"127.0.0.1:7473":    {"host": "127.0.0.1", "port": float64(7473), "path": "/healthz"},
		"node-address:9473": {"port": float64(9473), "path": "/healthz"},
	} {
		t.Run(listen, func(t *testing.T) {
			g := NewWithT(t)
			objs, err := Render(c, ns, chartutilMerge(values("agent: {config: {admin: {listen: \""+listen+"\"}}}"), agentValues()))
			g.Expect(err).NotTo(HaveOccurred())
			ds := Index(objs)["DaemonSet/"+ns+"/caplb-agent"]
			g.Expect(ds).NotTo(BeNil())
			cs, _, _ := unstructured.NestedSlice(ds.Object, "spec", "template", "spec", "containers")
			probe, _, _ := unstructured.NestedMap(cs[0].(map[string]any), "livenessProbe", "httpGet")
			g.Expect(probe).To(Equal(want))
		})
	}
}

// chartutilMerge merges b under a (a wins), as helm merges --values files.
func chartutilMerge(a, b map[string]any) map[string]any {
	return chartutil.CoalesceTables(a, b)
}

// agentIfNamed adds the agent values to the matrix rows about the agent.
func agentIfNamed(name string) map[string]any {
	if strings.Contains(name, "agent") {
		return agentValues()
	}
	return map[string]any{}
}

func images(objs []*unstructured.Unstructured) []string {
	var out []string
	for _, o := range objs {
		cs, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
		for _, c := range cs {
			out = append(out, c.(map[string]any)["image"].(string))
		}
	}
	return out
}

func managerArgs(t *testing.T, objs []*unstructured.Unstructured) []string {
	t.Helper()
	d := Index(objs)["Deployment/"+ns+"/caplb-controller-manager"]
	NewWithT(t).Expect(d).NotTo(BeNil())
	cs, _, _ := unstructured.NestedSlice(d.Object, "spec", "template", "spec", "containers")
	var args []string
	for _, a := range cs[0].(map[string]any)["args"].([]any) {
		args = append(args, a.(string))
	}
	return args
}

// TestSchemaRejectsBadValues: a bad value fails at install with a message naming the field.
func TestSchemaRejectsBadValues(t *testing.T) {
	c := load(t)
	for _, tc := range []struct{ name, values, field string }{
		{"typo at top level", "managr: {enabled: true}", "managr"},
		{"latest tag", "manager: {tag: latest}", "/manager/tag"},
		{"agent without vips", "agent: {enabled: true, config: {members: [{name: a, address: 192.0.2.1}]}}", "vips"},
		{"agent with empty members", "agent: {enabled: true, config: {vips: [192.0.2.10], members: []}}", "members"},
		{"bad mode", "agent: {config: {mode: l2}}", "/agent/config/mode"},
		{"vip not an address", "agent: {config: {vips: [api.example.com]}}", "/agent/config/vips/0"},
		{"unknown agent field", "agent: {config: {vip: 192.0.2.10}}", "vip"},
		{"bad duration", "agent: {config: {health: {interval: fast}}}", "/agent/config/health/interval"},
		{"port out of range", "agent: {config: {port: 70000}}", "/agent/config/port"},
		{"member without address", "agent: {config: {members: [{name: a}]}}", "address"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Render(c, ns, values(tc.values))
			NewWithT(t).Expect(err).To(MatchError(And(ContainSubstring("schema"), ContainSubstring(tc.field))))
		})
	}
}

// TestPodMonitorNeedsReachableAgents: a PodMonitor of agents listening on loopback would scrape
// nothing, so the chart refuses it and says what to set.
func TestPodMonitorNeedsReachableAgents(t *testing.T) {
	_, err := Render(load(t), ns, chartutilMerge(values("metrics: {podMonitor: {enabled: true}}"), agentValues()))
	NewWithT(t).Expect(err).To(MatchError(And(ContainSubstring("metrics.podMonitor.enabled"), ContainSubstring("agent.config.admin.listen"))))
}

// TestAgentConfigPassesAgentValidator: the rendered agent.yaml, as a pod named after a member reads
// it (nodeName = hostname), passes the agent's own parser and validator for ARP and BGP.
func TestAgentConfigPassesAgentValidator(t *testing.T) {
	c := load(t)
	bgp := chartutil.CoalesceTables(values(`
agent:
  config:
    mode: bgp
    bgp:
      asn: 64512
      peers:
      - {address: 192.0.2.1, asn: 64500}
`), agentValues())
	for name, vals := range map[string]map[string]any{"arp": agentValues(), "bgp": bgp} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			objs, err := Render(c, ns, vals)
			g.Expect(err).NotTo(HaveOccurred())
			cm := Index(objs)["ConfigMap/"+ns+"/caplb-agent"]
			g.Expect(cm).NotTo(BeNil())
			data, _, _ := unstructured.NestedString(cm.Object, "data", "agent.yaml")
			cfg, err := agentv1.Parse([]byte("nodeName: cp-2\n" + data))
			g.Expect(err).NotTo(HaveOccurred(), "rendered agent.yaml:\n%s", data)
			g.Expect(cfg.Mode).To(Equal(name))
			g.Expect(cfg.VIPs).To(Equal([]string{"192.0.2.10"}))
			g.Expect(cfg.Election.SecretKeyFile).To(Equal("/etc/caplb/gossip/gossip.key"), "the gossip Secret's mount")
		})
	}
}

// TestGeneratedWebhookCertificate: without cert-manager the Secret's certificate verifies against
// the webhook configuration's caBundle for the Service's DNS name.
func TestGeneratedWebhookCertificate(t *testing.T) {
	g := NewWithT(t)
	objs, err := Render(load(t), ns, nil)
	g.Expect(err).NotTo(HaveOccurred())
	idx := Index(objs)
	secret := idx["Secret/"+ns+"/caplb-webhook-service-cert"]
	vwc := idx["ValidatingWebhookConfiguration//caplb-validating-webhook-configuration"]
	g.Expect(secret).NotTo(BeNil())
	g.Expect(vwc).NotTo(BeNil())
	whs, _, _ := unstructured.NestedSlice(vwc.Object, "webhooks")
	caB64 := whs[0].(map[string]any)["clientConfig"].(map[string]any)["caBundle"].(string)
	crtB64, _, _ := unstructured.NestedString(secret.Object, "data", "tls.crt")
	pool := x509.NewCertPool()
	g.Expect(pool.AppendCertsFromPEM(b64(t, caB64))).To(BeTrue())
	block, _ := pem.Decode(b64(t, crtB64))
	g.Expect(block).NotTo(BeNil())
	cert, err := x509.ParseCertificate(block.Bytes)
	g.Expect(err).NotTo(HaveOccurred())
	_, err = cert.Verify(x509.VerifyOptions{Roots: pool, DNSName: "caplb-webhook-service." + ns + ".svc"})
	g.Expect(err).NotTo(HaveOccurred())
}

func b64(t *testing.T, s string) []byte {
	t.Helper()
	b, err := base64.StdEncoding.DecodeString(s)
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	return b
}
