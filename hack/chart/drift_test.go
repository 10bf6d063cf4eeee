package chart

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/caplb/caplb/hack/release"
	"github.com/google/go-cmp/cmp"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// TestCopiesEqualSources: the chart carries copies of files it cannot reach outside its directory
// (helm packages only the chart's own files); each must equal its source byte for byte.
func TestCopiesEqualSources(t *testing.T) {
	g := NewWithT(t)
	sources, err := filepath.Glob(filepath.Join(root, "config", "crd", "bases", "*.yaml"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(sources).NotTo(BeEmpty())
	copies, err := filepath.Glob(filepath.Join(root, Dir, "files", "crds", "*.yaml"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(len(copies)).To(Equal(len(sources)), "files/crds holds one copy per CRD of config/crd/bases")
	pairs := map[string]string{filepath.Join(root, "config", "monitoring", "alerts.yaml"): filepath.Join(root, Dir, "files", "alerts.yaml")}
	for _, src := range sources {
		pairs[src] = filepath.Join(root, Dir, "files", "crds", filepath.Base(src))
	}
	for src, cp := range pairs {
		want, err := os.ReadFile(src)
		g.Expect(err).NotTo(HaveOccurred())
		got, err := os.ReadFile(cp)
		g.Expect(err).NotTo(HaveOccurred(), "copy %s missing: cp %s %s", cp, src, cp)
		g.Expect(string(got)).To(Equal(string(want)), "%s differs from %s: cp %s %s", cp, src, src, cp)
	}
}

// TestChartMatchesKustomizeRelease renders the chart (cert-manager on, as the release has it) and
// the release's caplb-standalone.yaml (config/standalone through kustomize's Go API, as `make
// release` does) and compares what must not drift: every object of the release is in the chart,
// RBAC rules and bindings, CRD specs, the manager's pod spec (args, ports, probes, security), the
// webhook and its Service, cert-manager's objects.
func TestChartMatchesKustomizeRelease(t *testing.T) {
	g := NewWithT(t)
	c := load(t)
	version := c.Metadata.AppVersion
	manifest, err := release.StandaloneComponents(release.Options{Root: root, Version: version,
		ManagerImage: "ghcr.io/caplb/caplb-manager:" + version, AgentImage: "ghcr.io/caplb/caplb-agent:" + version})
	g.Expect(err).NotTo(HaveOccurred())
	kobjs, err := Decode(string(manifest))
	g.Expect(err).NotTo(HaveOccurred())
	cobjs, err := Render(c, ns, values("webhook: {certManager: {enabled: true}}"))
	g.Expect(err).NotTo(HaveOccurred())
	chartIdx := Index(cobjs)
	for _, k := range kobjs {
		if k.GetKind() == "Namespace" {
			continue // helm install --create-namespace makes it
		}
		key := Key(k)
		if k.GetKind() == "Deployment" {
			// The chart says when to pull the image; the release leaves it to the default.
			setContainer(t, k, "imagePullPolicy", "IfNotPresent")
		}
		ch := chartIdx[key]
		if !g.Expect(ch).NotTo(BeNil(), "the release has %s, the chart does not", key) {
			continue
		}
		for _, path := range comparedFields(k.GetKind()) {
			want, _, _ := unstructured.NestedFieldNoCopy(k.Object, path...)
			got, _, _ := unstructured.NestedFieldNoCopy(ch.Object, path...)
			g.Expect(cmp.Diff(want, got)).To(BeEmpty(), "%s %v: the chart (+) differs from the release (-)", key, path)
		}
		for name, value := range k.GetLabels() {
			g.Expect(ch.GetLabels()).To(HaveKeyWithValue(name, value), "%s: the release's labels", key)
		}
		for name, value := range k.GetAnnotations() {
			g.Expect(ch.GetAnnotations()).To(HaveKeyWithValue(name, value), "%s: the release's annotations", key)
		}
	}
}

// comparedFields lists, per kind, the fields that must be equal in the chart and the release.
func comparedFields(kind string) [][]string {
	switch kind {
	case "ClusterRole", "Role":
		return [][]string{{"rules"}}
	case "ClusterRoleBinding", "RoleBinding":
		return [][]string{{"roleRef"}, {"subjects"}}
	case "Deployment":
		return [][]string{{"spec", "selector"}, {"spec", "replicas"}, {"spec", "template", "metadata", "labels"}, {"spec", "template", "spec"}}
	case "ValidatingWebhookConfiguration":
		return [][]string{{"webhooks"}}
	case "CustomResourceDefinition", "Service", "Issuer", "Certificate":
		return [][]string{{"spec"}}
	}
	return nil
}

// TestOptionalPartsMatchTheirManifests: the monitoring objects equal config/monitoring/operator's
// and the agent's pod spec equals config/agent/daemonset.yaml's.
func TestOptionalPartsMatchTheirManifests(t *testing.T) {
	g := NewWithT(t)
	c := load(t)
	cobjs, err := Render(c, ns, chartutilMerge(values(`
metrics: {serviceMonitor: {enabled: true}, prometheusRule: {enabled: true}, podMonitor: {enabled: true}}
agent: {config: {admin: {listen: "node-address:7473"}}}`), agentValues()))
	g.Expect(err).NotTo(HaveOccurred())
	idx := Index(cobjs)
	for file, key := range map[string]string{
		"config/monitoring/operator/servicemonitor.yaml":          "ServiceMonitor/" + ns + "/caplb-controller-manager",
		"config/monitoring/operator/prometheusrule.yaml":          "PrometheusRule/" + ns + "/caplb",
		"config/monitoring/operator/manager-metrics-service.yaml": "Service/" + ns + "/caplb-controller-manager-metrics",
		"config/agent/daemonset.yaml":                             "DaemonSet/" + ns + "/caplb-agent",
		"config/monitoring/operator/podmonitor.yaml":              "PodMonitor/" + ns + "/caplb-agent",
	} {
		want := readObject(t, file)
		got := idx[key]
		if !g.Expect(got).NotTo(BeNil(), key) {
			continue
		}
		path := []string{"spec"}
		if want.GetKind() == "PodMonitor" {
			// The chart's agents run in its release namespace, not kube-system.
			g.Expect(unstructured.SetNestedStringSlice(want.Object, []string{ns}, "spec", "namespaceSelector", "matchNames")).To(Succeed())
		}
		if want.GetKind() == "DaemonSet" {
			path = []string{"spec", "template", "spec"}
			// The chart pins the image to its appVersion and says when to pull it.
			setContainer(t, want, "image", "ghcr.io/caplb/caplb-agent:"+c.Metadata.AppVersion)
			setContainer(t, want, "imagePullPolicy", "IfNotPresent")
			// ... and probes the admin listener where agent.config.admin.listen puts it.
			setContainer(t, want, "livenessProbe", map[string]any{"periodSeconds": float64(10),
				"httpGet": map[string]any{"port": float64(7473), "path": "/healthz"}})
		}
		w, _, _ := unstructured.NestedFieldNoCopy(want.Object, path...)
		gotField, _, _ := unstructured.NestedFieldNoCopy(got.Object, path...)
		g.Expect(cmp.Diff(w, gotField)).To(BeEmpty(), "%s differs from %s at %v (chart +, file -)", key, file, path)
	}
}

func readObject(t *testing.T, file string) *unstructured.Unstructured {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, file))
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	m := map[string]any{}
	NewWithT(t).Expect(yaml.Unmarshal(b, &m)).To(Succeed())
	return &unstructured.Unstructured{Object: m}
}

func setContainer(t *testing.T, o *unstructured.Unstructured, field string, value any) {
	t.Helper()
	cs, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
	cs[0].(map[string]any)[field] = value
	NewWithT(t).Expect(unstructured.SetNestedSlice(o.Object, cs, "spec", "template", "spec", "containers")).To(Succeed())
}
