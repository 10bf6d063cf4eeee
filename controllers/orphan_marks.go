package controllers

import (
	"context"
	"errors"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lbv1 "github.com/caplb/caplb/api/v1alpha1"
)

// releaseOrphanMarks removes the deletion hooks and annotations that a LoadBalancer which no
// longer exists left on Machines. The delete path releases every mark before the finalizer goes,
// so nothing should be left; but a hook placed by a reconcile that raced the LoadBalancer's
// deletion would block its Machine's drain forever (seen once in e2e/install: a LoadBalancer
// created and deleted at once, its hook on the Machine, no owner left). A Machine that carries a
// caplb hook maps to the hook's LoadBalancer, so the reconcile that finds it gone lands here.
//
// The cache may be behind a create as well as a deletion: the LoadBalancer is read live first,
// and nothing is touched while it exists. Each Machine is read live too and patched under that
// resourceVersion, so that a Machine changed meanwhile is retried rather than overwritten.
func (r *LoadBalancerReconciler) releaseOrphanMarks(ctx context.Context, key client.ObjectKey) error {
	if !r.APIs.Machines {
		return nil
	}
	ghost := &lbv1.LoadBalancer{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}
	k := machineKind{c: r.Client, w: r.Client}
	objs, err := k.annotated(ctx, ghost)
	if err != nil || len(objs) == 0 {
		return err
	}
	if err := r.APIReader.Get(ctx, key, &lbv1.LoadBalancer{}); !apierrors.IsNotFound(err) {
		if err != nil {
			return fmt.Errorf("reading LoadBalancer %s before releasing what it left: %w", key, err)
		}
		return nil // it exists: the cache has not seen its create yet
	}
	log := ctrl.LoggerFrom(ctx)
	var errs []error
	live := machineKind{c: r.APIReader}
	for _, cached := range objs {
		// The cache is often just behind the delete path's own release: read each Machine live.
		o, err := live.get(ctx, ghost, cached.GetName())
		switch {
		case apierrors.IsNotFound(err):
			continue
		case err != nil:
			errs = append(errs, fmt.Errorf("reading Machine %s: %w", cached.GetName(), err))
			continue
		}
		modified := o.DeepCopyObject().(client.Object)
		if !desiredMarks(ghost, true, k.facts(ghost, o), record{}).apply(modified) {
			continue
		}
		err = k.patch(ctx, modified, client.MergeFromWithOptions(o, client.MergeFromWithOptimisticLock{}))
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			errs = append(errs, fmt.Errorf("releasing Machine %s from LoadBalancer %s, which no longer exists: %w", o.GetName(), key, err))
		default:
			log.Info("Released a Machine from a LoadBalancer that no longer exists", "Machine", klog.KObj(o), "LoadBalancer", klog.KRef(key.Namespace, key.Name))
		}
	}
	return errors.Join(errs...)
}
