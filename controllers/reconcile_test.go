package controllers

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	lbv1 "github.com/caplb/caplb/api/v1alpha1"
)

// TestMemberLifecycle walks a static LoadBalancer with an empty host through the proposal's
// flow: publish from a ready member, disable and restore a member, delete a member through the
// hook, and delete the LoadBalancer.
func TestMemberLifecycle(t *testing.T) {
	h := newHarness(t,
		testCluster("c1"),
		testMachine("m1", "c1", "10.0.0.1", true, true),
		testMachine("m2", "c1", "10.0.0.2", true, true),
		testMachine("m3", "c1", "10.0.0.3", true, false),
		testMachine("w1", "c1", "10.0.0.9", false, true), // worker: never a member
		testMachine("x1", "c2", "10.0.1.1", true, true),  // other cluster
		testLB("lb", "c1"),
	)
	g := h.g
	hook := lbv1.PreDrainHookAnnotation("lb")

	h.reconcile("lb")
	lb := h.lb("lb")
	g.Expect(lb.Finalizers).To(ContainElement(lbv1.LoadBalancerFinalizer))
	g.Expect(targetStates(lb)).To(Equal(map[string]lbv1.TargetState{
		"m1": lbv1.TargetActive, "m2": lbv1.TargetActive, "m3": lbv1.TargetAdding,
	}), "ready members go straight to active; the not-ready one waits")
	g.Expect(lb.Status.ActiveTargets).To(Equal(int32(2)))
	g.Expect(lb.Status.TotalTargets).To(Equal(int32(3)))
	g.Expect(lb.Status.Endpoint).To(Equal(lbv1.APIEndpoint{Host: "10.0.0.1", Port: 6443}))
	g.Expect(lb.Status.Backend).To(Equal("static"))
	g.Expect(lb.Status.ObservedGeneration).To(Equal(lb.Generation))
	g.Expect(conditions.IsTrue(lb, lbv1.ReadyCondition)).To(BeTrue())
	g.Expect(conditions.IsTrue(lb, lbv1.EndpointAvailableCondition)).To(BeTrue())
	g.Expect(conditions.IsTrue(lb, lbv1.ClusterEndpointCondition)).To(BeTrue())
	g.Expect(conditions.IsFalse(lb, lbv1.PausedCondition)).To(BeTrue())
	g.Expect(conditions.Get(lb, lbv1.TargetsAvailableCondition).Message).To(ContainSubstring("2 of 3 targets active; m3 adding (not ready)"))
	c := h.cluster("c1")
	g.Expect(c.Spec.ControlPlaneEndpoint).To(Equal(clusterv1.APIEndpoint{Host: "10.0.0.1", Port: 6443}))
	for _, n := range []string{"m1", "m2", "m3"} {
		m := h.machine(n)
		g.Expect(m.Annotations).To(HaveKeyWithValue(lbv1.NameAnnotation, "lb"), n)
		g.Expect(m.Annotations).To(HaveKeyWithValue(hook, lbv1.HookOwner), n)
	}
	g.Expect(h.machine("m1").Annotations).To(HaveKeyWithValue(lbv1.StatusAnnotation, "active"))
	g.Expect(h.machine("m3").Annotations).To(HaveKeyWithValue(lbv1.StatusAnnotation, "adding"))
	g.Expect(h.machine("w1").Annotations).To(BeEmpty())
	g.Expect(h.machine("x1").Annotations).To(BeEmpty())
	met := h.r.Metrics
	g.Expect(metricValue(met.hooksHeld.WithLabelValues("ns", "lb"))).To(Equal(3.0))
	g.Expect(metricValue(met.targets.WithLabelValues("ns", "lb", "active"))).To(Equal(2.0))
	g.Expect(metricValue(met.targets.WithLabelValues("ns", "lb", "adding"))).To(Equal(1.0))
	g.Expect(metricValue(met.ready.WithLabelValues("ns", "lb"))).To(Equal(1.0))
	evs := h.events()
	g.Expect(hasEvent(evs, "Normal", lbv1.EventTargetAdded, "m3")).To(BeTrue(), "%v", evs)
	g.Expect(hasEvent(evs, "Normal", lbv1.EventTargetActive, "m1")).To(BeTrue())
	g.Expect(hasEvent(evs, "Normal", lbv1.EventClusterEndpointSet, "10.0.0.1:6443")).To(BeTrue())

	// Disable the endpoint holder: it quiesces, the endpoint moves, the Cluster keeps its
	// endpoint and the LoadBalancer reports the mismatch.
	h.annotate("m1", lbv1.DisabledAnnotation, "maintenance", false)
	h.reconcile("lb")
	lb = h.lb("lb")
	g.Expect(targetStates(lb)["m1"]).To(Equal(lbv1.TargetDisabling))
	g.Expect(lb.Status.Endpoint.Host).To(Equal("10.0.0.2"))
	g.Expect(h.cluster("c1").Spec.ControlPlaneEndpoint.Host).To(Equal("10.0.0.1"), "never overwritten")
	g.Expect(conditions.GetReason(lb, lbv1.ClusterEndpointCondition)).To(Equal(lbv1.ClusterEndpointMismatchReason))
	g.Expect(lb.Spec.Endpoint.Host).To(BeEmpty(), "an endpoint we published and then moved away from is not adopted")
	evs = h.events()
	g.Expect(hasEvent(evs, "Warning", lbv1.EventEndpointMoved, "10.0.0.2")).To(BeTrue(), "%v", evs)
	g.Expect(hasEvent(evs, "Normal", lbv1.EventTargetDisabling, "m1")).To(BeTrue())
	g.Expect(hasEvent(evs, "Warning", lbv1.EventClusterEndpointMismatch, "never overwrites")).To(BeTrue())

	res := h.reconcile("lb")
	g.Expect(res.RequeueAfter).To(BeNumerically(">", 0))
	g.Expect(res.RequeueAfter).To(BeNumerically("<=", 10*time.Second))
	g.Expect(targetStates(h.lb("lb"))["m1"]).To(Equal(lbv1.TargetDisabling), "drain period not over")
	h.clock = h.clock.Add(10 * time.Second)
	h.reconcile("lb")
	g.Expect(targetStates(h.lb("lb"))["m1"]).To(Equal(lbv1.TargetDisabled))
	g.Expect(h.machine("m1").Annotations).To(HaveKeyWithValue(lbv1.StatusAnnotation, "disabled"))
	g.Expect(h.machine("m1").Annotations).To(HaveKey(hook), "a disabled member keeps its hook")

	// Restore: disabled → adding → active.
	h.annotate("m1", lbv1.DisabledAnnotation, "", true)
	h.reconcile("lb")
	g.Expect(targetStates(h.lb("lb"))["m1"]).To(Equal(lbv1.TargetAdding))
	h.reconcile("lb")
	g.Expect(targetStates(h.lb("lb"))["m1"]).To(Equal(lbv1.TargetActive))
	g.Expect(h.lb("lb").Status.Endpoint.Host).To(Equal("10.0.0.2"), "sticky: the endpoint does not move back")
	evs = h.events()
	g.Expect(hasEvent(evs, "Normal", lbv1.EventTargetEnabled, "m1")).To(BeTrue(), "%v", evs)

	// Delete m2 (the holder). CAPI would wait on our hook; we quiesce, then release it.
	m2 := h.machine("m2")
	m2.Finalizers = []string{clusterv1.MachineFinalizer}
	g.Expect(h.c.Update(context.Background(), m2)).To(Succeed())
	g.Expect(h.c.Delete(context.Background(), m2)).To(Succeed())
	h.reconcile("lb")
	lb = h.lb("lb")
	g.Expect(targetStates(lb)["m2"]).To(Equal(lbv1.TargetRemoving))
	g.Expect(lb.Status.Endpoint.Host).To(Equal("10.0.0.1"))
	g.Expect(h.machine("m2").Annotations).To(HaveKey(hook), "hook held while quiescing")
	h.clock = h.clock.Add(10 * time.Second)
	h.reconcile("lb")
	g.Expect(targetStates(h.lb("lb"))["m2"]).To(Equal(lbv1.TargetRemoved))
	g.Expect(h.machine("m2").Annotations).NotTo(HaveKey(hook), "hook released once quiesced")
	g.Expect(h.machine("m2").Annotations).To(HaveKeyWithValue(lbv1.StatusAnnotation, "removed"))
	evs = h.events()
	g.Expect(hasEvent(evs, "Normal", lbv1.EventTargetRemoving, "m2")).To(BeTrue(), "%v", evs)
	g.Expect(hasEvent(evs, "Normal", lbv1.EventTargetRemoved, "m2")).To(BeTrue(), "%v", evs)

	// CAPI finishes: the Machine goes away and leaves status.targets quietly.
	m2 = h.machine("m2")
	m2.Finalizers = nil
	g.Expect(h.c.Update(context.Background(), m2)).To(Succeed())
	h.reconcile("lb")
	g.Expect(targetStates(h.lb("lb"))).NotTo(HaveKey("m2"))
	g.Expect(hasEvent(h.events(), "Warning", lbv1.EventTargetGoneWithoutQuiesce, "")).To(BeFalse())

	// Delete the LoadBalancer: every mark goes, then the finalizer.
	g.Expect(h.c.Delete(context.Background(), h.lb("lb"))).To(Succeed())
	h.reconcile("lb")
	lbGone := &lbv1.LoadBalancer{}
	g.Expect(h.c.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: "lb"}, lbGone)).NotTo(Succeed())
	for _, n := range []string{"m1", "m3"} {
		ann := h.machine(n).Annotations
		g.Expect(ann).NotTo(HaveKey(hook), n)
		g.Expect(ann).NotTo(HaveKey(lbv1.NameAnnotation), n)
		g.Expect(ann).NotTo(HaveKey(lbv1.StatusAnnotation), n)
	}
	g.Expect(hasEvent(h.events(), "Normal", lbv1.EventReleased, "2 Machine")).To(BeTrue())
	g.Expect(seriesCount(met.hooksHeld)).To(BeZero(), "series of a deleted LoadBalancer are dropped")
	g.Expect(seriesCount(met.targets)).To(BeZero())
	g.Expect(metricValue(met.reconcileTotal.WithLabelValues(resultSuccess))).To(BeNumerically(">", 5))
}

func TestQuiesceTimeoutReleasesHook(t *testing.T) {
	// A single member carrying the endpoint cannot hand it over: the quiesce never completes and
	// the timeout releases the hook anyway.
	h := newHarness(t, testCluster("c1"), testMachine("m1", "c1", "10.0.0.1", true, true), testLB("lb", "c1"))
	g := h.g
	h.reconcile("lb")
	m := h.machine("m1")
	m.Finalizers = []string{clusterv1.MachineFinalizer}
	g.Expect(h.c.Update(context.Background(), m)).To(Succeed())
	g.Expect(h.c.Delete(context.Background(), m)).To(Succeed())
	h.reconcile("lb")
	g.Expect(targetStates(h.lb("lb"))["m1"]).To(Equal(lbv1.TargetRemoving))
	h.clock = h.clock.Add(30 * time.Second)
	h.reconcile("lb")
	g.Expect(targetStates(h.lb("lb"))["m1"]).To(Equal(lbv1.TargetRemoving), "still the endpoint holder")
	h.clock = h.clock.Add(31 * time.Second)
	h.reconcile("lb")
	g.Expect(targetStates(h.lb("lb"))["m1"]).To(Equal(lbv1.TargetRemoved))
	g.Expect(h.machine("m1").Annotations).NotTo(HaveKey(lbv1.PreDrainHookAnnotation("lb")))
	g.Expect(hasEvent(h.events(), "Warning", lbv1.EventQuiesceTimeout, "m1")).To(BeTrue())
}

func TestFixedHostPublishesBeforeAnyMember(t *testing.T) {
	// KCP creates its first Machine only once the Cluster has an endpoint.
	h := newHarness(t, testCluster("c1"), func() *lbv1.LoadBalancer {
		lb := testLB("lb", "c1")
		lb.Spec.Endpoint = lbv1.APIEndpoint{Host: "api.example.com", Port: 443}
		lb.Spec.HealthCheck.Disabled = true
		return lb
	}())
	g := h.g
	h.reconcile("lb")
	lb := h.lb("lb")
	g.Expect(lb.Status.Endpoint).To(Equal(lbv1.APIEndpoint{Host: "api.example.com", Port: 443}))
	g.Expect(h.cluster("c1").Spec.ControlPlaneEndpoint).To(Equal(clusterv1.APIEndpoint{Host: "api.example.com", Port: 443}))
	g.Expect(conditions.GetReason(lb, lbv1.ReadyCondition)).To(Equal(lbv1.NoTargetsReason))
	g.Expect(conditions.IsTrue(lb, lbv1.EndpointAvailableCondition)).To(BeTrue())
}

func TestEmptyHostWaitsForReadyMember(t *testing.T) {
	h := newHarness(t, testCluster("c1"), testMachine("m1", "c1", "10.0.0.1", true, false), testLB("lb", "c1"))
	g := h.g
	h.reconcile("lb")
	lb := h.lb("lb")
	g.Expect(lb.Status.Endpoint.Host).To(BeEmpty())
	g.Expect(h.cluster("c1").Spec.ControlPlaneEndpoint.Host).To(BeEmpty())
	g.Expect(conditions.GetReason(lb, lbv1.ClusterEndpointCondition)).To(Equal(lbv1.WaitingForEndpointReason))
	g.Expect(conditions.GetReason(lb, lbv1.EndpointAvailableCondition)).To(Equal(lbv1.WaitingForEndpointReason))
}

func TestAdoptsPresetClusterEndpoint(t *testing.T) {
	c := testCluster("c1")
	c.Spec.ControlPlaneEndpoint = clusterv1.APIEndpoint{Host: "api.example.com", Port: 443}
	lb := testLB("lb", "c1")
	lb.Spec.HealthCheck.Disabled = true
	h := newHarness(t, c, testMachine("m1", "c1", "10.0.0.1", true, true), lb)
	g := h.g
	h.reconcile("lb")
	got := h.lb("lb")
	g.Expect(got.Spec.Endpoint).To(Equal(lbv1.APIEndpoint{Host: "api.example.com", Port: 443}), "written to spec: persistent")
	g.Expect(got.Status.Endpoint).To(Equal(lbv1.APIEndpoint{Host: "api.example.com", Port: 443}))
	g.Expect(conditions.IsTrue(got, lbv1.ClusterEndpointCondition)).To(BeTrue())
	g.Expect(hasEvent(h.events(), "Normal", lbv1.EventEndpointAdopted, "api.example.com")).To(BeTrue())
}

func TestNeverOverwritesDifferentClusterEndpoint(t *testing.T) {
	c := testCluster("c1")
	c.Spec.ControlPlaneEndpoint = clusterv1.APIEndpoint{Host: "10.9.9.9", Port: 6443}
	lb := testLB("lb", "c1")
	lb.Spec.Endpoint.Host = "10.0.0.100"
	lb.Spec.HealthCheck.Disabled = true
	h := newHarness(t, c, lb)
	g := h.g
	h.reconcile("lb")
	got := h.lb("lb")
	g.Expect(h.cluster("c1").Spec.ControlPlaneEndpoint.Host).To(Equal("10.9.9.9"))
	g.Expect(conditions.IsFalse(got, lbv1.ClusterEndpointCondition)).To(BeTrue())
	g.Expect(conditions.GetReason(got, lbv1.ClusterEndpointCondition)).To(Equal(lbv1.ClusterEndpointMismatchReason))
	g.Expect(hasEvent(h.events(), "Warning", lbv1.EventClusterEndpointMismatch, "10.9.9.9")).To(BeTrue())
	h.reconcile("lb")
	g.Expect(hasEvent(h.events(), "Warning", lbv1.EventClusterEndpointMismatch, "")).To(BeFalse(), "reported once, not every reconcile")
}

func TestPaused(t *testing.T) {
	c := testCluster("c1")
	c.Spec.Paused = ptrTo(true)
	h := newHarness(t, c, testMachine("m1", "c1", "10.0.0.1", true, true), testLB("lb", "c1"))
	g := h.g
	h.reconcile("lb")
	lb := h.lb("lb")
	g.Expect(conditions.IsTrue(lb, lbv1.PausedCondition)).To(BeTrue())
	g.Expect(lb.Status.Targets).To(BeEmpty())
	g.Expect(h.machine("m1").Annotations).To(BeEmpty(), "nothing happens while paused")

	c = h.cluster("c1")
	c.Spec.Paused = ptrTo(false)
	g.Expect(h.c.Update(context.Background(), c)).To(Succeed())
	h.reconcile("lb")
	lb = h.lb("lb")
	g.Expect(conditions.IsFalse(lb, lbv1.PausedCondition)).To(BeTrue())
	g.Expect(targetStates(lb)).To(HaveKeyWithValue("m1", lbv1.TargetActive), "unpausing carries on in the same reconcile")

	// The annotation on the LoadBalancer pauses too.
	lb.Annotations = map[string]string{clusterv1.PausedAnnotation: ""}
	g.Expect(h.c.Update(context.Background(), lb)).To(Succeed())
	h.annotate("m1", lbv1.DisabledAnnotation, "x", false)
	h.reconcile("lb")
	lb = h.lb("lb")
	g.Expect(conditions.IsTrue(lb, lbv1.PausedCondition)).To(BeTrue())
	g.Expect(targetStates(lb)).To(HaveKeyWithValue("m1", lbv1.TargetActive))
}

func TestClaimedByAnotherLoadBalancer(t *testing.T) {
	m := testMachine("m1", "c1", "10.0.0.1", true, true)
	m.Annotations = map[string]string{lbv1.NameAnnotation: "other"}
	h := newHarness(t, testCluster("c1"), m, testMachine("m2", "c1", "10.0.0.2", true, true), testLB("lb", "c1"))
	g := h.g
	h.reconcile("lb")
	g.Expect(targetStates(h.lb("lb"))).To(Equal(map[string]lbv1.TargetState{"m2": lbv1.TargetActive}))
	g.Expect(h.machine("m1").Annotations).To(Equal(map[string]string{lbv1.NameAnnotation: "other"}))
	g.Expect(hasEvent(h.events(), "Warning", lbv1.EventTargetClaimed, `"other"`)).To(BeTrue())
}

func TestSelectorChangeReleasesMember(t *testing.T) {
	m1 := testMachine("m1", "c1", "10.0.0.1", true, true)
	m1.Labels["role"] = "api"
	m2 := testMachine("m2", "c1", "10.0.0.2", true, true)
	m2.Labels["role"] = "api"
	lb := testLB("lb", "c1")
	lb.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"role": "api"}}
	h := newHarness(t, testCluster("c1"), m1, m2, lb)
	g := h.g
	h.reconcile("lb")
	g.Expect(targetStates(h.lb("lb"))).To(HaveLen(2))
	h.annotate("m2", "unrelated", "x", false)
	m := h.machine("m2")
	delete(m.Labels, "role")
	g.Expect(h.c.Update(context.Background(), m)).To(Succeed())
	h.reconcile("lb")
	g.Expect(targetStates(h.lb("lb"))).To(Equal(map[string]lbv1.TargetState{"m1": lbv1.TargetActive}))
	g.Expect(h.machine("m2").Annotations).To(Equal(map[string]string{"unrelated": "x"}), "released without quiesce")
	g.Expect(hasEvent(h.events(), "Normal", lbv1.EventTargetReleased, "m2")).To(BeTrue())
}

func TestMachineGoneWithoutQuiesce(t *testing.T) {
	h := newHarness(t, testCluster("c1"), testMachine("m1", "c1", "10.0.0.1", true, true),
		testMachine("m2", "c1", "10.0.0.2", true, true), testLB("lb", "c1"))
	g := h.g
	h.reconcile("lb")
	g.Expect(h.c.Delete(context.Background(), h.machine("m2"))).To(Succeed()) // no finalizer: gone at once
	h.reconcile("lb")
	g.Expect(targetStates(h.lb("lb"))).NotTo(HaveKey("m2"))
	g.Expect(hasEvent(h.events(), "Warning", lbv1.EventTargetGoneWithoutQuiesce, "m2")).To(BeTrue())
}

func TestInvalidSpecReleasesDeletingMembers(t *testing.T) {
	h := newHarness(t, testCluster("c1"), testMachine("m1", "c1", "10.0.0.1", true, true),
		testMachine("m2", "c1", "10.0.0.2", true, true), testLB("lb", "c1"))
	g := h.g
	h.reconcile("lb")
	lb := h.lb("lb")
	lb.Spec.Endpoint.Port = 443 // static with empty host: port must equal targetPort
	g.Expect(h.c.Update(context.Background(), lb)).To(Succeed())
	m := h.machine("m2")
	m.Finalizers = []string{clusterv1.MachineFinalizer}
	g.Expect(h.c.Update(context.Background(), m)).To(Succeed())
	g.Expect(h.c.Delete(context.Background(), m)).To(Succeed())
	h.reconcile("lb")
	lb = h.lb("lb")
	g.Expect(conditions.GetReason(lb, lbv1.ReadyCondition)).To(Equal(lbv1.InvalidSpecReason))
	g.Expect(conditions.GetMessage(lb, lbv1.ReadyCondition)).To(ContainSubstring("spec.endpoint.port"))
	g.Expect(h.machine("m2").Annotations).NotTo(HaveKey(lbv1.PreDrainHookAnnotation("lb")), "never block a Machine")
	g.Expect(h.machine("m1").Annotations).To(HaveKey(lbv1.PreDrainHookAnnotation("lb")), "other members untouched")
	g.Expect(targetStates(lb)).To(HaveKeyWithValue("m2", lbv1.TargetRemoved), "status.targets records the release (written by updateStatus only)")
	g.Expect(targetStates(lb)).To(HaveKeyWithValue("m1", lbv1.TargetActive))
	evs := h.events()
	g.Expect(hasEvent(evs, "Warning", lbv1.EventInvalidSpec, "spec.endpoint.port")).To(BeTrue(), "%v", evs)
}

func TestDeletionCleansHalfDoneMarks(t *testing.T) {
	// A hook without the name annotation (a crash between two patches, or a hand edit) is found
	// through the hook index and removed.
	m := testMachine("m9", "c1", "10.0.0.9", false, true)
	m.Annotations = map[string]string{lbv1.PreDrainHookAnnotation("lb"): lbv1.HookOwner}
	lb := testLB("lb", "c1")
	lb.Finalizers = []string{lbv1.LoadBalancerFinalizer}
	h := newHarness(t, testCluster("c1"), m, lb)
	g := h.g
	g.Expect(h.c.Delete(context.Background(), h.lb("lb"))).To(Succeed())
	h.reconcile("lb")
	g.Expect(h.machine("m9").Annotations).To(BeEmpty())
}

func TestRestartMidQuiesceKeepsSince(t *testing.T) {
	// The state and its Since time live in status.targets: a new reconciler (a restarted
	// manager) finishes the quiesce on the original schedule.
	h := newHarness(t, testCluster("c1"), testMachine("m1", "c1", "10.0.0.1", true, true),
		testMachine("m2", "c1", "10.0.0.2", true, true), testLB("lb", "c1"))
	g := h.g
	h.reconcile("lb")
	h.annotate("m2", lbv1.DisabledAnnotation, "x", false)
	h.reconcile("lb")
	since := h.lb("lb").Status.Targets[1].Since
	g.Expect(since.Time).To(BeTemporally("==", h.clock))

	restarted := newHarness(t)
	restarted.c, restarted.r.Client, restarted.r.APIReader = h.c, h.c, h.c
	restarted.clock = h.clock.Add(5 * time.Second)
	restarted.reconcile("lb")
	g.Expect(targetStates(restarted.lb("lb"))["m2"]).To(Equal(lbv1.TargetDisabling))
	g.Expect(restarted.lb("lb").Status.Targets[1].Since).To(Equal(since))
	restarted.clock = h.clock.Add(10 * time.Second)
	restarted.reconcile("lb")
	g.Expect(targetStates(restarted.lb("lb"))["m2"]).To(Equal(lbv1.TargetDisabled))
}

func TestFinalizerFirst(t *testing.T) {
	lb := testLB("lb", "c1")
	lb.Finalizers = nil
	h := newHarness(t, testCluster("c1"), testMachine("m1", "c1", "10.0.0.1", true, true), lb)
	g := h.g
	h.reconcile("lb")
	got := h.lb("lb")
	g.Expect(got.Finalizers).To(ConsistOf(lbv1.LoadBalancerFinalizer))
	g.Expect(h.machine("m1").Annotations).To(BeEmpty(), "no hook before the finalizer is stored")
	h.reconcile("lb")
	g.Expect(h.machine("m1").Annotations).To(HaveKey(lbv1.PreDrainHookAnnotation("lb")))
}

func TestNodeTargets(t *testing.T) {
	lb := newLB("lb")
	lb.Finalizers = []string{lbv1.LoadBalancerFinalizer}
	lb.Spec.ClusterName = ""
	lb.Spec.TargetKind = lbv1.TargetKind{Kind: lbv1.NodeKind}
	lb.Spec.HealthCheck.Disabled = true
	h := newHarness(t, testNode("n1", "10.0.0.1", true, true), testNode("n2", "10.0.0.2", false, true), lb)
	g := h.g
	// Fenced by default: no Node is touched and the spec is refused.
	h.reconcile("lb")
	got := h.lb("lb")
	g.Expect(targetStates(got)).To(BeEmpty())
	g.Expect(conditions.GetReason(got, lbv1.ReadyCondition)).To(Equal(lbv1.InvalidSpecReason))
	g.Expect(conditions.GetMessage(got, lbv1.ReadyCondition)).To(ContainSubstring("Node targets are disabled on this manager"))
	n := testNode("", "", false, false)
	g.Expect(h.c.Get(context.Background(), client.ObjectKey{Name: "n1"}, n)).To(Succeed())
	g.Expect(n.Annotations).To(BeEmpty())

	// Another namespace than the allowed one: still refused.
	h.r.NodeTargetsNamespace = "caplb-system"
	h.reconcile("lb")
	g.Expect(conditions.GetMessage(h.lb("lb"), lbv1.ReadyCondition)).To(ContainSubstring(`only for LoadBalancers in namespace "caplb-system"`))

	h.r.NodeTargetsNamespace = lb.Namespace
	h.reconcile("lb")
	got = h.lb("lb")
	g.Expect(targetStates(got)).To(Equal(map[string]lbv1.TargetState{"n1": lbv1.TargetActive}))
	g.Expect(got.Status.Endpoint.Host).To(Equal("10.0.0.1"))
	g.Expect(conditions.GetReason(got, lbv1.ClusterEndpointCondition)).To(Equal(lbv1.NoClusterReason))
	g.Expect(h.c.Get(context.Background(), client.ObjectKey{Name: "n1"}, n)).To(Succeed())
	g.Expect(n.Annotations).To(Equal(map[string]string{lbv1.NameAnnotation: "ns/lb", lbv1.StatusAnnotation: "active"}),
		"Nodes get no deletion hook")
}

func ptrTo[T any](v T) *T { return &v }

// metricValue reads one gauge or counter.
func metricValue(m prometheus.Metric) float64 {
	var d dto.Metric
	if err := m.Write(&d); err != nil {
		panic(err)
	}
	if d.Gauge != nil {
		return d.GetGauge().GetValue()
	}
	return d.GetCounter().GetValue()
}

// seriesCount counts the series a collector exports.
func seriesCount(c prometheus.Collector) int {
	ch := make(chan prometheus.Metric, 1000)
	c.Collect(ch)
	close(ch)
	return len(ch)
}

// A refused metadata/spec patch does not stop the status from being written: an adopted
// endpoint that the API server rejects must not freeze status.targets and the conditions.
func TestStatusWrittenWhenSpecPatchFails(t *testing.T) {
	cluster := testCluster("c")
	cluster.Spec.ControlPlaneEndpoint = clusterv1.APIEndpoint{Host: "api.example.com", Port: 6443}
	lb := testLB("lb", "c")
	lb.Spec.HealthCheck.Disabled = true
	h := newHarness(t, cluster, testMachine("m1", "c", "10.0.0.1", true, true), lb)
	g := h.g
	// Every patch of the LoadBalancer except its status fails.
	h.r.Client = interceptor.NewClient(h.c.(client.WithWatch), interceptor.Funcs{
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, p client.Patch, opts ...client.PatchOption) error {
			if _, ok := obj.(*lbv1.LoadBalancer); ok {
				return apierrors.NewInvalid(lbv1.GroupVersion.WithKind("LoadBalancer").GroupKind(), obj.GetName(), nil)
			}
			return c.Patch(ctx, obj, p, opts...)
		},
	})
	_, err := h.r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(lb)})
	g.Expect(err).To(MatchError(ContainSubstring("patching LoadBalancer metadata and spec")))
	got := h.lb("lb")
	g.Expect(got.Spec.Endpoint.Host).To(BeEmpty(), "the spec patch was refused")
	g.Expect(targetStates(got)).To(Equal(map[string]lbv1.TargetState{"m1": lbv1.TargetActive}), "status written all the same")
	g.Expect(got.Status.Endpoint.Host).To(Equal("api.example.com"))
}

// Member transitions a person looking at one Machine cares about are recorded regarding the
// Machine too (kubectl describe machine), not only regarding the LoadBalancer; a member joining is
// not (it would double the event writes when thousands of LoadBalancers are created).
func TestMemberEventsOnTheMachine(t *testing.T) {
	h := newHarness(t, testCluster("c1"), testMachine("m1", "c1", "10.0.0.1", true, true),
		testMachine("m2", "c1", "10.0.0.2", true, true), testLB("lb", "c1"))
	g := h.g
	rec := &regardingRecorder{}
	h.r.Recorder = rec
	h.reconcile("lb")
	g.Expect(rec.on("Machine", "m2")).To(BeEmpty(), "joining is told on the LoadBalancer only")
	h.annotate("m2", lbv1.DisabledAnnotation, "true", false)
	h.reconcile("lb")
	g.Expect(rec.on("Machine", "m2")).To(ContainElement(And(ContainSubstring(lbv1.EventTargetDisabling), ContainSubstring("LoadBalancer lb"))))
	g.Expect(rec.on("Machine", "m1")).To(BeEmpty())
}

// regardingRecorder keeps each event's regarding object.
type regardingRecorder struct{ got []string }

func (r *regardingRecorder) Eventf(regarding, _ runtime.Object, typ, reason, _, note string, args ...any) {
	o, _ := regarding.(client.Object)
	kind := fmt.Sprintf("%T", regarding)
	r.got = append(r.got, fmt.Sprintf("%s|%s|%s %s %s", kind, o.GetName(), typ, reason, fmt.Sprintf(note, args...)))
}

func (r *regardingRecorder) on(kind, name string) []string {
	var out []string
	for _, e := range r.got {
		if strings.HasPrefix(e, "*v1beta2."+kind+"|"+name+"|") || strings.HasPrefix(e, "*v1."+kind+"|"+name+"|") {
			out = append(out, e)
		}
	}
	return out
}

// The Cluster owns its LoadBalancer (clusterctl move and Cluster deletion take it along); a
// recreated Cluster of the same name takes the reference over.
func TestClusterOwnsLoadBalancer(t *testing.T) {
	c := testCluster("c1")
	c.UID = "uid-1"
	h := newHarness(t, c, testLB("lb", "c1"))
	g := h.g
	h.reconcile("lb")
	refs := h.lb("lb").OwnerReferences
	g.Expect(refs).To(HaveLen(1))
	g.Expect(refs[0].Kind).To(Equal("Cluster"))
	g.Expect(refs[0].UID).To(BeEquivalentTo("uid-1"))
	g.Expect(refs[0].Controller).To(BeNil(), "an owner, not the controller")

	lb := h.lb("lb")
	ensureClusterOwnerRef(lb, &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Name: "c1", UID: "uid-2"}})
	g.Expect(lb.OwnerReferences).To(HaveLen(1))
	g.Expect(lb.OwnerReferences[0].UID).To(BeEquivalentTo("uid-2"))
}

// A member write the API server refuses (RBAC) makes Ready False with the error, instead of
// reporting a Ready LoadBalancer whose hooks are not in place.
func TestReadyFalseWhenMemberWritesFail(t *testing.T) {
	h := newHarness(t, testCluster("c1"), testMachine("m1", "c1", "10.0.0.1", true, true), testLB("lb", "c1"))
	g := h.g
	h.r.Client = interceptor.NewClient(h.c.(client.WithWatch), interceptor.Funcs{
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, p client.Patch, opts ...client.PatchOption) error {
			if _, ok := obj.(*clusterv1.Machine); ok {
				return apierrors.NewForbidden(clusterv1.GroupVersion.WithResource("machines").GroupResource(), obj.GetName(), errors.New("RBAC: access denied"))
			}
			return c.Patch(ctx, obj, p, opts...)
		},
	})
	_, err := h.r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKey{Namespace: "ns", Name: "lb"}})
	g.Expect(err).To(HaveOccurred())
	got := h.lb("lb")
	g.Expect(conditions.IsTrue(got, lbv1.ReadyCondition)).To(BeFalse())
	g.Expect(conditions.GetReason(got, lbv1.ReadyCondition)).To(Equal(lbv1.ReconcileErrorReason))
	g.Expect(conditions.GetMessage(got, lbv1.ReadyCondition)).To(ContainSubstring("forbidden"))
}
