package controllers

import (
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"

	lbv1 "github.com/caplb/caplb/api/v1alpha1"
)

func TestWorkerRefusal(t *testing.T) {
	cpM := &member{name: "cp-1", obj: &clusterv1.Machine{}, obs: observation{Selected: true},
		facts: facts{labels: labels.Set{clusterv1.MachineControlPlaneLabel: ""}}}
	wM := func(name string, selected bool, claimedBy string) *member {
		return &member{name: name, obj: &clusterv1.Machine{}, obs: observation{Selected: selected}, claimedBy: claimedBy,
			facts: facts{labels: labels.Set{"role": "ingress"}}}
	}
	gone := &member{name: "w-gone"}
	md := &metav1.LabelSelector{MatchLabels: map[string]string{clusterv1.MachineDeploymentNameLabel: "c-md-0"}}
	custom := &metav1.LabelSelector{MatchLabels: map[string]string{"role": "ingress"}}
	tests := []struct {
		name    string
		sel     *metav1.LabelSelector
		publish *bool
		node    bool
		members []*member
		want    string // substring; "" publishes
	}{
		{"control plane by default", nil, nil, false, []*member{cpM}, ""},
		{"a MachineDeployment's selector, no members yet", md, nil, false, nil, "spec.selector picks worker Machines"},
		{"not a publisher: nothing to refuse", md, ptr.To(false), false, nil, ""},
		{"custom labels on a worker", custom, nil, false, []*member{cpM, wM("w-2", true, ""), wM("w-1", true, "")}, "not control-plane Machines (no cluster.x-k8s.io/control-plane label): w-1, w-2"},
		{"a worker claimed by another LoadBalancer still counts", custom, nil, false, []*member{wM("w-1", false, "other")}, "w-1"},
		{"a released worker does not count", custom, nil, false, []*member{cpM, wM("w-1", false, ""), gone}, ""},
		{"Node targets are not Machines", custom, nil, true, []*member{wM("n-1", true, "")}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lb := &lbv1.LoadBalancer{Spec: lbv1.LoadBalancerSpec{ClusterName: "c", Selector: tt.sel, PublishClusterEndpoint: tt.publish}}
			if tt.node {
				lb.Spec.TargetKind = lbv1.TargetKind{Kind: lbv1.NodeKind}
			}
			got := workerRefusal(lb, tt.members)
			if tt.want == "" {
				NewWithT(t).Expect(got).To(BeEmpty())
				return
			}
			NewWithT(t).Expect(got).To(And(ContainSubstring(tt.want), ContainSubstring("spec.publishClusterEndpoint: false")))
		})
	}
}

// A worker LoadBalancer that predates the CEL rule (or names workers by labels of its own) is no
// rival publisher for the control plane's.
func TestDecideOlderPublisherSkipsWorkerLoadBalancers(t *testing.T) {
	g := NewWithT(t)
	self := lbv1.LoadBalancer{}
	self.Name, self.CreationTimestamp = "cp", metav1.Unix(10, 0)
	byLabel := lbv1.LoadBalancer{}
	byLabel.Name, byLabel.CreationTimestamp = "ingress", metav1.Unix(5, 0)
	byLabel.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{clusterv1.MachineDeploymentNameLabel: "md"}}
	g.Expect(decideOlderPublisher(&self, []lbv1.LoadBalancer{byLabel})).To(BeEmpty())
	refused := lbv1.LoadBalancer{}
	refused.Name, refused.CreationTimestamp = "custom", metav1.Unix(5, 0)
	g.Expect(decideOlderPublisher(&self, []lbv1.LoadBalancer{refused})).To(Equal("custom"), "until it is refused, it counts")
	conditions.Set(&refused, metav1.Condition{Type: lbv1.ClusterEndpointCondition, Status: metav1.ConditionFalse, Reason: lbv1.WorkerTargetsReason})
	g.Expect(decideOlderPublisher(&self, []lbv1.LoadBalancer{refused})).To(BeEmpty())
}

// A static LoadBalancer whose selector (labels of its own) picks a worker Machine never writes the
// Cluster's endpoint, says why, and still serves its members; narrowed to the control plane it
// publishes.
func TestWorkerMembersNeverPublish(t *testing.T) {
	cp := testMachine("cp1", "c1", "10.0.0.1", true, true)
	cp.Labels["role"] = "web"
	w := testMachine("w1", "c1", "10.0.0.9", false, true)
	w.Labels["role"] = "web"
	lb := testLB("lb", "c1")
	lb.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"role": "web"}}
	h := newHarness(t, testCluster("c1"), cp, w, lb)
	g := h.g
	h.reconcile("lb")
	got := h.lb("lb")
	g.Expect(targetStates(got)).To(HaveKeyWithValue("w1", lbv1.TargetActive), "the worker is a member")
	g.Expect(h.machine("w1").Annotations).To(HaveKey(lbv1.PreDrainHookAnnotation("lb")), "and is held before drain like a control-plane one")
	c := conditions.Get(got, lbv1.ClusterEndpointCondition)
	g.Expect(c).NotTo(BeNil())
	g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
	g.Expect(c.Reason).To(Equal(lbv1.WorkerTargetsReason))
	g.Expect(c.Message).To(ContainSubstring("w1"))
	g.Expect(h.cluster("c1").Spec.ControlPlaneEndpoint.IsValid()).To(BeFalse(), "never published")
	g.Expect(hasEvent(h.events(), "Warning", lbv1.EventWorkerTargets, "w1")).To(BeTrue())
	h.reconcile("lb")
	g.Expect(hasEvent(h.events(), "Warning", lbv1.EventWorkerTargets, "w1")).To(BeFalse(), "one event per transition")

	// Narrowed to the control plane, it publishes.
	got = h.lb("lb")
	got.Spec.Selector.MatchLabels[clusterv1.MachineControlPlaneLabel] = ""
	g.Expect(h.c.Update(t.Context(), got)).To(Succeed())
	h.reconcile("lb")
	g.Expect(h.cluster("c1").Spec.ControlPlaneEndpoint.Host).To(Equal("10.0.0.1"))
}
