package integration

import (
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/caplb/caplb/e2e/harness"
)

var testControlPlaneGVK = schema.GroupVersionKind{Group: "controlplane.caplb.test", Version: "v1alpha1", Kind: "TestControlPlane"}

// Publication to the control plane is re-checked, not cached: a control plane that does not
// exist yet when the LoadBalancer is created, and one that names the LoadBalancer in
// spec.loadBalancerRef only later, both get the endpoint (through the watch on their kind).
func testControlPlanePublication(t *testing.T, s *suite) {
	g := NewWithT(t)
	// The shipped RBAC covers the known control-plane kinds only; a platform with another kind
	// grants it as this test does for its own.
	g.Expect(grantControlPlaneKind(t, s, "testcontrolplanes."+testControlPlaneGVK.Group)).To(Succeed())
	f := newFixture(t, s, harness.ClusterOptions{})
	// The Cluster points at a control plane that does not exist yet.
	c := &clusterv1.Cluster{}
	g.Expect(s.env.Client.Get(f.ctx, client.ObjectKeyFromObject(f.cluster), c)).To(Succeed())
	orig := c.DeepCopy()
	c.Spec.ControlPlaneRef = clusterv1.ContractVersionedObjectReference{
		APIGroup: testControlPlaneGVK.Group, Kind: testControlPlaneGVK.Kind, Name: "cp"}
	g.Expect(s.env.Client.Patch(f.ctx, c, client.MergeFrom(orig))).To(Succeed())

	f.createLB(t, "api.example.com", 6443)
	g.Eventually(func(g Gomega) {
		g.Expect(f.clusterEndpoint(g).Host).To(Equal("api.example.com"))
	}, flowTimeout).Should(Succeed())

	// Created now, without a loadBalancerRef: caplb leaves it alone.
	cp := &unstructured.Unstructured{}
	cp.SetGroupVersionKind(testControlPlaneGVK)
	cp.SetNamespace(f.ns)
	cp.SetName("cp")
	g.Expect(s.env.Client.Create(f.ctx, cp)).To(Succeed())
	endpointOf := func(g Gomega) (string, int64) {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(testControlPlaneGVK)
		g.Expect(s.env.Client.Get(f.ctx, client.ObjectKey{Namespace: f.ns, Name: "cp"}, u)).To(Succeed())
		host, _, _ := unstructured.NestedString(u.Object, "spec", "controlPlaneEndpoint", "host")
		port, _, _ := unstructured.NestedInt64(u.Object, "spec", "controlPlaneEndpoint", "port")
		return host, port
	}
	g.Consistently(func(g Gomega) {
		host, _ := endpointOf(g)
		g.Expect(host).To(BeEmpty(), "published to a control plane that does not name the LoadBalancer")
	}, 2*time.Second, 200*time.Millisecond).Should(Succeed())

	// Now it names the LoadBalancer: the endpoint follows. CAPI's Cluster reconciler may write
	// the object too (its owner reference), so the update is retried on a conflict.
	g.Eventually(func(g Gomega) {
		g.Expect(s.env.Client.Get(f.ctx, client.ObjectKey{Namespace: f.ns, Name: "cp"}, cp)).To(Succeed())
		g.Expect(unstructured.SetNestedStringMap(cp.Object, map[string]string{"name": "lb"}, "spec", "loadBalancerRef")).To(Succeed())
		g.Expect(s.env.Client.Update(f.ctx, cp)).To(Succeed())
	}, flowTimeout).Should(Succeed())
	g.Eventually(func(g Gomega) {
		host, port := endpointOf(g)
		g.Expect(host).To(Equal("api.example.com"))
		g.Expect(port).To(Equal(int64(6443)))
	}, flowTimeout).Should(Succeed())
}

// grantControlPlaneKind lets the manager's ServiceAccount read, watch and patch one more
// control-plane resource ("<plural>.<group>"), the way docs/contract.md tells operators to.
func grantControlPlaneKind(t *testing.T, s *suite, resource string) error {
	plural, group, _ := strings.Cut(resource, ".")
	ns, name, _ := strings.Cut(harness.ShippedServiceAccount, "/")
	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "caplb-manager-" + plural},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{group}, Resources: []string{plural},
			Verbs: []string{"get", "list", "watch", "patch"}}},
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "caplb-manager-" + plural},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: name}},
	}
	for _, o := range []client.Object{role, binding} {
		if err := s.env.Client.Create(t.Context(), o); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
	}
	return nil
}
