package controllers

import (
	"context"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ownNodeGuard tells whether a Node seen through a workload cluster's client is in fact a Node of
// the cluster the manager runs in. A tenant's kubeconfig Secret could lead back to the management
// cluster with credentials that reach the manager's own identity (a tokenFile naming its
// ServiceAccount token) and claim the Nodes that --node-targets-namespace fences. Only a manager
// with Node targets enabled may read its own Nodes at all, so only it has a guard (and needs one).
//
// The verdict is by UID: the management API server gives every object a UID no other object
// ever gets, so a UID is a management Node's exactly when a Node with that name and UID exists
// there. The manager's Node cache answers first; a UID it does not hold is looked up live by name,
// because the workload client's informer may see a new Node before the manager's own cache does
// (two informers on one API server). A UID the live read did not find (absent, or another UID
// under the name) can never become a management Node's later, so verdicts are remembered.
type ownNodeGuard struct {
	cache client.Reader
	live  client.Reader
	// verdicts maps a workload Node's UID to whether it is a management Node.
	verdicts *sync.Map
}

// isOwn reports whether n is a Node of the manager's own cluster.
func (g ownNodeGuard) isOwn(ctx context.Context, n client.Object, ownUIDs map[types.UID]bool) (bool, error) {
	uid := n.GetUID()
	if ownUIDs[uid] {
		return true, nil
	}
	if v, ok := g.verdicts.Load(uid); ok {
		return v.(bool), nil
	}
	live := &corev1.Node{}
	err := g.live.Get(ctx, client.ObjectKey{Name: n.GetName()}, live)
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return false, fmt.Errorf("checking Node %s against the management cluster's own Nodes: %w", n.GetName(), err)
	}
	own := err == nil && live.UID == uid
	g.verdicts.Store(uid, own)
	return own, nil
}

// filter drops the objects that are Nodes of the manager's own cluster.
func (g ownNodeGuard) filter(ctx context.Context, objs []client.Object) ([]client.Object, error) {
	if len(objs) == 0 {
		return objs, nil
	}
	var list corev1.NodeList
	if err := g.cache.List(ctx, &list); err != nil {
		return nil, fmt.Errorf("listing the management cluster's own Nodes: %w", err)
	}
	ownUIDs := make(map[types.UID]bool, len(list.Items))
	for i := range list.Items {
		ownUIDs[list.Items[i].UID] = true
	}
	out := objs[:0:0]
	for _, o := range objs {
		own, err := g.isOwn(ctx, o, ownUIDs)
		if err != nil {
			return nil, err
		}
		if own {
			ctrl.LoggerFrom(ctx).Info("Hiding a Node of the management cluster seen through a workload cluster's kubeconfig",
				"node", o.GetName())
			continue
		}
		out = append(out, o)
	}
	return out, nil
}
