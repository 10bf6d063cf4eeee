package controllers

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lbv1 "github.com/caplb/caplb/api/v1alpha1"
)

// A Cluster may have several LoadBalancers (an internal VIP and an external endpoint). The
// rules between them: exactly one publishes the Cluster's endpoint (the oldest that wants to;
// the admission webhook refuses a second one, the reconciler is the backstop), and node-side
// data planes never share a Machine, because a node runs one caplb agent from one bootstrap
// Secret (dataPlaneConflicts).

// clusterPeers lists the other LoadBalancers of lb's Cluster from the cache, through the
// clusterName index: one indexed lookup, whatever the number of LoadBalancers.
func (r *LoadBalancerReconciler) clusterPeers(ctx context.Context, lb *lbv1.LoadBalancer) ([]lbv1.LoadBalancer, error) {
	if lb.Spec.ClusterName == "" {
		return nil, nil
	}
	var list lbv1.LoadBalancerList
	if err := r.Client.List(ctx, &list, client.InNamespace(lb.Namespace),
		client.MatchingFields{indexLBClusterName: lb.Spec.ClusterName}); err != nil {
		return nil, fmt.Errorf("listing the LoadBalancers of Cluster %s: %w", lb.Spec.ClusterName, err)
	}
	peers := list.Items[:0]
	for _, p := range list.Items {
		if p.Name != lb.Name && p.Spec.ClusterName == lb.Spec.ClusterName {
			peers = append(peers, p)
		}
	}
	return peers, nil
}

// clusterPublisher is the one publisher rule, applied by the reconciler (decideOlderPublisher)
// and by the admission webhook (PublisherValidator): of a Cluster's LoadBalancers, the one that
// publishes its endpoint is the oldest (creation time, then name) that wants to and is not being
// deleted or refused for worker targets; nil when none does. A LoadBalancer being deleted yields at once, so that its successor
// can take over.
func clusterPublisher(lbs []*lbv1.LoadBalancer) *lbv1.LoadBalancer {
	var best *lbv1.LoadBalancer
	for _, p := range lbs {
		if !p.Spec.PublishesClusterEndpoint() || refusedForWorkers(p) || !p.DeletionTimestamp.IsZero() {
			continue
		}
		if best == nil || precedes(p, best) {
			best = p
		}
	}
	return best
}

// decideOlderPublisher is the reconciler's view of clusterPublisher: lb (which wants to publish)
// among its peers. It returns the peer that publishes instead of lb, or "".
func decideOlderPublisher(lb *lbv1.LoadBalancer, peers []lbv1.LoadBalancer) string {
	all := []*lbv1.LoadBalancer{lb}
	for i := range peers {
		if peers[i].Name != lb.Name {
			all = append(all, &peers[i])
		}
	}
	if p := clusterPublisher(all); p != nil && p != lb {
		return p.Name
	}
	return ""
}

// dataPlaneConflicts is the pure node-agent rule: a LoadBalancer with a node-side backend (arp,
// bgp, wireguard) is refused while an older one of the same Cluster has one whose members can be
// the same Machines, or that renders the same bootstrap Secret, before it renders anything (its
// Secret would replace the other's). A node runs one caplb agent, and the Node annotations the
// agent and the manager exchange (membership, quiesce, agent-status) have one key each; a
// control plane's VIP and a worker ingress VIP pick disjoint Machines and coexist.
func dataPlaneConflicts(lb *lbv1.LoadBalancer, peers []lbv1.LoadBalancer) field.ErrorList {
	if !hasNodeAgent(lb) {
		return nil
	}
	for i := range peers {
		p := &peers[i]
		if p.Name == lb.Name || !hasNodeAgent(p) || !precedes(p, lb) {
			continue
		}
		fld := field.NewPath("spec", "backend", lb.Spec.Backend.Kind())
		if sec := lbv1.AgentSecretName(lb); sec == lbv1.AgentSecretName(p) {
			fix := "make this additional endpoint a spec.backend.static one (an external load balancer or DNS name in front of the members)"
			if lb.Spec.SelectsWorkerMachines() {
				fix = "give this LoadBalancer another name (its Secret is <name>-caplb-agent)"
			} else if lb.Spec.Backend.VIP() != nil {
				fix += ", or point spec.selector at worker Machines (matchLabels cluster.x-k8s.io/deployment-name: <MachineDeployment>)"
			}
			return field.ErrorList{field.Forbidden(fld, fmt.Sprintf(
				"LoadBalancer %s of Cluster %s already runs the node agent (%s backend) from bootstrap Secret %s, and a node runs one caplb agent: %s",
				p.Name, lb.Spec.ClusterName, p.Spec.Backend.Kind(), sec, fix))}
		}
		if !membersDisjoint(&lb.Spec, &p.Spec) {
			return field.ErrorList{field.Forbidden(fld, fmt.Sprintf(
				"LoadBalancer %s of Cluster %s already runs the node agent (%s backend) on Machines that this one's spec.selector can pick too, and a node runs one caplb agent: "+
					"point spec.selector at other Machines (another MachineDeployment's cluster.x-k8s.io/deployment-name), "+
					"or make this additional endpoint a spec.backend.static one",
				p.Name, lb.Spec.ClusterName, p.Spec.Backend.Kind()))}
		}
	}
	return nil
}

// membersDisjoint reports whether two LoadBalancers' selectors can never pick the same Machine:
// one picks control-plane Machines only and the other workers only, or both require the same
// worker label (a MachineDeployment's, MachineSet's or MachinePool's name) with different values.
func membersDisjoint(a, b *lbv1.LoadBalancerSpec) bool {
	if (a.SelectsControlPlaneOnly() && b.SelectsWorkerMachines()) || (b.SelectsControlPlaneOnly() && a.SelectsWorkerMachines()) {
		return true
	}
	if a.Selector == nil || b.Selector == nil || a.TargetKind.IsNode() || b.TargetKind.IsNode() {
		return false
	}
	for _, k := range lbv1.WorkerMachineLabels {
		va, okA := a.Selector.MatchLabels[k]
		vb, okB := b.Selector.MatchLabels[k]
		if okA && okB && va != vb {
			return true
		}
	}
	return false
}

func hasNodeAgent(lb *lbv1.LoadBalancer) bool {
	switch lb.Spec.Backend.Kind() {
	case lbv1.BackendARP, lbv1.BackendBGP, lbv1.BackendWireGuard:
		return true
	}
	return false
}

// precedes orders LoadBalancers by creation, then name.
func precedes(a, b *lbv1.LoadBalancer) bool {
	if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
		return a.CreationTimestamp.Before(&b.CreationTimestamp)
	}
	return a.Name < b.Name
}
