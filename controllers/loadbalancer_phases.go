package controllers

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/cluster-api/util/conditions"
	ctrl "sigs.k8s.io/controller-runtime"

	lbv1 "github.com/caplb/caplb/api/v1alpha1"
	"github.com/caplb/caplb/providers"
)

// reconcileMembers runs every member's state machine: observed transitions, the backend's
// Ensure, Quiesce and Restore, confirmed transitions, then the members' annotations and hooks.
func (r *LoadBalancerReconciler) reconcileMembers(ctx context.Context, s *scope) error {
	log := ctrl.LoggerFrom(ctx)
	lb := s.lb
	if _, unreachable := s.kind.(unreachableKind); unreachable {
		return r.reconcileUnreachable(ctx, s)
	}
	now := r.now()
	members, err := gatherMembers(ctx, lb, s.kind, now)
	if err != nil {
		return err
	}
	s.members, s.gathered = members, true
	clusterDeleting := s.cluster != nil && !s.cluster.DeletionTimestamp.IsZero()
	for _, m := range members {
		m.facts.clusterDeleting = clusterDeleting
	}
	r.reconcileAdoption(ctx, s)

	mid := map[string]record{}
	for _, m := range members {
		m.cur, m.intent = stepObserved(m.prev, m.obs, now)
		if m.intent == intentIgnore && m.obj != nil && (m.facts.owner == ownerValue(lb) || m.facts.ourHook || m.facts.ourPreTermHook) {
			// Marks without a membership (a half-done earlier reconcile): clean them.
			m.intent = intentRelease
		}
		if m.claimedBy != "" && r.firstClaimReport(lb, m.name, m.claimedBy) {
			r.event(lb, m.obj, true, lbv1.EventTargetClaimed, "Select",
				"%s %s matches the selector but belongs to LoadBalancer %q (its %s annotation); leaving it out",
				s.kind.kind(), m.name, m.claimedBy, lbv1.NameAnnotation)
		}
		mid[m.name] = m.cur
	}

	es, known := r.ensure(ctx, s, backendMembers(members))

	timeout := lb.Spec.Quiesce.EffectiveTimeout()
	batch := &eventBatch{}
	defer r.flush(lb, batch)
	for _, m := range members {
		m.result = backendResult{Known: known, InRotation: known && es.InRotation[m.name]}
		switch m.intent {
		case intentQuiesce:
			qs, err := s.backend.Quiesce(ctx, lb, toBackendMember(m))
			if err != nil {
				log.Error(err, "Quiesce failed; retrying until spec.quiesce.timeout", "member", m.name)
				r.event(lb, m.obj, true, lbv1.EventBackendError, "Quiesce", "quiescing %s %s: %v", s.kind.kind(), m.name, err)
				s.requeueAfter(minPositive(quiescePollOnError, quiesceDeadline(m.cur, now, timeout)))
				break
			}
			if qs.Done && holdsClusterEndpoint(s, m) {
				qs = providers.QuiesceStatus{RequeueAfter: memberMoveHoldPoll}
			}
			m.result.QuiesceDone = qs.Done
			if !qs.Done {
				s.requeueAfter(minPositive(qs.RequeueAfter, quiesceDeadline(m.cur, now, timeout)))
			}
		case intentRestore:
			qs, err := s.backend.Restore(ctx, lb, toBackendMember(m))
			if err != nil {
				log.Error(err, "Restore failed; retrying", "member", m.name)
				r.event(lb, m.obj, true, lbv1.EventBackendError, "Restore", "restoring %s %s: %v", s.kind.kind(), m.name, err)
				s.requeueAfter(quiescePollOnError)
				break
			}
			m.result.RestoreDone = qs.Done
			if !qs.Done {
				s.requeueAfter(minPositive(qs.RequeueAfter, quiescePollOnError))
			}
		}
		if m.cur.isMember() {
			m.cur, m.outcome = stepBackend(m.cur, m.intent, m.result, now, timeout)
		}
		r.memberEvents(s, batch, m, mid[m.name])
	}

	return r.patchAllMarks(ctx, s, members)
}

// ensure asks the backend for the endpoint with these members and records its answer: the
// endpoint in status (never cleared by a failure), the backend's conditions and events, its
// requeue. known is false when the backend could not say which members are in rotation.
func (r *LoadBalancerReconciler) ensure(ctx context.Context, s *scope, members []providers.Member) (providers.EndpointStatus, bool) {
	lb := s.lb
	es, err := s.backend.Ensure(ctx, lb, members)
	s.ensured = true
	known := err == nil && !es.RotationUnknown
	if err != nil {
		s.ensureErr = fmt.Errorf("backend %s: ensuring the endpoint: %w", s.backend.Kind(), err)
		r.event(lb, nil, true, lbv1.EventBackendError, "Ensure", "%v", s.ensureErr)
	} else {
		s.endpoint = es
		// Cleared when the backend does not know (better no owner shown than a stale one).
		lb.Status.VIPOwner = es.VIPOwner
		if es.Endpoint.Host != "" {
			if es.Endpoint.Port == 0 {
				es.Endpoint.Port = lb.Spec.EffectivePort()
			}
			// Quiesce below decides from the endpoint now published.
			lb.Status.Endpoint = es.Endpoint
			s.endpoint.Endpoint = es.Endpoint
			// What clients verify: the host they dial. (kubeadm adds the Cluster's endpoint to
			// the serving certificate itself; an additional endpoint must be added by the user.)
			lb.Status.CertSANs = []string{es.Endpoint.Host}
		}
		s.requeueAfter(es.RequeueAfter)
		for _, c := range es.Conditions {
			conditions.Set(lb, c)
		}
		if lb.Spec.Backend.TakeOver() == nil {
			// The takeover's conditions describe a spec field; without the field they would be
			// stale. KubeVIPTakeOver stays while the backend still reports it: the fence it wrote
			// is not deleted yet, and the condition names it for the retry.
			conditions.Delete(lb, lbv1.KubeVIPTakeOverReadyCondition)
			if !slices.ContainsFunc(es.Conditions, func(c metav1.Condition) bool { return c.Type == lbv1.KubeVIPTakeOverCondition }) {
				conditions.Delete(lb, lbv1.KubeVIPTakeOverCondition)
			}
		}
		for _, e := range es.Events {
			r.event(lb, nil, e.Warning, e.Reason, "Ensure", "%s", e.Message)
		}
	}
	return es, known
}

// memberPatchParallelism bounds the member patches one reconcile issues at once. A control plane
// has a handful of members; patching them together takes one round trip instead of one each,
// which is most of a new LoadBalancer's reconcile time.
const memberPatchParallelism = 4

// patchAllMarks brings every member's annotations and hook to desiredMarks, a few at a time,
// and counts the hooks held afterwards.
func (r *LoadBalancerReconciler) patchAllMarks(ctx context.Context, s *scope, members []*member) error {
	if slices.ContainsFunc(members, func(m *member) bool { return addsHook(s.lb, s.kind, m) }) {
		live, err := r.liveForNewHooks(ctx, s.lb)
		if err != nil {
			return err
		}
		if !live {
			// The cache is behind a deletion: placing a hook now would leave it with no owner.
			log := ctrl.LoggerFrom(ctx)
			log.V(1).Info("Not placing hooks: the LoadBalancer is gone or being deleted (the cache is behind)")
			return nil
		}
	}
	var (
		mu   sync.Mutex
		wg   sync.WaitGroup
		errs []error
		sem  = make(chan struct{}, memberPatchParallelism)
	)
	s.hooksHeld = 0
	for _, m := range members {
		if m.obj == nil {
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			hook, err := r.patchMarks(ctx, s.lb, s.kind, m)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
			}
			if hook {
				s.hooksHeld++
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// quiescePollOnError is how soon a failed Quiesce or Restore is retried.
const quiescePollOnError = 5 * time.Second

// memberEvents turns one member's transitions (observed, then confirmed) into events, collected
// in batch so that members changing the same way in one reconcile share one event.
func (r *LoadBalancerReconciler) memberEvents(s *scope, b *eventBatch, m *member, mid record) {
	lb, kind := s.lb, s.kind.kind()
	switch m.intent {
	case intentRelease:
		b.add(m.obj, false, lbv1.EventTargetReleased, "Release",
			fmt.Sprintf("%s %s no longer matches the selector: removed its annotations and deletion hook", kind, m.name))
		return
	case intentDrop:
		switch {
		case !m.prev.isMember():
		case m.prev.State == lbv1.TargetRemoved, m.prev.State == lbv1.TargetDisabled:
			// Quiesced before it went (a disabled Node deleted by its lifecycle tool).
			b.add(nil, false, lbv1.EventTargetRemoved, "Remove",
				fmt.Sprintf("%s %s is gone; it had left rotation (%s) before", kind, m.name, m.prev.State))
		case s.kind.hooks():
			b.add(nil, true, lbv1.EventTargetGoneWithoutQuiesce, "Remove",
				fmt.Sprintf("%s %s disappeared while %s, before it was quiesced: CAPI skips pre-drain hooks for a Machine "+
					"without nodeRef, for the last control-plane Machine and while the Cluster or control plane is deleted",
					kind, m.name, m.prev.State))
		default:
			b.add(nil, true, lbv1.EventTargetGoneWithoutQuiesce, "Remove",
				fmt.Sprintf("%s %s was deleted while %s, before it was quiesced: Nodes have no deletion hook; annotate it "+
					"%s (or, with spec.quiesce.whenCordoned, cordon it) and wait for its %s annotation to read disabled "+
					"before deleting it", kind, m.name, m.prev.State, lbv1.DisabledAnnotation, lbv1.StatusAnnotation))
		}
		return
	}
	steps := [][2]lbv1.TargetState{{m.prev.State, mid.State}, {mid.State, m.cur.State}}
	if m.prev.State == "" && mid.State == lbv1.TargetAdding && m.cur.State == lbv1.TargetActive {
		// Selected and in rotation within one reconcile: one event says it all.
		steps = [][2]lbv1.TargetState{{"", lbv1.TargetActive}}
	}
	for _, step := range steps {
		reason, warning := transitionEvent(step[0], step[1])
		if reason == "" {
			continue
		}
		b.add(m.obj, warning, reason, "UpdateMember", transitionMessage(kind, m, step[0], step[1]))
	}
	if m.outcome == outcomeTimedOut {
		r.Metrics.quiesceTimeouts.WithLabelValues(lb.Namespace, lb.Name).Inc()
		b.add(m.obj, true, lbv1.EventQuiesceTimeout, "Quiesce",
			fmt.Sprintf("%s %s: the backend did not confirm the quiesce within spec.quiesce.timeout (%s); carrying on as %s",
				kind, m.name, lb.Spec.Quiesce.EffectiveTimeout(), m.cur.State))
	}
}

func transitionMessage(kind string, m *member, from, to lbv1.TargetState) string {
	name := kind + " " + m.name
	switch to {
	case lbv1.TargetAdding:
		if from == lbv1.TargetActive {
			return name + " left rotation (ready=" + fmt.Sprint(m.facts.ready) + "): the backend no longer serves it"
		}
		if from == lbv1.TargetDisabled || from == lbv1.TargetDisabling {
			return name + ": the disabled annotation was removed; restored, waiting for the backend to put it in rotation"
		}
		return name + " selected; waiting for the backend to put it in rotation"
	case lbv1.TargetActive:
		if from == "" {
			return name + " selected and in rotation"
		}
		return name + " is in rotation"
	case lbv1.TargetDisabling:
		return name + " carries " + lbv1.DisabledAnnotation + "; quiescing"
	case lbv1.TargetDisabled:
		if from == "" {
			return name + " selected; it carries " + lbv1.DisabledAnnotation + " so it stays out of rotation"
		}
		return name + " is quiesced and out of rotation"
	case lbv1.TargetRemoving:
		return name + " is being deleted; quiescing before CAPI drains it"
	case lbv1.TargetRemoved:
		return name + " is out of rotation; released the pre-drain deletion hook"
	}
	return fmt.Sprintf("%s: %s → %s", name, from, to)
}

func backendMembers(members []*member) []providers.Member {
	out := make([]providers.Member, 0, len(members))
	for _, m := range members {
		if m.cur.isMember() {
			out = append(out, toBackendMember(m))
		}
	}
	return out
}

func toBackendMember(m *member) providers.Member {
	return providers.Member{
		Name:      m.name,
		NodeName:  m.facts.nodeName,
		Address:   m.facts.address,
		Addresses: m.facts.addresses,
		Ready:     m.facts.ready,
		State:     m.cur.State,
		Since:     m.cur.Since,
	}
}

// minPositive returns the smaller of two durations, ignoring values <= 0.
func minPositive(a, b time.Duration) time.Duration {
	switch {
	case a <= 0:
		return b
	case b <= 0:
		return a
	case a < b:
		return a
	}
	return b
}

// reconcileInvalid handles a spec that failed validation: Ready False with the message, and —
// because caplb must never block a Machine — members being deleted lose our hook at once.
func (r *LoadBalancerReconciler) reconcileInvalid(ctx context.Context, s *scope) error {
	lb := s.lb
	msg := s.invalid.ToAggregate().Error()
	if prev := conditions.Get(lb, lbv1.ReadyCondition); prev == nil || prev.Reason != lbv1.InvalidSpecReason || prev.Message != msg {
		r.event(lb, nil, true, lbv1.EventInvalidSpec, "Validate", "%s", msg)
		ctrl.LoggerFrom(ctx).Info("LoadBalancer spec is invalid; reconciling it waits for a fix", "reason", lbv1.InvalidSpecReason, "message", msg)
	}
	conditions.Set(lb, metav1.Condition{Type: lbv1.ReadyCondition, Status: metav1.ConditionFalse,
		Reason: lbv1.InvalidSpecReason, Message: msg})
	if !s.kind.hooks() {
		// Only hooks must be released while the spec is invalid; Nodes have none.
		return nil
	}

	objs, err := s.kind.annotated(ctx, lb)
	if err != nil {
		return err
	}
	var errs []error
	for _, obj := range objs {
		f := s.kind.facts(lb, obj)
		if !f.deleting || !f.ourHook {
			if f.ourHook {
				s.hooksHeld++
			}
			continue
		}
		m := &member{name: f.name, obj: obj, facts: f, cur: record{State: lbv1.TargetRemoved, Since: stamp(r.now())}}
		if _, err := r.patchMarks(ctx, lb, s.kind, m); err != nil {
			errs = append(errs, err)
			continue
		}
		b := &eventBatch{}
		b.add(obj, true, lbv1.EventTargetRemoved, "Remove", fmt.Sprintf(
			"%s %s is being deleted while the spec is invalid: released its pre-drain hook without quiescing", s.kind.kind(), f.name))
		r.flush(lb, b)
		// updateStatus, the one writer of status.targets, records the release.
		s.releasedWhileInvalid = append(s.releasedWhileInvalid, m)
	}
	return errors.Join(errs...)
}

// firstClaimReport reports whether a claimed member has not been reported for this LoadBalancer
// yet, so that TargetClaimed is recorded once rather than on every reconcile. The memory is a
// cache: after a restart the event is recorded once more.
func (r *LoadBalancerReconciler) firstClaimReport(lb *lbv1.LoadBalancer, member, owner string) bool {
	_, seen := r.claimsReported.LoadOrStore(string(lb.UID)+"/"+member+"/"+owner, struct{}{})
	return !seen
}
