package controllers_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	lbv1 "github.com/caplb/caplb/api/v1alpha1"
	"github.com/caplb/caplb/controllers"
	"github.com/caplb/caplb/e2e/envtest"
)

// testControlPlaneCRD is a control-plane kind that implements the proposal's contract:
// spec.loadBalancerRef names the LoadBalancer, spec.controlPlaneEndpoint receives its endpoint.
const testControlPlaneCRD = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: testcontrolplanes.controlplane.cluster.x-k8s.io
  labels:
    cluster.x-k8s.io/v1beta2: v1beta2
spec:
  group: controlplane.cluster.x-k8s.io
  names: {kind: TestControlPlane, listKind: TestControlPlaneList, plural: testcontrolplanes, singular: testcontrolplane}
  scope: Namespaced
  versions:
  - name: v1beta2
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              loadBalancerRef:
                type: object
                properties: {apiGroup: {type: string}, kind: {type: string}, name: {type: string}}
              controlPlaneEndpoint:
                type: object
                properties: {host: {type: string}, port: {type: integer, format: int32}}
`

// TestSmokeRealAPIServer runs Setup's controller against a real kube-apiserver: the CRD's
// validation, publication to the Cluster and to a control plane with spec.loadBalancerRef,
// hooks, a disabled member, events, metrics, and deletion. The integration suite proper
// (e2e/integration) runs CAPI's reconcilers too.
func TestSmokeRealAPIServer(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a kube-apiserver")
	}
	if _, err := envtest.BinaryDir(); err != nil {
		t.Skipf("needs the test control plane: %v", err)
	}
	g := NewWithT(t)
	dir := t.TempDir()
	g.Expect(os.WriteFile(filepath.Join(dir, "testcontrolplane.yaml"), []byte(testControlPlaneCRD), 0o600)).To(Succeed())
	env, err := envtest.Start(envtest.Options{ExtraCRDPaths: []string{dir}})
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = env.Stop() })

	scheme := runtime.NewScheme()
	g.Expect(controllers.AddToScheme(scheme)).To(Succeed())
	c, err := client.New(env.Config, client.Options{Scheme: scheme})
	g.Expect(err).NotTo(HaveOccurred())
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	g.Expect(c.Create(ctx, &corev1Namespace)).To(Succeed())

	t.Run("admission", func(t *testing.T) { admission(t, ctx, c) })

	reg := prometheus.NewRegistry()
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{
		Scheme: scheme, Logger: zap.New(zap.UseDevMode(true), zap.WriteTo(testWriter{t})),
		Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
	})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(controllers.Setup(ctx, mgr, controllers.Options{MetricsRegisterer: reg, SkipNameValidation: true})).To(Succeed())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	cp := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "controlplane.cluster.x-k8s.io/v1beta2", "kind": "TestControlPlane",
		"metadata": map[string]any{"namespace": ns, "name": "cp1"},
		"spec": map[string]any{"loadBalancerRef": map[string]any{
			"apiGroup": lbv1.GroupVersion.Group, "kind": "LoadBalancer", "name": "lb"}},
	}}
	g.Expect(c.Create(ctx, cp)).To(Succeed())
	cluster := &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "c1"},
		Spec: clusterv1.ClusterSpec{ControlPlaneRef: clusterv1.ContractVersionedObjectReference{
			APIGroup: "controlplane.cluster.x-k8s.io", Kind: "TestControlPlane", Name: "cp1"}}}
	g.Expect(c.Create(ctx, cluster)).To(Succeed())
	for i, name := range []string{"m1", "m2"} {
		createMachine(t, ctx, c, name, "10.0.0."+string(rune('1'+i)))
	}
	lb := &lbv1.LoadBalancer{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "lb"},
		Spec: lbv1.LoadBalancerSpec{ClusterName: "c1", Backend: lbv1.Backend{Static: &lbv1.StaticBackend{}},
			Quiesce: lbv1.Quiesce{DrainPeriod: &lbv1.Duration{Duration: time.Second}}}}
	g.Expect(c.Create(ctx, lb)).To(Succeed())

	hook := lbv1.PreDrainHookAnnotation("lb")
	g.Eventually(func(g Gomega) {
		got := &clusterv1.Cluster{}
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(cluster), got)).To(Succeed())
		g.Expect(got.Spec.ControlPlaneEndpoint).To(Equal(clusterv1.APIEndpoint{Host: "10.0.0.1", Port: 6443}))
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(cp), cp)).To(Succeed())
		host, _, _ := unstructured.NestedString(cp.Object, "spec", "controlPlaneEndpoint", "host")
		g.Expect(host).To(Equal("10.0.0.1"))
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(lb), lb)).To(Succeed())
		g.Expect(conditions.IsTrue(lb, lbv1.ReadyCondition)).To(BeTrue(), "%v", lb.Status.Conditions)
		g.Expect(lb.Status.ActiveTargets).To(Equal(int32(2)))
		g.Expect(lb.Spec.HealthCheck.Interval.Duration).To(Equal(10*time.Second), "nested defaults applied")
		for _, n := range []string{"m1", "m2"} {
			m := &clusterv1.Machine{}
			g.Expect(c.Get(ctx, client.ObjectKey{Namespace: ns, Name: n}, m)).To(Succeed())
			g.Expect(m.Annotations).To(HaveKeyWithValue(hook, lbv1.HookOwner))
			g.Expect(m.Annotations).To(HaveKeyWithValue(lbv1.StatusAnnotation, "active"))
		}
	}, 30*time.Second, 100*time.Millisecond).Should(Succeed())

	// Disable the endpoint holder: the endpoint moves, the member is disabled after the drain.
	m1 := &clusterv1.Machine{}
	g.Expect(c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "m1"}, m1)).To(Succeed())
	patch := client.MergeFrom(m1.DeepCopy())
	m1.Annotations[lbv1.DisabledAnnotation] = "smoke"
	g.Expect(c.Patch(ctx, m1, patch)).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(lb), lb)).To(Succeed())
		g.Expect(lb.Status.Endpoint.Host).To(Equal("10.0.0.2"))
		g.Expect(lb.Status.Targets[0].State).To(Equal(lbv1.TargetDisabled))
		g.Expect(conditions.GetReason(lb, lbv1.ClusterEndpointCondition)).To(Equal(lbv1.ClusterEndpointMismatchReason))
	}, 30*time.Second, 100*time.Millisecond).Should(Succeed())

	g.Eventually(func(g Gomega) {
		var evs eventsv1.EventList
		g.Expect(c.List(ctx, &evs, client.InNamespace(ns))).To(Succeed())
		reasons := map[string]bool{}
		for _, e := range evs.Items {
			if e.Regarding.Name == "lb" && e.Regarding.Kind == "LoadBalancer" {
				reasons[e.Reason] = true
			}
		}
		for _, want := range []string{lbv1.EventClusterEndpointSet, lbv1.EventControlPlaneEndpointSet,
			lbv1.EventTargetActive, lbv1.EventEndpointMoved, lbv1.EventTargetDisabled} {
			g.Expect(reasons).To(HaveKey(want))
		}
	}, 30*time.Second, 200*time.Millisecond).Should(Succeed())

	families, err := reg.Gather()
	g.Expect(err).NotTo(HaveOccurred())
	var names []string
	for _, f := range families {
		names = append(names, f.GetName())
	}
	g.Expect(names).To(ContainElements(controllers.MetricReconcileTotal, controllers.MetricTargets, controllers.MetricHooksHeld))
	// The read-your-writes guard retries reconciles that see the cache behind our own patch; if
	// the cache never matched what we wrote (a serialisation mismatch), every reconcile would be
	// retried for seconds and stale_cache would dwarf success.
	results := map[string]float64{}
	for _, f := range families {
		if f.GetName() == controllers.MetricReconcileTotal {
			for _, m := range f.GetMetric() {
				results[m.GetLabel()[0].GetValue()] = m.GetCounter().GetValue()
			}
		}
	}
	g.Expect(results["success"]).To(BeNumerically(">", 0))
	g.Expect(results["stale_cache"]).To(BeNumerically("<", results["success"]), "%v", results)

	// Delete the LoadBalancer: no Machine keeps a caplb mark.
	g.Expect(c.Delete(ctx, lb)).To(Succeed())
	g.Eventually(func(g Gomega) {
		err := c.Get(ctx, client.ObjectKeyFromObject(lb), &lbv1.LoadBalancer{})
		g.Expect(client.IgnoreNotFound(err)).To(Succeed())
		g.Expect(err).To(HaveOccurred())
		for _, n := range []string{"m1", "m2"} {
			m := &clusterv1.Machine{}
			g.Expect(c.Get(ctx, client.ObjectKey{Namespace: ns, Name: n}, m)).To(Succeed())
			for k := range m.Annotations {
				g.Expect(k == hook || k == lbv1.NameAnnotation || k == lbv1.StatusAnnotation).To(BeFalse(), k)
			}
		}
	}, 30*time.Second, 100*time.Millisecond).Should(Succeed())
}

func admission(t *testing.T, ctx context.Context, c client.Client) {
	base := func(name string) *lbv1.LoadBalancer {
		return &lbv1.LoadBalancer{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: lbv1.LoadBalancerSpec{ClusterName: "c1", Backend: lbv1.Backend{Static: &lbv1.StaticBackend{}}}}
	}
	tests := []struct {
		name   string
		mutate func(*lbv1.LoadBalancer)
		want   string
	}{
		{"selector operator", func(lb *lbv1.LoadBalancer) {
			lb.Spec.Selector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "a", Operator: "Bogus"}}}
		}, "spec.selector.matchExpressions[].operator must be one of In, NotIn, Exists, DoesNotExist"},
		{"selector values", func(lb *lbv1.LoadBalancer) {
			lb.Spec.Selector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "a", Operator: "In"}}}
		}, "operators In and NotIn need at least one value"},
		{"no backend", func(lb *lbv1.LoadBalancer) { lb.Spec.Backend = lbv1.Backend{} }, "spec.backend"},
		{"no clusterName", func(lb *lbv1.LoadBalancer) { lb.Spec.ClusterName = "" }, "spec.clusterName is required"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			lb := base("bad-" + strings.ReplaceAll(tt.name, " ", "-"))
			tt.mutate(lb)
			err := c.Create(ctx, lb)
			g.Expect(err).To(HaveOccurred())
			g.Expect(err.Error()).To(ContainSubstring(tt.want))
		})
	}
	t.Run("targetKind immutable", func(t *testing.T) {
		g := NewWithT(t)
		lb := base("immutable")
		g.Expect(c.Create(ctx, lb)).To(Succeed())
		lb.Spec.TargetKind = lbv1.TargetKind{Kind: lbv1.NodeKind}
		lb.Spec.ClusterName = "c1"
		err := c.Update(ctx, lb)
		g.Expect(err).To(HaveOccurred())
		g.Expect(err.Error()).To(ContainSubstring("spec.targetKind is immutable"))
		g.Expect(c.Delete(ctx, lb)).To(Succeed())
	})
}

func createMachine(t *testing.T, ctx context.Context, c client.Client, name, ip string) {
	t.Helper()
	g := NewWithT(t)
	m := &clusterv1.Machine{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{
			clusterv1.ClusterNameLabel: "c1", clusterv1.MachineControlPlaneLabel: ""}},
		Spec: clusterv1.MachineSpec{
			ClusterName:       "c1",
			Bootstrap:         clusterv1.Bootstrap{DataSecretName: ptr("bootstrap")},
			InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: "infrastructure.cluster.x-k8s.io", Kind: "TestMachine", Name: name},
		},
	}
	g.Expect(c.Create(ctx, m)).To(Succeed())
	m.Status.Addresses = clusterv1.MachineAddresses{{Type: clusterv1.MachineInternalIP, Address: ip}}
	m.Status.Conditions = []metav1.Condition{{Type: clusterv1.ReadyCondition, Status: metav1.ConditionTrue,
		Reason: "Smoke", LastTransitionTime: metav1.Now()}}
	g.Expect(c.Status().Update(ctx, m)).To(Succeed())
}

func ptr[T any](v T) *T { return &v }

const ns = "smoke"

var corev1Namespace = func() corev1.Namespace {
	n := corev1.Namespace{}
	n.Name = ns
	return n
}()

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
