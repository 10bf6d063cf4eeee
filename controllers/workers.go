package controllers

import (
	"fmt"
	"sort"
	"strings"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"

	lbv1 "github.com/caplb/caplb/api/v1alpha1"
)

// Worker targets: a LoadBalancer whose members are worker Machines (a MachineDeployment's, for an
// ingress controller on 80/443) fronts a service, not the API server, and must never write its
// endpoint to the Cluster: kubeadm would bake it into every certificate and kubeconfig, and the
// control plane's Machines could not join through it. CEL refuses the plain case at admission (a
// selector naming worker labels without publishClusterEndpoint: false); workerRefusal is the
// reconcile-time rule for the rest (a selector on labels of one's own, objects older than the
// rule).

// workerRefusal says why lb must not publish the Cluster's endpoint although its spec asks to
// (publishClusterEndpoint unset or true): its selector names worker Machines, or some Machine it
// selects is not a control-plane Machine. "" when it may publish. Pure.
func workerRefusal(lb *lbv1.LoadBalancer, members []*member) string {
	if !lb.Spec.PublishesClusterEndpoint() || lb.Spec.TargetKind.IsNode() {
		return ""
	}
	if lb.Spec.SelectsWorkerMachines() {
		return "spec.selector picks worker Machines (a MachineDeployment's, MachineSet's or MachinePool's): their service is not " +
			"the Cluster's API endpoint, so this LoadBalancer never publishes it; set spec.publishClusterEndpoint: false"
	}
	if workers := nonControlPlaneMembers(members); len(workers) > 0 {
		return fmt.Sprintf("spec.selector picks Machines that are not control-plane Machines (no %s label): %s; their service is not "+
			"the Cluster's API endpoint, so this LoadBalancer never publishes it; set spec.publishClusterEndpoint: false, "+
			"or narrow spec.selector to the control plane", clusterv1.MachineControlPlaneLabel, strings.Join(workers, ", "))
	}
	return ""
}

// nonControlPlaneMembers lists, sorted, the Machines the selector matches (selected, or claimed
// by another LoadBalancer) that do not carry the control-plane label.
func nonControlPlaneMembers(members []*member) []string {
	var out []string
	for _, m := range members {
		if m.obj == nil || (!m.obs.Selected && m.claimedBy == "") {
			continue
		}
		if _, cp := m.facts.labels[clusterv1.MachineControlPlaneLabel]; !cp {
			out = append(out, m.name)
		}
	}
	sort.Strings(out)
	return out
}

// refusedForWorkers: a peer that wants to publish but is refused for its worker targets is no
// rival publisher (decideOlderPublisher).
func refusedForWorkers(p *lbv1.LoadBalancer) bool {
	return p.Spec.SelectsWorkerMachines() || conditions.GetReason(p, lbv1.ClusterEndpointCondition) == lbv1.WorkerTargetsReason
}
