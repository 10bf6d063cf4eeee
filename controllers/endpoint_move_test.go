package controllers

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	lbv1 "github.com/caplb/caplb/api/v1alpha1"
	"github.com/caplb/caplb/controllers/endpointmove"
)

// fakeCerts answers the serving-certificate check from a set of members that fail it.
type fakeCerts struct {
	failing map[string]bool // by address
	calls   int
}

func (f *fakeCerts) Verify(_ context.Context, address, serverName string, roots *x509.CertPool) error {
	f.calls++
	if roots == nil {
		return errors.New("no roots")
	}
	if f.failing[address] {
		return errors.New("x509: certificate is valid for 10.0.0.10, not " + serverName)
	}
	return nil
}

func caPEM(t *testing.T) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "kubernetes"}, IsCA: true,
		NotBefore: t0.Add(-time.Hour), NotAfter: t0.Add(time.Hour), BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// moveFixture: Cluster prod on E1 (10.0.0.10:6443, LoadBalancer "old", static), two ready
// control-plane Machines and a worker, the new static LoadBalancer "new" on E2
// (api.prod.example.com:443) taking over; the workload cluster holds kubeadm's ConfigMaps.
func moveFixture(t *testing.T) (*harness, client.Client, *fakeCerts) {
	e1 := clusterv1.APIEndpoint{Host: "10.0.0.10", Port: 6443}
	cluster := testCluster("prod")
	cluster.Spec.ControlPlaneEndpoint = e1
	cluster.Annotations = map[string]string{lbv1.EndpointPublishedByAnnotation: "old"}
	old := testLB("old", "prod")
	old.Spec.Endpoint = lbv1.APIEndpoint{Host: e1.Host, Port: e1.Port}
	old.Status.Endpoint = old.Spec.Endpoint
	lb := testLB("new", "prod")
	lb.Spec.Endpoint = lbv1.APIEndpoint{Host: "api.prod.example.com", Port: 443}
	lb.Spec.HealthCheck.Disabled = true // available as soon as set: no probe in a unit test
	lb.Spec.PublishClusterEndpoint = ptr.To(false)
	lb.Spec.TakeOverEndpointFrom = &lbv1.EndpointTakeOver{Name: "old"}
	kubeconfig := `apiVersion: v1
clusters:
- cluster:
    certificate-authority-data: Y2E=
    server: https://10.0.0.10:6443
  name: prod
contexts: []
kind: Config
users: []
`
	objs := []client.Object{cluster, old, lb,
		testMachine("cp-a", "prod", "10.0.0.1", true, true), testMachine("cp-b", "prod", "10.0.0.2", true, true),
		testMachine("md-0-x", "prod", "10.0.0.5", false, true),
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "prod-ca"}, Data: map[string][]byte{corev1.TLSCertKey: caPEM(t)}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "prod-kubeconfig"}, Data: map[string][]byte{"value": []byte(kubeconfig)}},
	}
	h := newHarness(t, objs...)
	wl := workloadClient(t,
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-public", Name: "cluster-info"}, Data: map[string]string{
			"kubeconfig": kubeconfig, "jws-kubeconfig-abcdef": "stale"}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "kubeadm-config"}, Data: map[string]string{
			"ClusterConfiguration": "apiVersion: kubeadm.k8s.io/v1beta4\nkind: ClusterConfiguration\ncontrolPlaneEndpoint: 10.0.0.10:6443\n"}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "kube-proxy"}, Data: map[string]string{
			"kubeconfig.conf": kubeconfig, "config.conf": "kind: KubeProxyConfiguration"}},
	)
	certs := &fakeCerts{failing: map[string]bool{"10.0.0.2:6443": true}}
	h.r.ClusterCache = &fakeClusterCache{c: wl}
	h.r.ServingCerts = certs
	return h, wl, certs
}

func (h *harness) moveCondition(name string) *metav1.Condition {
	return conditions.Get(h.lb(name), lbv1.EndpointMoveCondition)
}

// TestEndpointMoveReconcile drives a move through the reconciler on fake clients: it waits while
// a member's certificate lacks E2, then rewrites one object per reconcile and switches the
// Cluster; a second pass writes nothing.
func TestEndpointMoveReconcile(t *testing.T) {
	h, wl, certs := moveFixture(t)
	g := h.g
	ctx := context.Background()

	h.reconcile("new")
	c := h.moveCondition("new")
	g.Expect(c).NotTo(BeNil())
	g.Expect(c.Reason).To(Equal(lbv1.WaitingForCertSANsReason))
	g.Expect(c.Message).To(ContainSubstring("cp-b (x509: certificate is valid for 10.0.0.10, not api.prod.example.com)"))
	g.Expect(certs.calls).To(Equal(2), "each active member is checked")
	g.Expect(h.lb("new").Status.EndpointMove.Step).To(Equal(lbv1.MoveStepCertSANs))
	g.Expect(h.cluster("prod").Spec.ControlPlaneEndpoint.Host).To(Equal("10.0.0.10"), "nothing moves while a member fails")

	certs.failing = nil
	for range 12 {
		h.reconcile("new")
		if st := h.lb("new").Status.EndpointMove; st != nil && st.Step == lbv1.MoveStepDone {
			break
		}
	}
	lb := h.lb("new")
	g.Expect(lb.Status.EndpointMove.Step).To(Equal(lbv1.MoveStepDone))
	g.Expect(lb.Status.EndpointMove.MachinesBeforeSwitch).To(Equal([]string{"cp-a", "cp-b", "md-0-x"}))
	g.Expect(lb.Spec.TakeOverEndpointFrom).To(BeNil())
	g.Expect(lb.Spec.PublishesClusterEndpoint()).To(BeTrue())
	c = h.moveCondition("new")
	g.Expect(c.Status).To(Equal(metav1.ConditionTrue))
	g.Expect(c.Reason).To(Equal(lbv1.SwitchedReason))
	g.Expect(h.lb("old").Spec.PublishesClusterEndpoint()).To(BeFalse())
	cl := h.cluster("prod")
	g.Expect(cl.Spec.ControlPlaneEndpoint).To(Equal(clusterv1.APIEndpoint{Host: "api.prod.example.com", Port: 443}))
	g.Expect(cl.Annotations).To(HaveKeyWithValue(lbv1.EndpointPublishedByAnnotation, "new"))
	g.Expect(hasEvent(h.events(), corev1.EventTypeWarning, lbv1.EventClusterEndpointMoved, "to api.prod.example.com:443")).To(BeTrue())

	sec := &corev1.Secret{}
	g.Expect(h.c.Get(ctx, client.ObjectKey{Namespace: "ns", Name: "prod-kubeconfig"}, sec)).To(Succeed())
	g.Expect(string(sec.Data["value"])).To(ContainSubstring("server: https://api.prod.example.com:443\n"))
	ci := &corev1.ConfigMap{}
	g.Expect(wl.Get(ctx, client.ObjectKey{Namespace: "kube-public", Name: "cluster-info"}, ci)).To(Succeed())
	g.Expect(ci.Data).To(HaveLen(1), "the stale signature is gone")
	g.Expect(ci.Data["kubeconfig"]).To(ContainSubstring("server: https://api.prod.example.com:443\n"))
	kc := &corev1.ConfigMap{}
	g.Expect(wl.Get(ctx, client.ObjectKey{Namespace: "kube-system", Name: "kubeadm-config"}, kc)).To(Succeed())
	g.Expect(kc.Data["ClusterConfiguration"]).To(ContainSubstring("controlPlaneEndpoint: api.prod.example.com:443"))
	g.Expect(kc.Data["ClusterConfiguration"]).To(ContainSubstring("- 10.0.0.10"))
	kp := &corev1.ConfigMap{}
	g.Expect(wl.Get(ctx, client.ObjectKey{Namespace: "kube-system", Name: "kube-proxy"}, kp)).To(Succeed())
	g.Expect(kp.Data["kubeconfig.conf"]).To(ContainSubstring("server: https://api.prod.example.com:443\n"))
	g.Expect(kp.Data["config.conf"]).To(Equal("kind: KubeProxyConfiguration"))

	// Done is final: further reconciles change none of those objects.
	versions := func() []string {
		var out []string
		for _, k := range []client.ObjectKey{{Namespace: "kube-public", Name: "cluster-info"}, {Namespace: "kube-system", Name: "kubeadm-config"}, {Namespace: "kube-system", Name: "kube-proxy"}} {
			cm := &corev1.ConfigMap{}
			g.Expect(wl.Get(ctx, k, cm)).To(Succeed())
			out = append(out, cm.ResourceVersion)
		}
		g.Expect(h.c.Get(ctx, client.ObjectKey{Namespace: "ns", Name: "prod-kubeconfig"}, sec)).To(Succeed())
		return append(out, sec.ResourceVersion, h.cluster("prod").ResourceVersion)
	}
	before := versions()
	h.reconcile("new")
	h.reconcile("new")
	g.Expect(versions()).To(Equal(before))
	g.Expect(h.moveCondition("new").Reason).To(Equal(lbv1.SwitchedReason))
}

// TestEndpointMoveRefusesANonPublisher: the reconciler applies ValidateTakeOver too (the
// webhook may be absent), and writes nothing.
func TestEndpointMoveRefusesANonPublisher(t *testing.T) {
	h, wl, _ := moveFixture(t)
	old := h.lb("old")
	orig := old.DeepCopy()
	old.Spec.PublishClusterEndpoint = ptr.To(false)
	h.g.Expect(h.c.Patch(context.Background(), old, client.MergeFrom(orig))).To(Succeed())
	h.reconcile("new")
	c := h.moveCondition("new")
	h.g.Expect(c.Reason).To(Equal(lbv1.EndpointMoveRefusedReason))
	h.g.Expect(c.Message).To(ContainSubstring("LoadBalancer old does not publish"))
	ci := &corev1.ConfigMap{}
	h.g.Expect(wl.Get(context.Background(), client.ObjectKey{Namespace: "kube-public", Name: "cluster-info"}, ci)).To(Succeed())
	h.g.Expect(ci.Data).To(HaveKey("jws-kubeconfig-abcdef"))
	h.g.Expect(h.cluster("prod").Spec.ControlPlaneEndpoint.Host).To(Equal("10.0.0.10"))
}

var _ ServingCertChecker = &fakeCerts{}

// TestEndpointMoveResumesAfterLostStatus: every other reconcile loses its status write, as a
// manager stopped between a step's write and the status recording it would; the move still
// finishes, and no object is written twice.
func TestEndpointMoveResumesAfterLostStatus(t *testing.T) {
	h, wl, certs := moveFixture(t)
	certs.failing = nil
	writes := map[string]int{}
	h.r.ClusterCache = &fakeClusterCache{c: interceptor.NewClient(wl.(client.WithWatch), interceptor.Funcs{
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, p client.Patch, opts ...client.PatchOption) error {
			writes["ConfigMap/"+obj.GetName()]++
			return c.Patch(ctx, obj, p, opts...)
		}})}
	lose := false
	h.r.Client = interceptor.NewClient(h.c.(client.WithWatch), interceptor.Funcs{
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, p client.Patch, opts ...client.PatchOption) error {
			if _, ok := obj.(*clusterv1.Cluster); ok {
				writes["Cluster/"+obj.GetName()]++
			}
			if o, ok := obj.(*lbv1.LoadBalancer); ok && o.Name == "old" {
				writes["LoadBalancer/old"]++
			}
			return c.Patch(ctx, obj, p, opts...)
		},
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			writes["Secret/"+obj.GetName()]++
			return c.Update(ctx, obj, opts...)
		},
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, p client.Patch, opts ...client.SubResourcePatchOption) error {
			if lose {
				return errors.New("manager stopped before the status write")
			}
			return c.SubResource(sub).Patch(ctx, obj, p, opts...)
		},
	})
	for i := range 30 {
		lose = i%2 == 1
		_, _ = h.r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKey{Namespace: "ns", Name: "new"}})
		if st := h.lb("new").Status.EndpointMove; st != nil && st.Step == lbv1.MoveStepDone {
			break
		}
	}
	h.g.Expect(h.lb("new").Status.EndpointMove.Step).To(Equal(lbv1.MoveStepDone))
	h.g.Expect(writes).To(Equal(map[string]int{
		"ConfigMap/cluster-info": 1, "ConfigMap/kubeadm-config": 1, "ConfigMap/kube-proxy": 1,
		"Secret/prod-kubeconfig": 1, "LoadBalancer/old": 1, "Cluster/prod": 1,
	}))
}

var kcpGVK = schema.GroupVersionKind{Group: "controlplane.cluster.x-k8s.io", Version: "v1beta2", Kind: "KubeadmControlPlane"}

// TestEndpointMoveAddsCertSANs: with certSANs AddToControlPlane the move adds the missing hosts
// to the KubeadmControlPlane (E1's and E2's, keeping what is there) and waits for the members.
func TestEndpointMoveAddsCertSANs(t *testing.T) {
	h, _, certs := moveFixture(t)
	g := h.g
	ctx := context.Background()
	kcp := &unstructured.Unstructured{}
	kcp.SetGroupVersionKind(kcpGVK)
	kcp.SetNamespace("ns")
	kcp.SetName("prod-cp")
	g.Expect(unstructured.SetNestedStringSlice(kcp.Object, []string{"localhost"}, kcpCertSANsPath...)).To(Succeed())
	g.Expect(h.c.Create(ctx, kcp)).To(Succeed())
	mapper := meta.NewDefaultRESTMapper([]schema.GroupVersion{kcpGVK.GroupVersion()})
	mapper.Add(kcpGVK, meta.RESTScopeNamespace)
	h.r.RESTMapper = mapper
	cl := h.cluster("prod")
	orig := cl.DeepCopy()
	cl.Spec.ControlPlaneRef = clusterv1.ContractVersionedObjectReference{APIGroup: kcpGVK.Group, Kind: kcpGVK.Kind, Name: "prod-cp"}
	g.Expect(h.c.Patch(ctx, cl, client.MergeFrom(orig))).To(Succeed())
	lb := h.lb("new")
	orig2 := lb.DeepCopy()
	lb.Spec.TakeOverEndpointFrom.CertSANs = lbv1.CertSANsAddToControlPlane
	g.Expect(h.c.Patch(ctx, lb, client.MergeFrom(orig2))).To(Succeed())

	h.reconcile("new")
	got := &unstructured.Unstructured{}
	got.SetGroupVersionKind(kcpGVK)
	g.Expect(h.c.Get(ctx, client.ObjectKey{Namespace: "ns", Name: "prod-cp"}, got)).To(Succeed())
	sans, _, _ := unstructured.NestedStringSlice(got.Object, kcpCertSANsPath...)
	g.Expect(sans).To(Equal([]string{"localhost", "api.prod.example.com", "10.0.0.10"}))
	c := h.moveCondition("new")
	g.Expect(c.Reason).To(Equal(lbv1.WaitingForCertSANsReason))
	g.Expect(c.Message).To(ContainSubstring("Adding api.prod.example.com, 10.0.0.10 to KubeadmControlPlane"))

	// The rollout replaced cp-b: every member verifies, the certSANs hold both hosts: the move goes on.
	certs.failing = nil
	h.reconcile("new")
	g.Expect(h.lb("new").Status.EndpointMove.Step).To(Equal(lbv1.MoveStepClusterInfo))
	rv := got.GetResourceVersion()
	g.Expect(h.c.Get(ctx, client.ObjectKey{Namespace: "ns", Name: "prod-cp"}, got)).To(Succeed())
	g.Expect(got.GetResourceVersion()).To(Equal(rv), "nothing more to add")
}

// TestEndpointMoveRestartsKubeProxy: with restartKubeProxy the KubeProxy step also sets the
// kube-proxy DaemonSet's pod-template annotation to E2 (its Pods restart onto the rewritten
// ConfigMap), once: the step repeated writes nothing; without the DaemonSet there is nothing to
// restart; without the field the DaemonSet is left alone.
func TestEndpointMoveRestartsKubeProxy(t *testing.T) {
	for _, tc := range []struct {
		name     string
		restart  bool
		withDS   bool
		wantAnno string
	}{
		{"restartKubeProxy", true, true, "api.prod.example.com:443"},
		{"restartKubeProxy without a kube-proxy DaemonSet", true, false, ""},
		{"off by default", false, true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, wl, certs := moveFixture(t)
			g := h.g
			ctx := context.Background()
			certs.failing = nil
			lb := h.lb("new")
			lb.Spec.TakeOverEndpointFrom.RestartKubeProxy = tc.restart
			g.Expect(h.c.Update(ctx, lb)).To(Succeed())
			labels := map[string]string{"k8s-app": "kube-proxy"}
			if tc.withDS {
				g.Expect(wl.Create(ctx, &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "kube-proxy"},
					Spec: appsv1.DaemonSetSpec{Selector: &metav1.LabelSelector{MatchLabels: labels},
						Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}}}})).To(Succeed())
			}
			for range 12 {
				h.reconcile("new")
				if st := h.lb("new").Status.EndpointMove; st != nil && st.Step == lbv1.MoveStepDone {
					break
				}
			}
			g.Expect(h.lb("new").Status.EndpointMove.Step).To(Equal(lbv1.MoveStepDone))
			if !tc.withDS {
				return
			}
			ds := &appsv1.DaemonSet{}
			g.Expect(wl.Get(ctx, client.ObjectKey{Namespace: "kube-system", Name: "kube-proxy"}, ds)).To(Succeed())
			g.Expect(ds.Spec.Template.Annotations[lbv1.KubeProxyEndpointAnnotation]).To(Equal(tc.wantAnno))
			// The step again (a manager restarted after its write): nothing written twice.
			m := endpointmove.Move{Old: lbv1.APIEndpoint{Host: "10.0.0.10", Port: 6443}, New: lbv1.APIEndpoint{Host: "api.prod.example.com", Port: 443}}
			rv := ds.ResourceVersion
			cur := h.lb("new")
			cur.Spec.TakeOverEndpointFrom = &lbv1.EndpointTakeOver{Name: "old", RestartKubeProxy: tc.restart}
			cur.Status.EndpointMove = &lbv1.EndpointMoveStatus{From: "old", Step: lbv1.MoveStepKubeProxy}
			_, err := h.r.doMoveStep(ctx, &scope{lb: cur, cluster: h.cluster("prod")}, m, lbv1.MoveStepKubeProxy)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(wl.Get(ctx, client.ObjectKeyFromObject(ds), ds)).To(Succeed())
			g.Expect(ds.ResourceVersion).To(Equal(rv))
		})
	}
}
