package controllers

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lbv1 "github.com/caplb/caplb/api/v1alpha1"
)

// Node targets are an opt-in with a fence. A LoadBalancer with targetKind Node annotates and
// claims Nodes of the cluster the manager runs in; on a management cluster that any tenant
// namespace can create LoadBalancers in, `selector: {}` would hand them every Node. So the manager
// accepts Node targets only when started with --node-targets-namespace, and only for
// LoadBalancers in that namespace (its own, in a standalone install); the RBAC for Nodes ships as
// a separate kustomize component (config/rbac/node-targets).

// nodeTargetErrors returns why lb may not target Nodes on this manager, nil when it may (or does
// not target Nodes). allowedNS is the manager's --node-targets-namespace ("" = disabled).
//
// Remote Node targets (spec.clusterName set) are not fenced: their Nodes are a workload
// cluster's, reached with the credentials of the Cluster's kubeconfig Secret that the tenant
// supplied, never with the manager's own rights. remoteNodeKind hides any Node of the
// manager's own cluster that such a kubeconfig might reach anyway (remote_nodes.go).
func nodeTargetErrors(lb *lbv1.LoadBalancer, allowedNS string) field.ErrorList {
	if !lb.Spec.LocalNodes() {
		return nil
	}
	p := field.NewPath("spec", "targetKind")
	switch {
	case allowedNS == "":
		return field.ErrorList{field.Forbidden(p, "Node targets are disabled on this manager: start it with "+
			"--node-targets-namespace=<its own namespace> and install the node-targets RBAC component, or target Machines")}
	case lb.Namespace != allowedNS:
		return field.ErrorList{field.Forbidden(p, fmt.Sprintf(
			"Node targets are accepted only for LoadBalancers in namespace %q on this manager: create it there", allowedNS))}
	}
	return nil
}

// memberKindFor picks how lb's members are read; a LoadBalancer outside the Node-target fence gets
// a kind that sees no Node at all, so that nothing is read, annotated or claimed for it. Remote
// Node targets go through the workload cluster's ClusterCache client; their reachability is
// recorded in s.workload.
func (r *LoadBalancerReconciler) memberKindFor(ctx context.Context, s *scope) memberKind {
	lb := s.lb
	if lb.Spec.RemoteNodes() {
		k, cond := r.remoteKindFor(ctx, lb)
		s.workload = &cond
		return k
	}
	if len(nodeTargetErrors(lb, r.NodeTargetsNamespace)) > 0 {
		return fencedKind{}
	}
	return kindFor(lb, r.Client)
}

// fencedKind is the memberKind of a LoadBalancer that may not target Nodes: no candidates, nothing
// annotated.
type fencedKind struct{}

func (fencedKind) kind() string { return lbv1.NodeKind }
func (fencedKind) hooks() bool  { return false }
func (fencedKind) candidates(context.Context, *lbv1.LoadBalancer) ([]client.Object, error) {
	return nil, nil
}
func (fencedKind) annotated(context.Context, *lbv1.LoadBalancer) ([]client.Object, error) {
	return nil, nil
}
func (fencedKind) get(_ context.Context, _ *lbv1.LoadBalancer, name string) (client.Object, error) {
	return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "nodes"}, name)
}
func (fencedKind) facts(lb *lbv1.LoadBalancer, obj client.Object) facts { return commonFacts(lb, obj) }
func (fencedKind) patch(context.Context, client.Object, client.Patch) error {
	return fmt.Errorf("node targets are fenced on this manager: nothing may be written")
}

var _ memberKind = fencedKind{}
