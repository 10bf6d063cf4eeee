package controllers

import (
	"context"
	"errors"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lbv1 "github.com/caplb/caplb/api/v1alpha1"
)

// marks are the annotations caplb keeps on a member: nil means "must be absent".
type marks map[string]*string

// desiredMarks is the pure rule for a member's annotations after a reconcile:
//   - a member carries the name annotation, the status annotation (both only from the
//     LoadBalancer that publishes the Cluster's endpoint: the others share the member) and, on
//     Machines, our pre-drain hook while holdsHook(state) — except that a hook is never added to an object
//     already being deleted (CAPI may be past its pre-drain phase; it would only confuse);
//   - an object that is not (or no longer) a member loses our hook, and the name and status
//     annotations when they are ours; another LoadBalancer's annotations are never touched.
func desiredMarks(lb *lbv1.LoadBalancer, hooks bool, f facts, cur record) marks {
	hookKey := lbv1.PreDrainHookAnnotation(lb.Name)
	ptKey := lbv1.PreTerminateHookAnnotation(lb.Name)
	want := marks{}
	if cur.isMember() {
		owner, state := ownerValue(lb), string(cur.State)
		switch {
		case lb.Spec.PublishesClusterEndpoint():
			want[lbv1.NameAnnotation] = &owner
			want[lbv1.StatusAnnotation] = &state
		case f.owner == owner:
			// It published before: the name and status are the publisher's now.
			want[lbv1.NameAnnotation] = nil
			want[lbv1.StatusAnnotation] = nil
		}
		if hooks {
			hookVal := lbv1.HookOwner
			if holdsHook(cur.State) && (!f.deleting || f.ourHook) {
				want[hookKey] = &hookVal
			} else {
				want[hookKey] = nil
			}
			// The pre-terminate hook follows the pre-drain hook's life, but is never held while
			// the Cluster is deleted (nothing to hand over to; CAPI tears everything down).
			if lb.Spec.EffectivePreTerminateHook() && !f.clusterDeleting && holdsHook(cur.State) && (!f.deleting || f.ourPreTermHook) {
				want[ptKey] = &hookVal
			} else if f.ourPreTermHook || lb.Spec.EffectivePreTerminateHook() {
				want[ptKey] = nil
			}
		}
		return want
	}
	if f.owner == ownerValue(lb) {
		want[lbv1.NameAnnotation] = nil
		want[lbv1.StatusAnnotation] = nil
	}
	if hooks || f.ourHook {
		want[hookKey] = nil
	}
	if f.ourPreTermHook {
		want[ptKey] = nil
	}
	return want
}

// apply changes the annotations to the marks and reports whether anything changed.
func (w marks) apply(obj client.Object) bool {
	ann := obj.GetAnnotations()
	changed := false
	for k, v := range w {
		cur, has := ann[k]
		switch {
		case v == nil && has:
			delete(ann, k)
			changed = true
		case v != nil && (!has || cur != *v):
			if ann == nil {
				ann = map[string]string{}
			}
			ann[k] = *v
			changed = true
		}
	}
	if changed {
		obj.SetAnnotations(ann)
	}
	return changed
}

// patchMarks brings a member's annotations to desiredMarks with a merge patch that touches only
// those keys. It reports whether the member holds our hook afterwards.
func (r *LoadBalancerReconciler) patchMarks(ctx context.Context, lb *lbv1.LoadBalancer, k memberKind, m *member) (bool, error) {
	want := desiredMarks(lb, k.hooks(), m.facts, m.cur)
	hookKey := lbv1.PreDrainHookAnnotation(lb.Name)
	holds := m.facts.ourHook
	if v, ok := want[hookKey]; ok {
		holds = v != nil
	}
	modified := m.obj.DeepCopyObject().(client.Object)
	if !want.apply(modified) {
		return holds, nil
	}
	if err := k.patch(ctx, modified, client.MergeFrom(m.obj)); err != nil {
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return m.facts.ourHook, fmt.Errorf("updating caplb annotations on %s %s: %w", k.kind(), m.name, err)
	}
	return holds, nil
}

// addsHook reports whether bringing m to desiredMarks would place one of lb's hooks that m does
// not hold yet.
func addsHook(lb *lbv1.LoadBalancer, k memberKind, m *member) bool {
	if m.obj == nil || !k.hooks() {
		return false
	}
	want := desiredMarks(lb, true, m.facts, m.cur)
	pd, pt := want[lbv1.PreDrainHookAnnotation(lb.Name)], want[lbv1.PreTerminateHookAnnotation(lb.Name)]
	return (pd != nil && !m.facts.ourHook) || (pt != nil && !m.facts.ourPreTermHook)
}

// liveForNewHooks reads lb from the API server before a reconcile places a new hook: a
// reconcile woken by a Machine event can see the LoadBalancer from a cache that has not caught up
// with its deletion (another informer), and a hook placed then has no owner left to release it
// (seen in e2e/install: a LoadBalancer created and deleted at once). One read per reconcile that
// adds hooks, which is once per new member.
func (r *LoadBalancerReconciler) liveForNewHooks(ctx context.Context, lb *lbv1.LoadBalancer) (bool, error) {
	cur := &lbv1.LoadBalancer{}
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(lb), cur); err != nil {
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return false, fmt.Errorf("reading LoadBalancer %s before placing hooks: %w", lb.Name, err)
	}
	return cur.UID == lb.UID && cur.DeletionTimestamp.IsZero(), nil
}

// releaseAll removes every mark this LoadBalancer placed, for its deletion. It looks wherever a
// mark could be — the cache indexes (name annotation and hook key, so half-done states are
// found), a live list of the Cluster's Machines and a live read of every remembered target (the
// cache may lag the last reconcile's patches) — so that no Machine is left blocked by a hook
// whose owner is gone. It returns how many objects it changed.
func (r *LoadBalancerReconciler) releaseAll(ctx context.Context, s *scope) (int, error) {
	lb := s.lb
	objs := map[string]client.Object{}
	cached, err := s.kind.annotated(ctx, lb)
	if err != nil {
		return 0, err
	}
	for _, o := range cached {
		objs[o.GetName()] = o
	}
	live := machineKind{c: r.APIReader}
	liveNodes := memberKind(nodeKind{c: r.APIReader})
	if lb.Spec.RemoteNodes() {
		// The workload cluster's Nodes: through the ClusterCache's client (its cache is as
		// current as a workload cluster's view gets).
		liveNodes = s.kind
	}
	if s.kind.hooks() && lb.Spec.ClusterName != "" {
		var list clusterv1.MachineList
		if err := r.APIReader.List(ctx, &list, client.InNamespace(lb.Namespace),
			client.MatchingLabels{clusterv1.ClusterNameLabel: lb.Spec.ClusterName}); err != nil {
			return 0, fmt.Errorf("listing Machines of Cluster %s/%s: %w", lb.Namespace, lb.Spec.ClusterName, err)
		}
		for _, o := range objectPtrs[clusterv1.Machine](list.Items) {
			objs[o.GetName()] = o
		}
	}
	for _, t := range lb.Status.Targets {
		var o client.Object
		if s.kind.hooks() {
			o, err = live.get(ctx, lb, t.Name)
		} else {
			o, err = liveNodes.get(ctx, lb, t.Name)
		}
		switch {
		case apierrors.IsNotFound(err):
			continue
		case err != nil:
			return 0, fmt.Errorf("reading %s %s: %w", s.kind.kind(), t.Name, err)
		}
		objs[o.GetName()] = o
	}

	var errs []error
	released := 0
	for _, o := range objs {
		f := s.kind.facts(lb, o)
		want := desiredMarks(lb, s.kind.hooks(), f, record{})
		modified := o.DeepCopyObject().(client.Object)
		if !want.apply(modified) {
			continue
		}
		if err := s.kind.patch(ctx, modified, client.MergeFrom(o)); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("releasing %s %s: %w", s.kind.kind(), f.name, err))
			continue
		}
		released++
		ctrl.LoggerFrom(ctx).V(1).Info("Released member", "member", f.name)
	}
	return released, errors.Join(errs...)
}
