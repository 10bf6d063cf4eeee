package controllers

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lbv1 "github.com/caplb/caplb/api/v1alpha1"
)

// TestMemberMoveReconcile: a static LoadBalancer publishing a member's address with
// onPublishedMemberLeave MoveEndpoint. When that member is disabled, the LoadBalancer publishes
// the other member's address and moves the Cluster there with the endpoint move's rewrites; the
// leaving member stays in its drain (disabling) until the Cluster no longer names it.
func TestMemberMoveReconcile(t *testing.T) {
	lb := testLB("edge", "prod")
	lb.Spec.Backend = lbv1.Backend{Static: &lbv1.StaticBackend{OnPublishedMemberLeave: lbv1.MemberLeaveMoveEndpoint}}
	kc := func(host string) string {
		return "apiVersion: v1\nclusters:\n- cluster:\n    certificate-authority-data: Y2E=\n    server: https://" + host +
			":6443\n  name: prod\ncontexts: []\nkind: Config\nusers: []\n"
	}
	h := newHarness(t, testCluster("prod"), lb,
		testMachine("cp-a", "prod", "10.0.0.1", true, true), testMachine("cp-b", "prod", "10.0.0.2", true, true),
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "prod-ca"}, Data: map[string][]byte{corev1.TLSCertKey: caPEM(t)}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "prod-kubeconfig"}, Data: map[string][]byte{"value": []byte(kc("10.0.0.1"))}})
	wl := workloadClient(t,
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-public", Name: "cluster-info"}, Data: map[string]string{
			"kubeconfig": kc("10.0.0.1"), "jws-kubeconfig-abcdef": "stale"}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "kubeadm-config"}, Data: map[string]string{
			"ClusterConfiguration": "apiVersion: kubeadm.k8s.io/v1beta4\nkind: ClusterConfiguration\ncontrolPlaneEndpoint: 10.0.0.1:6443\n"}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "kube-proxy"}, Data: map[string]string{
			"kubeconfig.conf": kc("10.0.0.1")}})
	certs := &fakeCerts{}
	h.r.ClusterCache = &fakeClusterCache{c: wl}
	h.r.ServingCerts = certs
	g := h.g
	ctx := context.Background()

	for range 4 {
		h.reconcile("edge")
	}
	g.Expect(h.cluster("prod").Spec.ControlPlaneEndpoint).To(Equal(clusterv1.APIEndpoint{Host: "10.0.0.1", Port: 6443}), "cp-a's address published")
	g.Expect(h.lb("edge").Status.EndpointMove).To(BeNil(), "no move while the member stays")

	h.annotate("cp-a", lbv1.DisabledAnnotation, "true", false)
	var steps []lbv1.EndpointMoveStep
	for range 20 {
		h.reconcile("edge")
		cur := h.lb("edge")
		st := cur.Status.EndpointMove
		if st == nil {
			continue
		}
		if len(steps) == 0 || steps[len(steps)-1] != st.Step {
			steps = append(steps, st.Step)
		}
		if st.Step == lbv1.MoveStepDone {
			break
		}
		g.Expect(targetStates(cur)["cp-a"]).To(Equal(lbv1.TargetDisabling), "cp-a is held while the Cluster or the move names it (step %s)", st.Step)
		h.clock = h.clock.Add(3 * time.Second) // the drain period passes meanwhile: only the move holds cp-a
	}
	g.Expect(steps).To(ContainElements(lbv1.MoveStepClusterInfo, lbv1.MoveStepKubeconfigSecret, lbv1.MoveStepClusterEndpoint, lbv1.MoveStepDone))
	g.Expect(steps).NotTo(ContainElement(lbv1.MoveStepReleaseOld), "no old LoadBalancer to release")
	h.reconcile("edge") // the Cluster's change brings the next reconcile
	cur := h.lb("edge")
	g.Expect(cur.Status.Endpoint).To(Equal(lbv1.APIEndpoint{Host: "10.0.0.2", Port: 6443}))
	g.Expect(h.cluster("prod").Spec.ControlPlaneEndpoint).To(Equal(clusterv1.APIEndpoint{Host: "10.0.0.2", Port: 6443}))
	c := conditions.Get(cur, lbv1.EndpointMoveCondition)
	g.Expect(c).NotTo(BeNil())
	g.Expect(c.Reason).To(Equal(lbv1.SwitchedReason))
	g.Expect(c.Message).To(ContainSubstring("a member that left"))
	g.Expect(conditions.GetReason(cur, lbv1.ClusterEndpointCondition)).To(Equal(lbv1.ClusterEndpointSetReason))
	g.Expect(hasEvent(h.events(), corev1.EventTypeWarning, lbv1.EventClusterEndpointMismatch, "")).To(BeFalse(), "a member move is no mismatch")
	g.Expect(certs.calls).To(BeNumerically(">", 0))
	for _, k := range []client.ObjectKey{{Namespace: "kube-public", Name: "cluster-info"}, {Namespace: "kube-system", Name: "kube-proxy"}} {
		cm := &corev1.ConfigMap{}
		g.Expect(wl.Get(ctx, k, cm)).To(Succeed())
		for key, v := range cm.Data {
			if key != "jws-kubeconfig-abcdef" {
				g.Expect(v).To(ContainSubstring("server: https://10.0.0.2:6443"), "%s %s", k, key)
			}
		}
	}
	sec := &corev1.Secret{}
	g.Expect(h.c.Get(ctx, client.ObjectKey{Namespace: "ns", Name: "prod-kubeconfig"}, sec)).To(Succeed())
	g.Expect(string(sec.Data["value"])).To(ContainSubstring("server: https://10.0.0.2:6443"))

	// Released once the Cluster moved: cp-a finishes its drain.
	for range 3 {
		h.clock = h.clock.Add(11 * time.Second)
		h.reconcile("edge")
	}
	g.Expect(targetStates(h.lb("edge"))["cp-a"]).To(Equal(lbv1.TargetDisabled))
}

// TestMemberMoveOnlyForItsOwnEndpoint: a Cluster endpoint a person set (not published by this
// LoadBalancer) is never moved, MoveEndpoint or not.
func TestMemberMoveOnlyForItsOwnEndpoint(t *testing.T) {
	cluster := testCluster("prod")
	cluster.Spec.ControlPlaneEndpoint = clusterv1.APIEndpoint{Host: "10.0.0.1", Port: 6443}
	lb := testLB("edge", "prod")
	lb.Spec.Backend = lbv1.Backend{Static: &lbv1.StaticBackend{OnPublishedMemberLeave: lbv1.MemberLeaveMoveEndpoint}}
	h := newHarness(t, cluster, lb, testMachine("cp-a", "prod", "10.0.0.1", true, true), testMachine("cp-b", "prod", "10.0.0.2", true, true))
	h.annotate("cp-a", lbv1.DisabledAnnotation, "true", false)
	for range 4 {
		h.reconcile("edge")
	}
	g := h.g
	g.Expect(h.lb("edge").Status.EndpointMove).To(BeNil())
	g.Expect(h.cluster("prod").Spec.ControlPlaneEndpoint.Host).To(Equal("10.0.0.1"))
}
