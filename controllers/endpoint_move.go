package controllers

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lbv1 "github.com/caplb/caplb/api/v1alpha1"
	"github.com/caplb/caplb/controllers/endpointmove"
)

// An endpoint move needs no manager RBAC beyond what caplb has: the <cluster>-kubeconfig
// Secret is updated in place with the verbs the VIP backends hold already (providers/vip), the
// KubeadmControlPlane's certSANs patched under the control-plane rule (loadbalancer_controller.go).

// moveStepRequeue is how soon the next step of a move runs: one write per reconcile, so that the
// status naming the next step is stored before that step writes.
const moveStepRequeue = 100 * time.Millisecond

// memberMoveHoldPoll is how often a member held for a member move is looked at again.
const memberMoveHoldPoll = 2 * time.Second

// moveWaitRecheck is how often a waiting move looks again (certificates, readiness) when no
// watch says something changed: a KCP rollout takes minutes.
const moveWaitRecheck = 15 * time.Second

// reconcileEndpointMove runs one step of an endpoint move (spec.takeOverEndpointFrom) through
// endpointmove.Next: it observes, sets the EndpointMove condition and status.endpointMove, and
// makes at most one write, whose step it then records as done.
func (r *LoadBalancerReconciler) reconcileEndpointMove(ctx context.Context, s *scope) error {
	lb := s.lb
	if s.cluster == nil || !s.cluster.DeletionTimestamp.IsZero() {
		if lb.Spec.TakeOverEndpointFrom == nil && lb.Status.EndpointMove == nil {
			conditions.Delete(lb, lbv1.EndpointMoveCondition)
		}
		return nil
	}
	if start := memberMoveStart(s); start != nil {
		ctrl.LoggerFrom(ctx).Info("Endpoint move: the member whose address the Cluster names left; moving the Cluster to the address published now",
			"from", start.OldEndpoint.Host, "to", lb.Status.Endpoint.Host)
		lb.Status.EndpointMove = start
	}
	if lb.Spec.TakeOverEndpointFrom == nil && lb.Status.EndpointMove == nil {
		conditions.Delete(lb, lbv1.EndpointMoveCondition)
		return nil
	}
	o, err := r.observeMove(ctx, s)
	if err != nil {
		return err
	}
	d := endpointmove.Next(o)
	lb.Status.EndpointMove = d.Status
	if d.Condition == nil {
		conditions.Delete(lb, lbv1.EndpointMoveCondition)
	} else {
		conditions.Set(lb, *d.Condition)
	}
	if len(d.AddCertSANs) > 0 {
		if err := r.addControlPlaneCertSANs(ctx, s, d.AddCertSANs); err != nil {
			return err
		}
	}
	if d.Do == "" {
		if d.Status != nil && d.Status.Step != lbv1.MoveStepDone {
			s.requeueAfter(moveWaitRecheck)
		}
		return nil
	}
	if o.Status == nil || o.Status.Step != d.Do {
		// Next passed the gates to a writing step: store that step first, write next time, so
		// that the stored step always names the write that may have happened.
		s.requeueAfter(moveStepRequeue)
		return nil
	}
	m := endpointmove.Move{Old: d.Status.OldEndpoint, New: d.Status.NewEndpoint}
	changed, err := r.doMoveStep(ctx, s, m, d.Do)
	if err != nil {
		if apierrors.IsConflict(err) {
			// Somebody wrote the object since we read it: read again, rewrite again.
			s.requeueAfter(clusterConflictRetry)
			return nil
		}
		return fmt.Errorf("endpoint move, step %s: %w", d.Do, err)
	}
	ctrl.LoggerFrom(ctx).Info("Endpoint move step done", "step", d.Do, "changed", changed)
	advance := endpointmove.Advance
	if d.Status.From == lb.Name {
		advance = endpointmove.AdvanceMember
	}
	lb.Status.EndpointMove = advance(d.Status, d.Do, metav1.NewTime(r.now()))
	if lb.Status.EndpointMove.Step == lbv1.MoveStepDone {
		// As the Publish write left the spec (in memory, patched at the end of the reconcile).
		o.Status, o.Publishes, o.From = lb.Status.EndpointMove, lb.Spec.PublishesClusterEndpoint(), ""
		if t := lb.Spec.TakeOverEndpointFrom; t != nil {
			o.From = t.Name
		}
		if done := endpointmove.Next(o); done.Condition != nil {
			conditions.Set(lb, *done.Condition)
		}
		return nil
	}
	s.requeueAfter(moveStepRequeue)
	return nil
}

// observeMove gathers what endpointmove.Next decides from. The expensive parts (handshakes with
// the members, the control plane, the Machines) are read only at the steps that use them.
func (r *LoadBalancerReconciler) observeMove(ctx context.Context, s *scope) (endpointmove.Observed, error) {
	lb := s.lb
	st := lb.Status.EndpointMove
	step := lbv1.MoveStepServe
	if st != nil {
		step = st.Step
	}
	o := endpointmove.Observed{
		Self:      lb.Name,
		Status:    st,
		Policy:    lb.Spec.TakeOverEndpointFrom.EffectiveCertSANs(),
		Publishes: lb.Spec.PublishesClusterEndpoint(),
		Endpoint:  lb.Status.Endpoint,
		Ready: s.ensured && s.ensureErr == nil && s.endpoint.Available &&
			slices.ContainsFunc(s.members, func(m *member) bool { return m.cur.State == lbv1.TargetActive }),
		ClusterEndpoint: clusterEndpointOf(s.cluster),
	}
	if t := lb.Spec.TakeOverEndpointFrom; t != nil {
		o.From = t.Name
		old := &lbv1.LoadBalancer{}
		switch err := r.Client.Get(ctx, client.ObjectKey{Namespace: lb.Namespace, Name: t.Name}, old); {
		case apierrors.IsNotFound(err):
			old = nil
		case err != nil:
			return o, fmt.Errorf("reading LoadBalancer %s, spec.takeOverEndpointFrom: %w", t.Name, err)
		default:
			o.Old = endpointmove.OldLB{Exists: true, Publishes: old.Spec.PublishesClusterEndpoint(), Endpoint: old.Status.Endpoint}
		}
		if errs := ValidateTakeOver(lb, old); len(errs) > 0 {
			o.Old.Refusal = errs.ToAggregate().Error()
		}
	}
	switch step {
	case lbv1.MoveStepServe, lbv1.MoveStepCertSANs:
		if o.Ready {
			o.Members = r.checkServingCerts(ctx, s)
			o.ControlPlaneCertSANs, o.ControlPlaneKnown = r.controlPlaneCertSANs(ctx, s)
		}
	case lbv1.MoveStepClusterEndpoint, lbv1.MoveStepPublish:
		// The cache may not show our own Cluster write yet: a stale E1 here would read as a revert.
		live := &clusterv1.Cluster{}
		if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(s.cluster), live); err != nil {
			return o, fmt.Errorf("reading Cluster %s: %w", s.cluster.Name, err)
		}
		o.ClusterEndpoint = clusterEndpointOf(live)
		var machines clusterv1.MachineList
		if err := r.Client.List(ctx, &machines, client.InNamespace(lb.Namespace),
			client.MatchingLabels{clusterv1.ClusterNameLabel: lb.Spec.ClusterName}); err != nil {
			return o, fmt.Errorf("listing the Machines of Cluster %s: %w", lb.Spec.ClusterName, err)
		}
		for i := range machines.Items {
			o.Machines = append(o.Machines, machines.Items[i].Name)
		}
	}
	return o, nil
}

// checkServingCerts verifies each active member's serving certificate as this LoadBalancer's
// host, dialing the member's address directly (not the endpoint: every member must pass). A
// member move checks only the member whose address is published: its clients reach no other.
func (r *LoadBalancerReconciler) checkServingCerts(ctx context.Context, s *scope) []endpointmove.MemberCert {
	lb := s.lb
	roots, err := r.clusterCA(ctx, lb.Namespace, lb.Spec.ClusterName)
	memberMove := lb.Status.EndpointMove != nil && lb.Status.EndpointMove.From == lb.Name
	var out []endpointmove.MemberCert
	for _, m := range s.members {
		if m.cur.State != lbv1.TargetActive || (memberMove && m.facts.address != lb.Status.Endpoint.Host) {
			continue
		}
		mc := endpointmove.MemberCert{Name: m.name}
		switch {
		case err != nil:
			mc.Detail = err.Error()
		case m.facts.address == "":
			mc.Detail = "no address"
		default:
			addr := net.JoinHostPort(m.facts.address, strconv.Itoa(int(lb.Spec.EffectiveTargetPort())))
			if verr := r.servingCerts().Verify(ctx, addr, lb.Status.Endpoint.Host, roots); verr != nil {
				mc.Detail = verr.Error()
			} else {
				mc.Verified = true
			}
		}
		out = append(out, mc)
	}
	return out
}

// kcpCertSANsPath is where a KubeadmControlPlane keeps the API servers' extra SANs.
var kcpCertSANsPath = []string{"spec", "kubeadmConfigSpec", "clusterConfiguration", "apiServer", "certSANs"}

// controlPlane reads the Cluster's control plane when it is a KubeadmControlPlane; nil
// otherwise (another kind has no certSANs caplb knows).
func (r *LoadBalancerReconciler) controlPlane(ctx context.Context, s *scope) (*unstructured.Unstructured, error) {
	ref := s.cluster.Spec.ControlPlaneRef
	if !ref.IsDefined() || ref.Kind != "KubeadmControlPlane" || r.RESTMapper == nil {
		return nil, nil
	}
	mapping, err := r.RESTMapper.RESTMapping(schema.GroupKind{Group: ref.APIGroup, Kind: ref.Kind})
	if err != nil {
		if meta.IsNoMatchError(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("resolving the version of %s.%s: %w", ref.Kind, ref.APIGroup, err)
	}
	cp := &unstructured.Unstructured{}
	cp.SetGroupVersionKind(mapping.GroupVersionKind)
	if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: s.lb.Namespace, Name: ref.Name}, cp); err != nil {
		return nil, fmt.Errorf("reading %s %s: %w", ref.Kind, ref.Name, err)
	}
	return cp, nil
}

func (r *LoadBalancerReconciler) controlPlaneCertSANs(ctx context.Context, s *scope) ([]string, bool) {
	cp, err := r.controlPlane(ctx, s)
	if err != nil || cp == nil {
		if err != nil {
			ctrl.LoggerFrom(ctx).Error(err, "Endpoint move: cannot read the control plane's certSANs")
		}
		return nil, false
	}
	sans, _, _ := unstructured.NestedStringSlice(cp.Object, kcpCertSANsPath...)
	return sans, true
}

// addControlPlaneCertSANs appends hosts to the KubeadmControlPlane's certSANs (certSANs
// AddToControlPlane), guarded by its resourceVersion; KCP then rolls the Machines.
func (r *LoadBalancerReconciler) addControlPlaneCertSANs(ctx context.Context, s *scope, hosts []string) error {
	cp, err := r.controlPlane(ctx, s)
	if err != nil || cp == nil {
		return err
	}
	orig := cp.DeepCopy()
	sans, _, _ := unstructured.NestedStringSlice(cp.Object, kcpCertSANsPath...)
	added := false
	for _, h := range hosts {
		if !slices.Contains(sans, h) {
			sans, added = append(sans, h), true
		}
	}
	if !added {
		return nil
	}
	if err := unstructured.SetNestedStringSlice(cp.Object, sans, kcpCertSANsPath...); err != nil {
		return fmt.Errorf("setting %s certSANs: %w", cp.GetName(), err)
	}
	if err := r.Client.Patch(ctx, cp, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
		if apierrors.IsConflict(err) {
			s.requeueAfter(clusterConflictRetry)
			return nil
		}
		return fmt.Errorf("adding %v to %s %s certSANs: %w", hosts, cp.GetKind(), cp.GetName(), err)
	}
	// The EndpointMove condition says it (WaitingForCertSANs); the log keeps when.
	ctrl.LoggerFrom(ctx).Info("Endpoint move: added hosts to the control plane's certSANs; it rolls its Machines",
		"hosts", hosts, cp.GetKind(), cp.GetName())
	return nil
}

// memberMoveStart is the status that starts a member move, or nil: a static LoadBalancer that
// publishes a member's address with onPublishedMemberLeave MoveEndpoint, whose published address
// moved off the one the Cluster names (that member left) and is available, with no move in
// progress, and only when this LoadBalancer wrote the Cluster's endpoint (never one a person
// chose).
func memberMoveStart(s *scope) *lbv1.EndpointMoveStatus {
	lb := s.lb
	if !lb.Spec.MovesEndpointOnMemberLeave() || lb.Spec.TakeOverEndpointFrom != nil || s.notPublisher || !s.ensured {
		return nil
	}
	if st := lb.Status.EndpointMove; st != nil && st.Step != lbv1.MoveStepDone {
		return nil
	}
	theirs, ours := clusterEndpointOf(s.cluster), lb.Status.Endpoint
	if !theirs.IsValid() || !ours.IsValid() || theirs == ours || !s.endpoint.Available ||
		s.cluster.GetAnnotations()[lbv1.EndpointPublishedByAnnotation] != lb.Name {
		return nil
	}
	return &lbv1.EndpointMoveStatus{From: lb.Name, OldEndpoint: theirs, Step: lbv1.MoveStepServe}
}

// holdsClusterEndpoint: a member a member move needs — its address is the Cluster's endpoint,
// or either end of a move in progress. Its deletion waits (pre-drain hook) until the Cluster no
// longer names it, so that nothing drains a machine that clients and CAPI's ClusterCache reach
// the cluster through.
func holdsClusterEndpoint(s *scope, m *member) bool {
	lb := s.lb
	addr := m.facts.address
	if !lb.Spec.MovesEndpointOnMemberLeave() || s.cluster == nil || !s.cluster.DeletionTimestamp.IsZero() || addr == "" {
		return false
	}
	if s.cluster.Spec.ControlPlaneEndpoint.Host == addr {
		return true
	}
	st := lb.Status.EndpointMove
	return st != nil && st.From == lb.Name && st.Step != lbv1.MoveStepDone &&
		(st.OldEndpoint.Host == addr || st.NewEndpoint.Host == addr)
}

// publishFlip sets this LoadBalancer up as the Cluster's publisher in memory; the reconcile's
// deferred patch writes it (the admission webhook sees a publisher whose predecessor let go).
func publishFlip(lb *lbv1.LoadBalancer) bool {
	changed := !lb.Spec.PublishesClusterEndpoint() || lb.Spec.TakeOverEndpointFrom != nil
	lb.Spec.PublishClusterEndpoint = ptr.To(true)
	lb.Spec.TakeOverEndpointFrom = nil
	return changed
}
