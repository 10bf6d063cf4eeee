package vip

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentv1 "github.com/caplb/caplb/api/agent/v1alpha1"
	lbv1 "github.com/caplb/caplb/api/v1alpha1"
)

// WorkloadClients gives a client to a Cluster's workload API server. CAPI's ClusterCache
// (sigs.k8s.io/cluster-api/controllers/clustercache) satisfies it; it answers an error while it
// has no healthy connection.
type WorkloadClients interface {
	GetClient(ctx context.Context, cluster client.ObjectKey) (client.Client, error)
}

// workload returns the client of the cluster whose Nodes run lb's agents: the workload cluster
// of spec.clusterName (Machine members and remote Node members), or the manager's own cluster
// for local Node members.
func (b *Backend) workload(ctx context.Context, lb *lbv1.LoadBalancer) (client.Client, error) {
	if lb.Spec.LocalNodes() {
		return b.opts.Client, nil
	}
	if b.opts.Workload == nil {
		return nil, fmt.Errorf("no workload cluster access configured")
	}
	c, err := b.opts.Workload.GetClient(ctx, client.ObjectKey{Namespace: lb.Namespace, Name: lb.Spec.ClusterName})
	if err != nil {
		return nil, fmt.Errorf("workload cluster %s/%s: %w", lb.Namespace, lb.Spec.ClusterName, err)
	}
	return c, nil
}

// readViews reads the named Nodes and what their agents report.
func (b *Backend) readViews(ctx context.Context, wl client.Client, names []string) (views, map[string]*corev1.Node, error) {
	vs := views{}
	nodes := map[string]*corev1.Node{}
	now := b.opts.Now.Now()
	for _, n := range names {
		if _, done := vs[n]; done {
			continue
		}
		node := &corev1.Node{}
		err := wl.Get(ctx, client.ObjectKey{Name: n}, node)
		switch {
		case apierrors.IsNotFound(err):
			vs[n] = agentView{}
			continue
		case err != nil:
			return nil, nil, fmt.Errorf("reading Node %s: %w", n, err)
		}
		nodes[n] = node
		vs[n] = viewOf(true, nodeReady(node), node.Annotations[agentv1.AgentStatusAnnotation], now, b.staleAfter())
	}
	return vs, nodes, nil
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// setNodeAnnotation makes the Node's annotation key equal value ("" removes it), patching only
// when it differs. A Node that is gone is left alone.
func setNodeAnnotation(ctx context.Context, wl client.Client, node *corev1.Node, key, value string) error {
	cur, has := node.Annotations[key]
	if (value == "" && !has) || (value != "" && has && cur == value) {
		return nil
	}
	orig := node.DeepCopy()
	if value == "" {
		delete(node.Annotations, key)
	} else {
		if node.Annotations == nil {
			node.Annotations = map[string]string{}
		}
		node.Annotations[key] = value
	}
	if err := wl.Patch(ctx, node, client.MergeFrom(orig)); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("annotating Node %s: %w", node.Name, err)
	}
	return nil
}
