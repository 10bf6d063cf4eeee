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
// the admission webhook refuses a second one, the reconciler is the backstop), and at most one
// runs a node-side data plane, because a node runs one caplb agent from one bootstrap Secret
// (<cluster>-caplb-agent).

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
// deleted; nil when none does. A LoadBalancer being deleted yields at once, so that its successor
// can take over.
func clusterPublisher(lbs []*lbv1.LoadBalancer) *lbv1.LoadBalancer {
	var best *lbv1.LoadBalancer
	for _, p := range lbs {
		if !p.Spec.PublishesClusterEndpoint() || !p.DeletionTimestamp.IsZero() {
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
// bgp, wireguard) is refused while an older one of the same Cluster has one, before it renders
// anything (its bootstrap Secret would replace the other's).
func dataPlaneConflicts(lb *lbv1.LoadBalancer, peers []lbv1.LoadBalancer) field.ErrorList {
	if !hasNodeAgent(lb) {
		return nil
	}
	for i := range peers {
		p := &peers[i]
		if p.Name != lb.Name && hasNodeAgent(p) && precedes(p, lb) {
			return field.ErrorList{field.Forbidden(field.NewPath("spec", "backend", lb.Spec.Backend.Kind()), fmt.Sprintf(
				"LoadBalancer %s of Cluster %s already runs the node agent (%s backend), and a node runs one caplb agent: "+
					"make this additional endpoint a spec.backend.static one (an external load balancer or DNS name in front of the members)",
				p.Name, lb.Spec.ClusterName, p.Spec.Backend.Kind()))}
		}
	}
	return nil
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
