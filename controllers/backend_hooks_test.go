package controllers

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/cluster-api/util/conditions"

	lbv1 "github.com/caplb/caplb/api/v1alpha1"
	"github.com/caplb/caplb/providers"
)

// scripted is a backend whose Ensure answers what the test says, and records the members and
// their Node names it was given.
type scripted struct {
	status providers.EndpointStatus
	seen   []providers.Member
}

func (s *scripted) Kind() string                                { return lbv1.BackendStatic }
func (s *scripted) Validate(*lbv1.LoadBalancer) field.ErrorList { return nil }
func (s *scripted) Ensure(_ context.Context, _ *lbv1.LoadBalancer, ms []providers.Member) (providers.EndpointStatus, error) {
	s.seen = ms
	return s.status, nil
}
func (s *scripted) Quiesce(context.Context, *lbv1.LoadBalancer, providers.Member) (providers.QuiesceStatus, error) {
	return providers.QuiesceStatus{Done: true}, nil
}
func (s *scripted) Restore(context.Context, *lbv1.LoadBalancer, providers.Member) (providers.QuiesceStatus, error) {
	return providers.QuiesceStatus{Done: true}, nil
}
func (s *scripted) Release(context.Context, *lbv1.LoadBalancer) error { return nil }

// A backend's own conditions land on the LoadBalancer; RotationUnknown keeps members' states
// (an unreachable workload cluster does not make every member inactive); members carry their
// Node names.
func TestBackendConditionsAndRotationUnknown(t *testing.T) {
	m1 := testMachine("m1", "c1", "10.0.0.1", true, true)
	m1.Status.NodeRef.Name = "node-a"
	h := newHarness(t, testCluster("c1"), m1, testMachine("m2", "c1", "10.0.0.2", true, true), testLB("lb", "c1"))
	g := h.g
	b := &scripted{status: providers.EndpointStatus{
		Endpoint:   lbv1.APIEndpoint{Host: "10.0.0.100", Port: 6443},
		Available:  true,
		InRotation: map[string]bool{"m1": true, "m2": true},
		Conditions: []metav1.Condition{{Type: lbv1.AddressAllocatedCondition, Status: metav1.ConditionTrue,
			Reason: lbv1.AddressAllocatedReason, Message: "the VIP is 10.0.0.100"}},
	}}
	reg, err := providers.NewRegistry(b)
	g.Expect(err).NotTo(HaveOccurred())
	h.r.Backends = reg

	h.reconcile("lb")
	h.reconcile("lb")
	lb := h.lb("lb")
	g.Expect(targetStates(lb)).To(Equal(map[string]lbv1.TargetState{"m1": lbv1.TargetActive, "m2": lbv1.TargetActive}))
	g.Expect(conditions.IsTrue(lb, lbv1.AddressAllocatedCondition)).To(BeTrue())
	g.Expect(conditions.GetMessage(lb, lbv1.AddressAllocatedCondition)).To(Equal("the VIP is 10.0.0.100"))
	nodes := map[string]string{}
	for _, m := range b.seen {
		nodes[m.Name] = m.NodeName
	}
	g.Expect(nodes).To(Equal(map[string]string{"m1": "node-a", "m2": ""}))

	b.status.InRotation, b.status.RotationUnknown = map[string]bool{}, true
	h.reconcile("lb")
	g.Expect(targetStates(h.lb("lb"))).To(Equal(map[string]lbv1.TargetState{"m1": lbv1.TargetActive, "m2": lbv1.TargetActive}),
		"unknown rotation keeps states")

	b.status.RotationUnknown = false
	h.reconcile("lb")
	g.Expect(targetStates(h.lb("lb"))).To(Equal(map[string]lbv1.TargetState{"m1": lbv1.TargetAdding, "m2": lbv1.TargetAdding}))
}

// Without spec.backend.arp.takeOver the takeover's conditions go, except KubeVIPTakeOver while
// the backend still reports it (the fence of a withdrawn takeover is not deleted yet).
func TestTakeOverConditionsWithoutTakeOver(t *testing.T) {
	ready := metav1.Condition{Type: lbv1.KubeVIPTakeOverReadyCondition, Status: metav1.ConditionTrue, Reason: lbv1.KubeVIPTakeOverReadyReason}
	failed := metav1.Condition{Type: lbv1.KubeVIPTakeOverCondition, Status: metav1.ConditionUnknown, Reason: lbv1.KubeVIPFenceFailedReason,
		Message: "deleting the fence Lease kube-system/plndr-cp-lock failed"}
	h := newHarness(t, testCluster("c1"), testMachine("m1", "c1", "10.0.0.1", true, true), testLB("lb", "c1"))
	g := h.g
	b := &scripted{status: providers.EndpointStatus{Endpoint: lbv1.APIEndpoint{Host: "10.0.0.100", Port: 6443}, Available: true}}
	reg, err := providers.NewRegistry(b)
	g.Expect(err).NotTo(HaveOccurred())
	h.r.Backends = reg

	for _, step := range []struct {
		name     string
		reported []metav1.Condition
		kept     bool
	}{
		{"the fence is not deleted yet: kept", []metav1.Condition{ready, failed}, true},
		{"the fence is gone: dropped", []metav1.Condition{ready}, false},
	} {
		b.status.Conditions = step.reported
		h.reconcile("lb")
		lb := h.lb("lb")
		g.Expect(conditions.Has(lb, lbv1.KubeVIPTakeOverReadyCondition)).To(BeFalse(), step.name)
		g.Expect(conditions.Has(lb, lbv1.KubeVIPTakeOverCondition)).To(Equal(step.kept), step.name)
	}
}
