package controllers

import (
	"context"
	"reflect"

	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/annotations"
	"sigs.k8s.io/cluster-api/util/conditions"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	lbv1 "github.com/caplb/caplb/api/v1alpha1"
)

func (r *LoadBalancerClassReconciler) setupWithManager(mgr ctrl.Manager, name string, skipNameValidation bool) error {
	opts := controller.Options{MaxConcurrentReconciles: 4}
	if skipNameValidation {
		opts.SkipNameValidation = ptr.To(true)
	}
	b := ctrl.NewControllerManagedBy(mgr).
		Named(name).
		WithOptions(opts).
		For(&lbv1.LoadBalancerClass{}, builderPredicates(lbChanged))
	if r.Clusters {
		b = b.Watches(&clusterv1.Cluster{}, handler.EnqueueRequestsFromMapFunc(r.clusterToClasses),
			builderPredicates(clusterSelectionChanged))
	}
	return b.Watches(&lbv1.LoadBalancer{}, handler.EnqueueRequestsFromMapFunc(loadBalancerToClass),
		builder.WithPredicates(predicate.Funcs{
			CreateFunc: func(e event.CreateEvent) bool { return e.Object.GetLabels()[lbv1.ClassLabel] != "" },
			DeleteFunc: func(e event.DeleteEvent) bool { return e.Object.GetLabels()[lbv1.ClassLabel] != "" },
			UpdateFunc: func(e event.UpdateEvent) bool {
				return e.ObjectNew.GetLabels()[lbv1.ClassLabel] != "" && classLBChanged(e.ObjectOld, e.ObjectNew)
			},
		})).
		Complete(r)
}

// clusterSelectionChanged passes Cluster updates that may change a class's selection or its
// LoadBalancer: labels, deletion, a new UID under the same name, pause.
func clusterSelectionChanged(old, new client.Object) bool {
	oc, ok1 := old.(*clusterv1.Cluster)
	nc, ok2 := new.(*clusterv1.Cluster)
	return !ok1 || !ok2 || !reflect.DeepEqual(old.GetLabels(), new.GetLabels()) ||
		!old.GetDeletionTimestamp().Equal(new.GetDeletionTimestamp()) || old.GetUID() != new.GetUID() ||
		clusterPaused(oc) != clusterPaused(nc)
}

// clusterPaused is CAPI's pause rule for a Cluster: spec.paused or the paused annotation.
func clusterPaused(c *clusterv1.Cluster) bool {
	return ptr.Deref(c.Spec.Paused, false) || annotations.HasPaused(c)
}

// classLBChanged passes updates of a class's LoadBalancer the class reports on: its spec, its
// Ready condition, its deletion.
func classLBChanged(old, new client.Object) bool {
	o, ok1 := old.(*lbv1.LoadBalancer)
	n, ok2 := new.(*lbv1.LoadBalancer)
	if !ok1 || !ok2 {
		return true
	}
	return o.Generation != n.Generation || !o.DeletionTimestamp.Equal(n.DeletionTimestamp) ||
		conditions.IsTrue(o, lbv1.ReadyCondition) != conditions.IsTrue(n, lbv1.ReadyCondition) ||
		!reflect.DeepEqual(o.Labels, n.Labels)
}

// clusterToClasses maps a Cluster to every class in its namespace: whether one selects it is
// decided in the reconcile, from the cache.
func (r *LoadBalancerClassReconciler) clusterToClasses(ctx context.Context, o client.Object) []reconcile.Request {
	list := &lbv1.LoadBalancerClassList{}
	if err := r.Client.List(ctx, list, client.InNamespace(o.GetNamespace())); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Listing LoadBalancerClasses for a Cluster", "Cluster", o.GetName())
		return nil
	}
	out := make([]reconcile.Request, 0, len(list.Items))
	for _, c := range list.Items {
		out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&c)})
	}
	return out
}

// loadBalancerToClass maps a LoadBalancer to the class its label names.
func loadBalancerToClass(_ context.Context, o client.Object) []reconcile.Request {
	name := o.GetLabels()[lbv1.ClassLabel]
	if name == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: o.GetNamespace(), Name: name}}}
}
