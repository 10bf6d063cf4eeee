package controllers

import (
	"context"
	"strings"

	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	lbv1 "github.com/caplb/caplb/api/v1alpha1"
)

// reconcileDelete releases everything the LoadBalancer placed — hooks and annotations on every
// Machine or Node first, so that no Machine waits on a LoadBalancer that is going away, then the
// backend's resources — and only then drops the finalizer. Members are not quiesced: the
// endpoint itself is going away.
func (r *LoadBalancerReconciler) reconcileDelete(ctx context.Context, s *scope) error {
	lb := s.lb
	if !controllerutil.ContainsFinalizer(lb, lbv1.LoadBalancerFinalizer) {
		return nil
	}
	n := 0
	if uk, unreachable := s.kind.(unreachableKind); unreachable {
		// Remote Nodes carry no deletion hook: nothing waits on them, so the LoadBalancer's
		// deletion does not wait for a workload cluster that may never answer again (it is often
		// deleted with it). The annotations left behind are inert: no LoadBalancer owns them.
		r.event(lb, nil, true, lbv1.EventReleased, "Delete",
			"the workload cluster is unreachable (%s): left the %s and %s annotations on its Nodes", uk.why,
			lbv1.NameAnnotation, lbv1.StatusAnnotation)
	} else {
		released, err := r.releaseAll(ctx, s)
		if err != nil {
			return err
		}
		n = released
	}
	if b, err := r.Backends.Get(lb.Spec.Backend.Kind()); err == nil {
		if err := b.Release(ctx, lb); err != nil {
			r.event(lb, nil, true, lbv1.EventBackendError, "Release", "releasing backend %s: %v", b.Kind(), err)
			return err
		}
	} else {
		// A backend this build does not have cannot hold anything we could free; refusing to
		// finish would only leave the LoadBalancer stuck.
		r.event(lb, nil, true, lbv1.EventBackendError, "Release", "%v; nothing to release", err)
	}
	r.event(lb, nil, false, lbv1.EventReleased, "Delete",
		"released the hooks and annotations on %d %s(s) and the backend; removing the finalizer", n, s.kind.kind())
	r.cpPublished.Delete(lb.UID)
	r.claimsReported.Range(func(k, _ any) bool {
		if strings.HasPrefix(k.(string), string(lb.UID)+"/") {
			r.claimsReported.Delete(k)
		}
		return true
	})
	lb.Status.Targets = nil
	controllerutil.RemoveFinalizer(lb, lbv1.LoadBalancerFinalizer)
	return nil
}
