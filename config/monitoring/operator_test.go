package monitoring

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"

	lbv1 "github.com/caplb/caplb/api/v1alpha1"
	"github.com/caplb/caplb/providers/vip"
)

var updateRule = flag.Bool("update", false, "rewrite operator/prometheusrule.yaml from alerts.yaml")

// The Prometheus Operator's kinds as far as caplb's manifests use them. The operator's own Go
// types (github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring) would move this
// module to k8s.io v0.37 and controller-runtime v0.25, so they are checked in
// config/monitoring/ruletest, a module of its own; here a strict decode into these structs
// catches a misspelt or misplaced field all the same.
type objectMeta struct {
	Name      string            `json:"name"`
	Namespace string            `json:"namespace"`
	Labels    map[string]string `json:"labels,omitempty"`
}

type labelSelector struct {
	MatchLabels map[string]string `json:"matchLabels"`
}

type namespaceSelector struct {
	MatchNames []string `json:"matchNames"`
}

type relabeling struct {
	SourceLabels []string `json:"sourceLabels,omitempty"`
	TargetLabel  string   `json:"targetLabel,omitempty"`
	Action       string   `json:"action,omitempty"`
}

type scrapeEndpoint struct {
	Port        string       `json:"port,omitempty"`
	PortNumber  int32        `json:"portNumber,omitempty"`
	Path        string       `json:"path"`
	Scheme      string       `json:"scheme"`
	Interval    string       `json:"interval"`
	Relabelings []relabeling `json:"relabelings,omitempty"`
	// The manager's HTTPS --diagnostics-address: Prometheus's own token, the self-signed certificate.
	BearerTokenFile string `json:"bearerTokenFile,omitempty"`
	TLSConfig       *struct {
		InsecureSkipVerify bool `json:"insecureSkipVerify"`
	} `json:"tlsConfig,omitempty"`
}

type serviceMonitor struct {
	APIVersion string     `json:"apiVersion"`
	Kind       string     `json:"kind"`
	Metadata   objectMeta `json:"metadata"`
	Spec       struct {
		Selector  labelSelector    `json:"selector"`
		Endpoints []scrapeEndpoint `json:"endpoints"`
	} `json:"spec"`
}

type podMonitor struct {
	APIVersion string     `json:"apiVersion"`
	Kind       string     `json:"kind"`
	Metadata   objectMeta `json:"metadata"`
	Spec       struct {
		Selector            labelSelector     `json:"selector"`
		NamespaceSelector   namespaceSelector `json:"namespaceSelector"`
		PodMetricsEndpoints []scrapeEndpoint  `json:"podMetricsEndpoints"`
	} `json:"spec"`
}

type prometheusRule struct {
	APIVersion string     `json:"apiVersion"`
	Kind       string     `json:"kind"`
	Metadata   objectMeta `json:"metadata"`
	Spec       rules      `json:"spec"`
}

// operatorObjects builds config/monitoring/operator with kustomize, as `kubectl apply -k` would,
// and returns each object's YAML by kind.
func operatorObjects(g Gomega) map[string][]byte {
	rm, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), "operator")
	g.Expect(err).NotTo(HaveOccurred())
	out := map[string][]byte{}
	for _, r := range rm.Resources() {
		b, err := r.AsYAML()
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(out).NotTo(HaveKey(r.GetKind()), "one object of each kind")
		out[r.GetKind()] = b
	}
	g.Expect(out).To(HaveLen(4))
	return out
}

// renderPrometheusRule is operator/prometheusrule.yaml: alerts.yaml's groups, verbatim (comments
// included), as a PrometheusRule's spec.
func renderPrometheusRule(alerts []byte) (string, error) {
	_, groups, ok := strings.Cut(string(alerts), "\ngroups:\n")
	if !ok {
		return "", os.ErrInvalid
	}
	var b strings.Builder
	b.WriteString(`# Generated from ../alerts.yaml: go test ./config/monitoring -run TestPrometheusRuleIsAlertsYAML -update
# Do not edit; change alerts.yaml (the test fails while the two differ). The Prometheus Operator's
# Prometheus loads rules its spec.ruleSelector matches: add the labels yours selects (with
# kube-prometheus-stack, release: <its release name>) through a kustomize patch.
apiVersion: monitoring.coreos.com/v1
kind: PrometheusRule
metadata:
  name: caplb
  namespace: caplb-system
  labels:
    app.kubernetes.io/name: caplb
spec:
  groups:
`)
	for line := range strings.Lines(groups) {
		if strings.TrimSpace(line) == "" {
			b.WriteString(line)
			continue
		}
		b.WriteString("  " + line)
	}
	return b.String(), nil
}

// The PrometheusRule carries exactly alerts.yaml's groups, so the rule file and the operator's
// copy cannot drift.
func TestPrometheusRuleIsAlertsYAML(t *testing.T) {
	g := NewWithT(t)
	alerts, err := os.ReadFile("alerts.yaml")
	g.Expect(err).NotTo(HaveOccurred())
	want, err := renderPrometheusRule(alerts)
	g.Expect(err).NotTo(HaveOccurred())
	path := filepath.Join("operator", "prometheusrule.yaml")
	if *updateRule {
		g.Expect(os.WriteFile(path, []byte(want), 0o644)).To(Succeed())
	}
	got, err := os.ReadFile(path)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(got)).To(Equal(want), "%s differs from alerts.yaml: go test ./config/monitoring -run TestPrometheusRuleIsAlertsYAML -update", path)

	var pr prometheusRule
	g.Expect(yaml.UnmarshalStrict(got, &pr)).To(Succeed())
	var r rules
	g.Expect(yaml.UnmarshalStrict(alerts, &r)).To(Succeed())
	g.Expect(pr.Spec).To(Equal(r))
	g.Expect(pr.Spec.Groups).NotTo(BeEmpty())
}

// The ServiceMonitor reaches the manager: its Service selects the Deployment's pods and targets
// their metrics port, and the ServiceMonitor selects that Service by a port it has.
func TestServiceMonitorScrapesTheManager(t *testing.T) {
	g := NewWithT(t)
	objs := operatorObjects(g)
	var svc corev1.Service
	g.Expect(yaml.UnmarshalStrict(objs["Service"], &svc)).To(Succeed())
	var sm serviceMonitor
	g.Expect(yaml.UnmarshalStrict(objs["ServiceMonitor"], &sm)).To(Succeed())
	g.Expect(sm.APIVersion).To(Equal("monitoring.coreos.com/v1"))

	manifest, err := os.ReadFile(filepath.Join("..", "manager", "manager.yaml"))
	g.Expect(err).NotTo(HaveOccurred())
	var d appsv1.Deployment
	g.Expect(yaml.UnmarshalStrict(manifest, &d)).To(Succeed())
	g.Expect(d.Spec.Template.Labels).To(HaveKeyWithValue("control-plane", "caplb-controller-manager"))
	for k, v := range svc.Spec.Selector {
		g.Expect(d.Spec.Template.Labels).To(HaveKeyWithValue(k, v), "the Service selects the manager's pods")
	}
	g.Expect(svc.Namespace).To(Equal(d.Namespace))
	g.Expect(sm.Metadata.Namespace).To(Equal(svc.Namespace), "a ServiceMonitor without namespaceSelector looks in its own namespace")
	var containerPorts []string
	for _, p := range d.Spec.Template.Spec.Containers[0].Ports {
		containerPorts = append(containerPorts, p.Name)
	}
	g.Expect(svc.Spec.Ports).To(HaveLen(1))
	g.Expect(containerPorts).To(ContainElement(svc.Spec.Ports[0].TargetPort.StrVal))
	for k, v := range sm.Spec.Selector.MatchLabels {
		g.Expect(svc.Labels).To(HaveKeyWithValue(k, v), "the ServiceMonitor selects the Service")
	}
	g.Expect(sm.Spec.Endpoints).To(HaveLen(1))
	g.Expect(sm.Spec.Endpoints[0].Port).To(Equal(svc.Spec.Ports[0].Name))
	g.Expect(sm.Spec.Endpoints[0].Path).To(Equal("/metrics"))
}

// The PodMonitor selects the agent pods however they are deployed (the manager's rendered static
// pod, config/agent's static pod and DaemonSet) on the port agent.metrics defaults to.
func TestPodMonitorScrapesTheAgents(t *testing.T) {
	g := NewWithT(t)
	var pm podMonitor
	g.Expect(yaml.UnmarshalStrict(operatorObjects(g)["PodMonitor"], &pm)).To(Succeed())
	g.Expect(pm.APIVersion).To(Equal("monitoring.coreos.com/v1"))
	g.Expect(pm.Spec.PodMetricsEndpoints).To(HaveLen(1))
	ep := pm.Spec.PodMetricsEndpoints[0]
	g.Expect(ep.PortNumber).To(Equal(lbv1.DefaultAgentMetricsPort))
	g.Expect(ep.Path).To(Equal("/metrics"))

	rendered, err := vip.AgentPod{Component: "arp", Image: "caplb-agent:test"}.Render()
	g.Expect(err).NotTo(HaveOccurred())
	var pod corev1.Pod
	g.Expect(yaml.UnmarshalStrict(rendered, &pod)).To(Succeed())
	pods := map[string]corev1.Pod{"rendered static pod": pod}
	staticPod, err := os.ReadFile(filepath.Join("..", "agent", "static-pod.yaml"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(yaml.Unmarshal(staticPod, &pod)).To(Succeed())
	pods["config/agent/static-pod.yaml"] = pod
	ds, err := os.ReadFile(filepath.Join("..", "agent", "daemonset.yaml"))
	g.Expect(err).NotTo(HaveOccurred())
	var d appsv1.DaemonSet
	g.Expect(yaml.Unmarshal(ds, &d)).To(Succeed())
	dsPod := corev1.Pod{ObjectMeta: d.Spec.Template.ObjectMeta}
	dsPod.Namespace = d.Namespace
	pods["config/agent/daemonset.yaml"] = dsPod

	for where, p := range pods {
		g.Expect(pm.Spec.NamespaceSelector.MatchNames).To(ContainElement(p.Namespace), where)
		for k, v := range pm.Spec.Selector.MatchLabels {
			g.Expect(p.Labels).To(HaveKeyWithValue(k, v), "the PodMonitor selects the agent of %s", where)
		}
	}
}
