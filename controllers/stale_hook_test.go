package controllers

import (
	"testing"

	. "github.com/onsi/gomega"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	lbv1 "github.com/caplb/caplb/api/v1alpha1"
)

// TestNoHookFromAStaleCache: a reconcile whose cache still shows a LoadBalancer that the API
// server no longer has (deleted, finalizer released, while the cache lagged) places no hook:
// nobody would be left to release it. With the LoadBalancer live, the hook is placed.
func TestNoHookFromAStaleCache(t *testing.T) {
	h := newHarness(t, testCluster("c1"), testMachine("m1", "c1", "10.0.0.1", true, true), testLB("lb", "c1"))
	g := h.g
	hook := lbv1.PreDrainHookAnnotation("lb")
	gone := fake.NewClientBuilder().WithScheme(h.c.Scheme()).Build()

	h.r.APIReader = gone
	h.reconcile("lb")
	h.reconcile("lb")
	g.Expect(h.machine("m1").Annotations).NotTo(HaveKey(hook), "no hook from a LoadBalancer the API server does not have")

	h.r.APIReader = h.c
	h.reconcile("lb")
	g.Expect(h.machine("m1").Annotations).To(HaveKey(hook), "the live LoadBalancer places its hook")
}
