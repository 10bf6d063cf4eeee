package controllers

import (
	"context"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	lbv1 "github.com/caplb/caplb/api/v1alpha1"
	"github.com/caplb/caplb/providers"
	"github.com/caplb/caplb/providers/static"
)

// harness runs the reconciler against controller-runtime's fake client with a settable clock.
type harness struct {
	t        *testing.T
	g        *WithT
	c        client.Client
	r        *LoadBalancerReconciler
	recorder *events.FakeRecorder
	clock    time.Time
}

func newHarness(t *testing.T, objs ...client.Object) *harness {
	t.Helper()
	s := runtime.NewScheme()
	if err := AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	b := fake.NewClientBuilder().WithScheme(s).
		WithStatusSubresource(&lbv1.LoadBalancer{}, &clusterv1.Machine{}, &clusterv1.Cluster{}).
		WithObjects(objs...)
	rec := &recordingIndexer{}
	if err := setupIndexes(context.Background(), rec, true, true); err != nil {
		t.Fatal(err)
	}
	for _, ix := range rec.ixs {
		b = b.WithIndex(ix.obj, ix.field, ix.fn)
	}
	c := b.Build()
	h := &harness{t: t, g: NewWithT(t), c: c, recorder: events.NewFakeRecorder(1000), clock: t0}
	metrics, err := newMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	now := func() time.Time { return h.clock }
	reg, err := providers.NewRegistry(&static.Backend{Now: now})
	if err != nil {
		t.Fatal(err)
	}
	h.r = &LoadBalancerReconciler{
		Client: c, APIReader: c, RESTMapper: meta.NewDefaultRESTMapper(nil),
		Recorder: h.recorder, Backends: reg, Metrics: metrics, Now: now, APIs: AllAPIs(),
	}
	return h
}

type recordingIndexer struct {
	ixs []struct {
		obj   client.Object
		field string
		fn    client.IndexerFunc
	}
}

func (r *recordingIndexer) IndexField(_ context.Context, obj client.Object, field string, fn client.IndexerFunc) error {
	r.ixs = append(r.ixs, struct {
		obj   client.Object
		field string
		fn    client.IndexerFunc
	}{obj, field, fn})
	return nil
}

func (h *harness) reconcile(name string) ctrl.Result {
	h.t.Helper()
	res, err := h.r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKey{Namespace: "ns", Name: name}})
	h.g.Expect(err).NotTo(HaveOccurred())
	return res
}

func (h *harness) lb(name string) *lbv1.LoadBalancer {
	h.t.Helper()
	lb := &lbv1.LoadBalancer{}
	h.g.Expect(h.c.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: name}, lb)).To(Succeed())
	return lb
}

func (h *harness) machine(name string) *clusterv1.Machine {
	h.t.Helper()
	m := &clusterv1.Machine{}
	h.g.Expect(h.c.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: name}, m)).To(Succeed())
	return m
}

func (h *harness) cluster(name string) *clusterv1.Cluster {
	h.t.Helper()
	c := &clusterv1.Cluster{}
	h.g.Expect(h.c.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: name}, c)).To(Succeed())
	return c
}

func (h *harness) annotate(name, key, value string, remove bool) {
	h.t.Helper()
	m := h.machine(name)
	orig := m.DeepCopy()
	if m.Annotations == nil {
		m.Annotations = map[string]string{}
	}
	if remove {
		delete(m.Annotations, key)
	} else {
		m.Annotations[key] = value
	}
	h.g.Expect(h.c.Patch(context.Background(), m, client.MergeFrom(orig))).To(Succeed())
}

// events drains the recorded events.
func (h *harness) events() []string {
	var out []string
	for {
		select {
		case e := <-h.recorder.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

func hasEvent(evs []string, typ, reason, substr string) bool {
	for _, e := range evs {
		if strings.HasPrefix(e, typ+" "+reason+" ") && strings.Contains(e, substr) {
			return true
		}
	}
	return false
}

func targetStates(lb *lbv1.LoadBalancer) map[string]lbv1.TargetState {
	out := map[string]lbv1.TargetState{}
	for _, t := range lb.Status.Targets {
		out[t.Name] = t.State
	}
	return out
}

func testCluster(name string) *clusterv1.Cluster {
	return &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}}
}

func testMachine(name, cluster, ip string, cp, ready bool) *clusterv1.Machine {
	m := &clusterv1.Machine{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, Labels: map[string]string{clusterv1.ClusterNameLabel: cluster}},
		Spec:       clusterv1.MachineSpec{ClusterName: cluster},
	}
	if cp {
		m.Labels[clusterv1.MachineControlPlaneLabel] = ""
	}
	if ip != "" {
		m.Status.Addresses = clusterv1.MachineAddresses{{Type: clusterv1.MachineInternalIP, Address: ip}}
	}
	status := metav1.ConditionFalse
	if ready {
		status = metav1.ConditionTrue
	}
	m.Status.Conditions = []metav1.Condition{{Type: clusterv1.ReadyCondition, Status: status, Reason: "Test",
		LastTransitionTime: metav1.NewTime(t0)}}
	return m
}

func testNode(name, ip string, cp, ready bool) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{}}}
	if cp {
		n.Labels[nodeControlPlaneLabel] = ""
	}
	n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}}
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: st}}
	return n
}

func testLB(name, cluster string) *lbv1.LoadBalancer {
	lb := newLB(name)
	lb.Finalizers = []string{lbv1.LoadBalancerFinalizer} // the first reconcile only adds it: see TestFinalizerFirst
	lb.Spec.ClusterName = cluster
	lb.Spec.Quiesce = lbv1.Quiesce{DrainPeriod: &lbv1.Duration{Duration: 10 * time.Second}, Timeout: lbv1.Duration{Duration: time.Minute}}
	return lb
}
