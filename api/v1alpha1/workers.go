package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
)

// WorkerMachineLabels are the labels CAPI puts on worker Machines: a MachineDeployment's, a
// MachineSet's and a MachinePool's, and under a ClusterClass topology the name of the topology's
// MachineDeployment or MachinePool (stable across the generated object names, so a
// LoadBalancerClass template can name it). A control plane's Machines carry none of them, so a
// selector that requires one of them picks workers only.
var WorkerMachineLabels = []string{
	clusterv1.MachineDeploymentNameLabel,
	clusterv1.MachineSetNameLabel,
	clusterv1.MachinePoolNameLabel,
	clusterv1.ClusterTopologyMachineDeploymentNameLabel,
	clusterv1.ClusterTopologyMachinePoolNameLabel,
}

// AgentSecretSuffix ends the name of the bootstrap Secret the node agents boot from.
const AgentSecretSuffix = "-caplb-agent"

// AgentSecretName is the bootstrap Secret of a LoadBalancer with a node agent (arp, bgp,
// wireguard), in its namespace: <clusterName>-caplb-agent for a control plane's (the name every
// manifest written before worker targets references), <name>-caplb-agent for an arp or bgp
// LoadBalancer whose selector picks worker Machines (so that it can sit beside the control
// plane's) or one without a Cluster.
func AgentSecretName(lb *LoadBalancer) string {
	if lb.Spec.ClusterName == "" || (lb.Spec.Backend.VIP() != nil && lb.Spec.SelectsWorkerMachines()) {
		return lb.Name + AgentSecretSuffix
	}
	return lb.Spec.ClusterName + AgentSecretSuffix
}

// SelectsWorkerMachines reports whether the selector can pick worker Machines only: Machine
// targets, and the selector requires a MachineDeployment, MachineSet or MachinePool label
// (matchLabels, or matchExpressions In or Exists) or the absence of the control-plane label
// (DoesNotExist). Such a LoadBalancer fronts a service on workers, never the API server.
func (s *LoadBalancerSpec) SelectsWorkerMachines() bool {
	if s.TargetKind.IsNode() || s.Selector == nil {
		return false
	}
	for _, k := range WorkerMachineLabels {
		if requiresLabel(s.Selector, k) {
			return true
		}
	}
	for _, e := range s.Selector.MatchExpressions {
		if e.Key == clusterv1.MachineControlPlaneLabel && e.Operator == metav1.LabelSelectorOpDoesNotExist {
			return true
		}
	}
	return false
}

// SelectsControlPlaneOnly reports whether the members can only be control-plane Machines: Machine
// targets with the default selector, or a selector that requires the control-plane label.
func (s *LoadBalancerSpec) SelectsControlPlaneOnly() bool {
	if s.TargetKind.IsNode() {
		return false
	}
	return s.Selector == nil || requiresLabel(s.Selector, clusterv1.MachineControlPlaneLabel)
}

// requiresLabel: every object the selector matches carries key.
func requiresLabel(sel *metav1.LabelSelector, key string) bool {
	if _, ok := sel.MatchLabels[key]; ok {
		return true
	}
	for _, e := range sel.MatchExpressions {
		if e.Key == key && (e.Operator == metav1.LabelSelectorOpIn || e.Operator == metav1.LabelSelectorOpExists) {
			return true
		}
	}
	return false
}
