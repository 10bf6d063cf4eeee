package controllers

import (
	"context"
	"fmt"
	"sort"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/cluster-api/util/conditions"

	lbv1 "github.com/caplb/caplb/api/v1alpha1"
)

// updateStatus writes status.targets and the summary conditions from what the reconcile learned,
// and the per-LoadBalancer metrics. It runs deferred, whatever the phases returned.
func (r *LoadBalancerReconciler) updateStatus(_ context.Context, s *scope) {
	lb := s.lb
	if s.paused {
		// Paused means hands off: only the Paused condition changes.
		return
	}
	// The one writer of status.targets: the gathered members, or, on the invalid-spec path (which
	// gathers nothing), the members it released.
	if s.gathered {
		lb.Status.Targets = targetsOf(s.members)
	}
	for _, m := range s.releasedWhileInvalid {
		for i := range lb.Status.Targets {
			if lb.Status.Targets[i].Name == m.name {
				lb.Status.Targets[i].State = m.cur.State
				lb.Status.Targets[i].Since = metav1.NewTime(m.cur.Since)
			}
		}
	}
	var active int32
	for _, t := range lb.Status.Targets {
		if t.State == lbv1.TargetActive {
			active++
		}
	}
	lb.Status.ActiveTargets = active
	lb.Status.TotalTargets = int32(len(lb.Status.Targets))

	if !lb.DeletionTimestamp.IsZero() {
		conditions.Set(lb, metav1.Condition{Type: lbv1.ReadyCondition, Status: metav1.ConditionFalse,
			Reason: lbv1.DeletingReason, Message: "releasing members' hooks and annotations, then the backend"})
		r.Metrics.forget(lb.Namespace, lb.Name)
		return
	}
	if s.gathered {
		conditions.Set(lb, targetsCondition(lb, s.kind.kind()))
	}
	if len(s.invalid) == 0 {
		ready := readyCondition(lb)
		if err := s.reconcileErr; err != nil && !apierrors.IsConflict(err) {
			// A write that failed (RBAC, admission, an unreachable API) means hooks or the
			// endpoint may not be where status.targets says: never report Ready over it.
			msg := err.Error()
			if len(msg) > 900 {
				msg = msg[:897] + "..."
			}
			ready = metav1.Condition{Type: lbv1.ReadyCondition, Status: metav1.ConditionFalse,
				Reason: lbv1.ReconcileErrorReason, Message: msg}
		}
		conditions.Set(lb, ready)
	}
	if s.gathered || len(s.invalid) > 0 {
		// Only when the members were looked at: a failed gather knows no hook count.
		r.Metrics.setLoadBalancer(lb, s.hooksHeld, conditions.IsTrue(lb, lbv1.ReadyCondition))
	}
}

// targetsOf lists the members, sorted by name, as status.targets.
func targetsOf(members []*member) []lbv1.Target {
	out := make([]lbv1.Target, 0, len(members))
	for _, m := range members {
		if !m.cur.isMember() {
			continue
		}
		out = append(out, lbv1.Target{
			Name:    m.name,
			Address: m.facts.address,
			State:   m.cur.State,
			Ready:   m.facts.ready,
			Since:   metav1.NewTime(m.cur.Since),
		})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// targetsCondition is True when at least one target is active.
func targetsCondition(lb *lbv1.LoadBalancer, kind string) metav1.Condition {
	c := metav1.Condition{Type: lbv1.TargetsAvailableCondition}
	total, active := lb.Status.TotalTargets, lb.Status.ActiveTargets
	switch {
	case total == 0:
		c.Status, c.Reason = metav1.ConditionFalse, lbv1.NoTargetsReason
		c.Message = fmt.Sprintf("no %s matches the selector", kind)
	case active == 0:
		c.Status, c.Reason = metav1.ConditionFalse, lbv1.NoActiveTargetsReason
		c.Message = fmt.Sprintf("0 of %d targets active: %s", total, describeInactive(lb.Status.Targets))
	default:
		c.Status, c.Reason = metav1.ConditionTrue, lbv1.TargetsAvailableReason
		c.Message = fmt.Sprintf("%d of %d targets active", active, total)
		if active < total {
			c.Message += "; " + describeInactive(lb.Status.Targets)
		}
	}
	return c
}

func describeInactive(ts []lbv1.Target) string {
	var parts []string
	for _, t := range ts {
		if t.State == lbv1.TargetActive {
			continue
		}
		p := t.Name + " " + string(t.State)
		if !t.Ready && t.State == lbv1.TargetAdding {
			p += " (not ready)"
		}
		parts = append(parts, p)
		if len(parts) == 5 {
			parts = append(parts, "...")
			break
		}
	}
	return strings.Join(parts, ", ")
}

// readyCondition summarises EndpointAvailable and TargetsAvailable: True when both are, else
// False with the first failing one's reason and message.
func readyCondition(lb *lbv1.LoadBalancer) metav1.Condition {
	for _, t := range []string{lbv1.EndpointAvailableCondition, lbv1.TargetsAvailableCondition} {
		c := conditions.Get(lb, t)
		if c == nil {
			return metav1.Condition{Type: lbv1.ReadyCondition, Status: metav1.ConditionUnknown,
				Reason: lbv1.WaitingForEndpointReason, Message: t + " not yet reported"}
		}
		if c.Status != metav1.ConditionTrue {
			return metav1.Condition{Type: lbv1.ReadyCondition, Status: metav1.ConditionFalse,
				Reason: c.Reason, Message: t + ": " + c.Message}
		}
	}
	return metav1.Condition{Type: lbv1.ReadyCondition, Status: metav1.ConditionTrue, Reason: lbv1.ReadyReason,
		Message: fmt.Sprintf("endpoint %s:%d, %d of %d targets active",
			lb.Status.Endpoint.Host, lb.Status.Endpoint.Port, lb.Status.ActiveTargets, lb.Status.TotalTargets)}
}
