package controllers

import (
	"context"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
)

// controlPlaneWatches starts, the first time a reconcile meets a control-plane kind, a
// metadata-only watch on it: when somebody adds spec.loadBalancerRef to a control plane (or
// creates it after the Cluster), the LoadBalancers of its Cluster are reconciled and publish to
// it. Which kinds exist is only known at run time (KubeadmControlPlane, k3s's, RKE2's, ...), so
// the watches are added to the running controller. A kind the manager may not watch (RBAC) is
// not retried: publication then falls back to a periodic re-check (controlPlaneRecheck).
type controlPlaneWatches struct {
	ctrl  controller.Controller
	cache cache.Cache
	// toRequests maps a control plane to the LoadBalancers of the Clusters that reference it.
	toRequests handler.MapFunc

	mu      sync.Mutex
	started map[schema.GroupVersionKind]bool
}

// ensure starts the watch for gvk once; it reports whether a watch runs for it.
func (w *controlPlaneWatches) ensure(ctx context.Context, gvk schema.GroupVersionKind) bool {
	if w == nil || w.ctrl == nil {
		return false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if ok, tried := w.started[gvk]; tried {
		return ok
	}
	obj := &metav1.PartialObjectMetadata{}
	obj.SetGroupVersionKind(gvk)
	err := w.ctrl.Watch(source.Kind(w.cache, client.Object(obj), handler.EnqueueRequestsFromMapFunc(w.toRequests),
		predicate.ResourceVersionChangedPredicate{}))
	if w.started == nil {
		w.started = map[schema.GroupVersionKind]bool{}
	}
	w.started[gvk] = err == nil
	if err != nil {
		ctrl.LoggerFrom(ctx).Info("Not watching control-plane kind; re-checking it periodically instead",
			"kind", gvk.String(), "error", err.Error())
	}
	return err == nil
}

// synced reports whether the watch on gvk has synced, without waiting: a cache read of a kind
// whose informer cannot list (RBAC) would block the reconcile worker until it does.
func (w *controlPlaneWatches) synced(ctx context.Context, gvk schema.GroupVersionKind) bool {
	obj := &metav1.PartialObjectMetadata{}
	obj.SetGroupVersionKind(gvk)
	inf, err := w.cache.GetInformer(ctx, obj, cache.BlockUntilSynced(false))
	return err == nil && inf.HasSynced()
}

// controlPlaneToLoadBalancers maps a control plane to the LoadBalancers of the Clusters in its
// namespace whose spec.controlPlaneRef names it.
func (r *LoadBalancerReconciler) controlPlaneToLoadBalancers(ctx context.Context, o client.Object) []reconcile.Request {
	var clusters clusterv1.ClusterList
	if err := r.Client.List(ctx, &clusters, client.InNamespace(o.GetNamespace())); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Listing Clusters of a control plane")
		return nil
	}
	gvk := o.GetObjectKind().GroupVersionKind()
	var reqs []reconcile.Request
	for i := range clusters.Items {
		ref := clusters.Items[i].Spec.ControlPlaneRef
		if ref.Name != o.GetName() || ref.Kind != gvk.Kind || ref.APIGroup != gvk.Group {
			continue
		}
		reqs = append(reqs, r.clusterToLoadBalancers(ctx, &clusters.Items[i])...)
	}
	return reqs
}

// cpMemo is what publishToControlPlane remembers per LoadBalancer: the control plane it last
// looked at, at which resourceVersion, and whether our endpoint is on it. Only "in sync" spares
// the next read; anything else is looked at again as soon as the control plane changes.
type cpMemo struct {
	ref             string
	resourceVersion string
	inSync          bool
}
