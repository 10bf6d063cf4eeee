package v1alpha1

import (
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestWorkerSelectors(t *testing.T) {
	ml := func(k, v string) *metav1.LabelSelector {
		return &metav1.LabelSelector{MatchLabels: map[string]string{k: v}}
	}
	me := func(k string, op metav1.LabelSelectorOperator, vals ...string) *metav1.LabelSelector {
		return &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: k, Operator: op, Values: vals}}}
	}
	tests := []struct {
		name        string
		sel         *metav1.LabelSelector
		node        bool
		workers, cp bool
		secret      string
	}{
		{"default: the control plane", nil, false, false, true, "c-caplb-agent"},
		{"control-plane label", ml("cluster.x-k8s.io/control-plane", ""), false, false, true, "c-caplb-agent"},
		{"control-plane label exists", me("cluster.x-k8s.io/control-plane", metav1.LabelSelectorOpExists), false, false, true, "c-caplb-agent"},
		{"a MachineDeployment", ml("cluster.x-k8s.io/deployment-name", "c-md-0"), false, true, false, "lb-caplb-agent"},
		{"a MachineSet", ml("cluster.x-k8s.io/set-name", "c-md-0-x"), false, true, false, "lb-caplb-agent"},
		{"a MachinePool", me("cluster.x-k8s.io/pool-name", metav1.LabelSelectorOpIn, "c-mp-0"), false, true, false, "lb-caplb-agent"},
		{"a ClusterClass topology's MachineDeployment", ml("topology.cluster.x-k8s.io/deployment-name", "ingress"), false, true, false, "lb-caplb-agent"},
		{"no control-plane label", me("cluster.x-k8s.io/control-plane", metav1.LabelSelectorOpDoesNotExist), false, true, false, "lb-caplb-agent"},
		{"NotIn a MachineDeployment is not a worker selector", me("cluster.x-k8s.io/deployment-name", metav1.LabelSelectorOpNotIn, "x"), false, false, false, "c-caplb-agent"},
		{"labels of one's own: unknown", ml("role", "ingress"), false, false, false, "c-caplb-agent"},
		{"everything", &metav1.LabelSelector{}, false, false, false, "c-caplb-agent"},
		{"Nodes are never worker Machines", ml("cluster.x-k8s.io/deployment-name", "x"), true, false, false, "c-caplb-agent"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			lb := &LoadBalancer{Spec: LoadBalancerSpec{ClusterName: "c", Selector: tt.sel, Backend: Backend{ARP: &ARPBackend{}}}}
			lb.Name = "lb"
			if tt.node {
				lb.Spec.TargetKind = TargetKind{Kind: NodeKind}
			}
			g.Expect(lb.Spec.SelectsWorkerMachines()).To(Equal(tt.workers))
			g.Expect(lb.Spec.SelectsControlPlaneOnly()).To(Equal(tt.cp))
			g.Expect(AgentSecretName(lb)).To(Equal(tt.secret))
		})
	}
	g := NewWithT(t)
	wg := &LoadBalancer{Spec: LoadBalancerSpec{ClusterName: "c", Selector: ml("cluster.x-k8s.io/deployment-name", "x"),
		Backend: Backend{WireGuard: &WireGuardBackend{}}}}
	wg.Name = "lb"
	g.Expect(AgentSecretName(wg)).To(Equal("c-caplb-agent"), "wireguard's Secrets are the Cluster's")
	standalone := &LoadBalancer{Spec: LoadBalancerSpec{Backend: Backend{ARP: &ARPBackend{}}}}
	standalone.Name = "vip"
	g.Expect(AgentSecretName(standalone)).To(Equal("vip-caplb-agent"))
}
