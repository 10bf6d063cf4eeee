package integration

import (
	"testing"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lbv1 "github.com/caplb/caplb/api/v1alpha1"
	"github.com/caplb/caplb/controllers/endpointmove"
)

// An endpoint move under the workload RBAC caplb ships (config/workload/rbac.yaml), on a real
// API server, as config/workload's ServiceAccount: it may read and patch, with the read
// resourceVersion as the manager does, exactly the objects the move rewrites — the three
// ConfigMaps and (restartKubeProxy) the kube-proxy DaemonSet — and nothing else of their kinds.
func testEndpointMoveWorkloadRBAC(t *testing.T, s *suite) {
	g := NewWithT(t)
	wl, err := s.env.StartWorkload(s.ctx)
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = wl.Stop() })
	ctx := s.ctx
	admin := wl.Client
	for _, ns := range []string{"kube-public"} {
		if err := admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	cms := []client.ObjectKey{
		{Namespace: endpointmove.ClusterInfoNamespace, Name: endpointmove.ClusterInfoName},
		{Namespace: endpointmove.KubeadmConfigNamespace, Name: endpointmove.KubeadmConfigName},
		{Namespace: endpointmove.KubeProxyNamespace, Name: endpointmove.KubeProxyName},
		{Namespace: "kube-system", Name: "coredns"}, // not the move's
	}
	for _, k := range cms {
		g.Expect(admin.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: k.Namespace, Name: k.Name},
			Data: map[string]string{"k": "v"}})).To(Succeed())
	}
	labels := map[string]string{"k8s-app": "kube-proxy"}
	ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "kube-proxy"},
		Spec: appsv1.DaemonSetSpec{Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "kube-proxy", Image: "registry.k8s.io/kube-proxy:v1.36.3"}}}}}}
	g.Expect(admin.Create(ctx, ds)).To(Succeed())

	cfg, err := clientcmd.RESTConfigFromKubeConfig(wl.Kubeconfig)
	g.Expect(err).NotTo(HaveOccurred())
	sa, err := client.New(cfg, client.Options{Scheme: s.env.Scheme})
	g.Expect(err).NotTo(HaveOccurred())
	patchLocked := func(obj client.Object, mutate func()) error {
		orig := obj.DeepCopyObject().(client.Object)
		mutate()
		return sa.Patch(ctx, obj, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}))
	}
	for _, k := range cms[:3] {
		cm := &corev1.ConfigMap{}
		g.Expect(sa.Get(ctx, k, cm)).To(Succeed(), "get %s", k)
		g.Expect(patchLocked(cm, func() { cm.Data["k"] = "moved" })).To(Succeed(), "patch %s", k)
	}
	got := &appsv1.DaemonSet{}
	g.Expect(sa.Get(ctx, client.ObjectKeyFromObject(ds), got)).To(Succeed())
	g.Expect(patchLocked(got, func() {
		got.Spec.Template.Annotations = map[string]string{lbv1.KubeProxyEndpointAnnotation: "10.0.0.50:6443"}
	})).To(Succeed(), "restartKubeProxy's patch")

	other := &corev1.ConfigMap{}
	g.Expect(apierrors.IsForbidden(sa.Get(ctx, cms[3], other))).To(BeTrue(), "another ConfigMap is not the move's")
	g.Expect(apierrors.IsForbidden(sa.List(ctx, &corev1.ConfigMapList{}, client.InNamespace("kube-system")))).To(BeTrue(), "no list")
	g.Expect(apierrors.IsForbidden(sa.Delete(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: cms[2].Namespace, Name: cms[2].Name}}))).To(BeTrue(), "no delete")
	g.Expect(apierrors.IsForbidden(sa.List(ctx, &appsv1.DaemonSetList{}, client.InNamespace("kube-system")))).To(BeTrue(), "no other DaemonSet")
}
