package controllers

import (
	"testing"

	"k8s.io/utils/ptr"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	lbv1 "github.com/caplb/caplb/api/v1alpha1"
)

func newLB(name string) *lbv1.LoadBalancer {
	return &lbv1.LoadBalancer{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name},
		Spec: lbv1.LoadBalancerSpec{
			ClusterName: "c1",
			TargetKind:  lbv1.TargetKind{APIGroup: lbv1.MachineAPIGroup, Kind: lbv1.MachineKind},
			Backend:     lbv1.Backend{Static: &lbv1.StaticBackend{}},
		},
	}
}

func TestMemberSelectorDefaults(t *testing.T) {
	cp := labels.Set{clusterv1.ClusterNameLabel: "c1", clusterv1.MachineControlPlaneLabel: ""}
	worker := labels.Set{clusterv1.ClusterNameLabel: "c1"}
	otherCluster := labels.Set{clusterv1.ClusterNameLabel: "c2", clusterv1.MachineControlPlaneLabel: ""}
	cpNode := labels.Set{nodeControlPlaneLabel: ""}
	workerNode := labels.Set{"node-role.kubernetes.io/worker": ""}

	machineLB := newLB("lb")
	nodeLB := newLB("lb")
	nodeLB.Spec.TargetKind = lbv1.TargetKind{Kind: lbv1.NodeKind}
	nodeLB.Spec.ClusterName = ""
	customLB := newLB("lb")
	customLB.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"role": "api"}}
	emptySelLB := newLB("lb")
	emptySelLB.Spec.Selector = &metav1.LabelSelector{}

	tests := []struct {
		name   string
		lb     *lbv1.LoadBalancer
		labels labels.Set
		want   bool
	}{
		{"default Machine selector: control-plane Machine of the cluster", machineLB, cp, true},
		{"default Machine selector: worker Machine", machineLB, worker, false},
		{"default Machine selector: other cluster", machineLB, otherCluster, false},
		{"default Node selector: control-plane Node", nodeLB, cpNode, true},
		{"default Node selector: worker Node", nodeLB, workerNode, false},
		{"custom selector matches", customLB, labels.Set{"role": "api"}, true},
		{"custom selector replaces the default", customLB, cp, false},
		{"empty selector matches everything", emptySelLB, worker, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			sel, err := memberSelector(tt.lb)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(sel.Matches(tt.labels)).To(Equal(tt.want))
		})
	}
}

func TestMemberSelectorInvalid(t *testing.T) {
	g := NewWithT(t)
	lb := newLB("lb")
	lb.Spec.Selector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "a", Operator: "Bogus"}}}
	_, err := memberSelector(lb)
	g.Expect(err).To(MatchError(ContainSubstring("spec.selector")))
}

func TestSelectionOf(t *testing.T) {
	lb := newLB("lb")
	sel, err := memberSelector(lb)
	if err != nil {
		t.Fatal(err)
	}
	cpLabels := labels.Set{clusterv1.ClusterNameLabel: "c1", clusterv1.MachineControlPlaneLabel: ""}
	tests := []struct {
		name        string
		f           facts
		wantSel     bool
		wantClaimed string
	}{
		{"unclaimed control-plane Machine", facts{cluster: "c1", labels: cpLabels}, true, ""},
		{"ours already", facts{cluster: "c1", labels: cpLabels, owner: "lb"}, true, ""},
		{"claimed by another LoadBalancer", facts{cluster: "c1", labels: cpLabels, owner: "other"}, false, "other"},
		{"label says c1 but spec.clusterName differs", facts{cluster: "c2", labels: cpLabels}, false, ""},
		{"not matching and claimed: not reported", facts{cluster: "c1", labels: labels.Set{}, owner: "other"}, false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			got, claimed := selectionOf(lb, sel, tt.f)
			g.Expect(got).To(Equal(tt.wantSel))
			g.Expect(claimed).To(Equal(tt.wantClaimed))
		})
	}
}

func TestSelectionOfAdditionalEndpointShares(t *testing.T) {
	g := NewWithT(t)
	lb := newLB("internal")
	lb.Spec.PublishClusterEndpoint = ptr.To(false)
	sel, err := memberSelector(lb)
	g.Expect(err).NotTo(HaveOccurred())
	cpLabels := labels.Set{clusterv1.ClusterNameLabel: "c1", clusterv1.MachineControlPlaneLabel: ""}
	got, claimed := selectionOf(lb, sel, facts{cluster: "c1", labels: cpLabels, owner: "lb"})
	g.Expect(got).To(BeTrue(), "a member of the publisher is shared")
	g.Expect(claimed).To(BeEmpty())
	got, _ = selectionOf(lb, sel, facts{cluster: "c2", labels: cpLabels, owner: "lb"})
	g.Expect(got).To(BeFalse(), "never another Cluster's Machine")
}

func TestOwnerValueAndHookIndex(t *testing.T) {
	g := NewWithT(t)
	lb := newLB("lb")
	g.Expect(ownerValue(lb)).To(Equal("lb"))
	nodeLB := newLB("lb")
	nodeLB.Spec.TargetKind = lbv1.TargetKind{Kind: lbv1.NodeKind}
	g.Expect(ownerValue(nodeLB)).To(Equal("ns/lb"), "Nodes are cluster-scoped: the namespace disambiguates")

	m := &clusterv1.Machine{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{
		lbv1.NameAnnotation:                                            "lb",
		lbv1.PreDrainHookAnnotation("lb"):                              lbv1.HookOwner,
		lbv1.PreDrainHookAnnotation("other"):                           lbv1.HookOwner,
		clusterv1.PreDrainDeleteHookAnnotationPrefix + "/someone-else": "x",
	}}}
	g.Expect(memberOfValues(m)).To(ConsistOf(memberIndexName("lb"), memberIndexHook("lb"), memberIndexHook("other")))

	long := "a-very-long-load-balancer-name-that-goes-past-the-sixty-three-character-limit"
	key := lbv1.PreDrainHookAnnotation(long)
	m.Annotations = map[string]string{key: lbv1.HookOwner}
	g.Expect(memberOfValues(m)).To(ConsistOf(memberIndexHook(long)), "hashed hook keys index the same way they are queried")
}

func TestPickAddress(t *testing.T) {
	g := NewWithT(t)
	g.Expect(pickAddress(map[string]string{"ExternalIP": "1.2.3.4", "InternalIP": "10.0.0.1"})).To(Equal("10.0.0.1"))
	g.Expect(pickAddress(map[string]string{"Hostname": "m1"})).To(Equal("m1"))
	g.Expect(pickAddress(nil)).To(BeEmpty())
}
