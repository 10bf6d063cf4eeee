package vip

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	coordv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lbv1 "github.com/caplb/caplb/api/v1alpha1"
	"github.com/caplb/caplb/providers"
)

// The fence: kube-vip elects with client-go's LeaseLock, which acquires a Lease only when it has
// no holder or its holder let it expire, and whose leader steps down once its renewals find
// another holder. So the manager writes kube-vip's own Lease under caplb's name with a long
// duration: kube-vip's leader drops the VIP within its renew deadline and every instance stays a
// follower, until the fence is deleted (retirement, rollback) or left unrenewed for
// fenceDurationSeconds.
const (
	// fenceDurationSeconds is the fence's leaseDurationSeconds: long, so that a manager that is
	// down for a while does not let kube-vip back in, yet a fence nobody renews (an aborted
	// takeover) frees kube-vip on its own within the hour.
	fenceDurationSeconds = 3600
	// fenceRenewAfter is how old renewTime may get before Ensure renews it: a write per ten
	// minutes rather than per reconcile, well inside the duration.
	fenceRenewAfter = 10 * time.Minute
)

// fenceHolder is the holderIdentity of lb's fence: caplb's and this LoadBalancer's, so that no
// kube-vip (which uses its node name) and no other LoadBalancer mistakes it for its own, and so
// that `caplb cleanup` can tell which LoadBalancer a fence left behind belongs to.
func fenceHolder(lb *lbv1.LoadBalancer) string {
	return lbv1.KubeVIPFenceHolderPrefix + lb.Namespace + "/" + lb.Name
}

// fenceLeaseInMessage finds the fence's namespace/name in a KubeVIPTakeOver message: every
// message names it as "Lease <namespace>/<name>", so that a rollback (the spec field gone) still
// knows which Lease to delete.
var fenceLeaseInMessage = regexp.MustCompile(`\bLease ([a-z0-9][a-z0-9.-]*)/([a-z0-9][a-z0-9.-]*)`)

// fenceKey is where lb's fence is (or would be): the spec's Lease while takeOver is set, else the
// Lease the KubeVIPTakeOver condition names (the field was removed before the fence was); ok is
// false when lb has neither, and so no fence.
func fenceKey(lb *lbv1.LoadBalancer) (key client.ObjectKey, ok bool) {
	if k := kubeVIPTakeOver(lb); k != nil {
		return client.ObjectKey{Namespace: k.EffectiveLeaseNamespace(), Name: k.EffectiveLeaseName()}, true
	}
	c := meta.FindStatusCondition(lb.Status.Conditions, lbv1.KubeVIPTakeOverCondition)
	if c == nil {
		return key, false
	}
	if m := fenceLeaseInMessage.FindStringSubmatch(c.Message); m != nil {
		return client.ObjectKey{Namespace: m[1], Name: m[2]}, true
	}
	return client.ObjectKey{Namespace: lbv1.DefaultKubeVIPLeaseNamespace, Name: lbv1.DefaultKubeVIPLeaseName}, true
}

// desiredFence is the fence to write over the observed Lease (nil: absent) at now. write is
// false when obs is already a fresh fence of holder's. heldBy names the holder when the Lease
// belongs, unexpired, to someone that is neither holder nor kube-vip (one of kubeVIPNodes, its
// election identity): then want is nil and nothing is written.
func desiredFence(obs *coordv1.Lease, key client.ObjectKey, holder string, kubeVIPNodes []string, now time.Time) (want *coordv1.Lease, write bool, heldBy string) {
	t := metav1.NewMicroTime(now)
	d := int32(fenceDurationSeconds)
	if obs == nil {
		return &coordv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name},
			Spec: coordv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &d, AcquireTime: &t, RenewTime: &t}}, true, ""
	}
	cur := ""
	if obs.Spec.HolderIdentity != nil {
		cur = *obs.Spec.HolderIdentity
	}
	want = obs.DeepCopy()
	if cur == holder {
		if r := obs.Spec.RenewTime; r != nil && now.Sub(r.Time) < fenceRenewAfter {
			return want, false, ""
		}
		want.Spec.RenewTime, want.Spec.LeaseDurationSeconds = &t, &d
		return want, true, ""
	}
	if cur != "" && !kubeVIPHolder(cur, kubeVIPNodes) && !leaseExpired(obs, now) {
		return nil, false, cur
	}
	// Taken as client-go takes a Lease from another holder, so that kube-vip reads it as such.
	transitions := int32(1)
	if obs.Spec.LeaseTransitions != nil {
		transitions = *obs.Spec.LeaseTransitions + 1
	}
	want.Spec.HolderIdentity, want.Spec.LeaseDurationSeconds = &holder, &d
	want.Spec.AcquireTime, want.Spec.RenewTime, want.Spec.LeaseTransitions = &t, &t, &transitions
	return want, true, ""
}

// kubeVIPHolder reports whether a holderIdentity is kube-vip's on one of its nodes: kube-vip
// elects under its node name (vip_nodename, else the hostname, which may be the name's FQDN).
func kubeVIPHolder(id string, nodes []string) bool {
	for _, n := range nodes {
		if strings.EqualFold(id, n) || strings.EqualFold(strings.SplitN(id, ".", 2)[0], n) {
			return true
		}
	}
	return false
}

// leaseExpired is client-go's view of a Lease nobody renews: renewTime plus its duration passed.
func leaseExpired(l *coordv1.Lease, now time.Time) bool {
	if l.Spec.RenewTime == nil || l.Spec.LeaseDurationSeconds == nil {
		return true
	}
	return now.After(l.Spec.RenewTime.Add(time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second))
}

// activeMember reports whether a caplb member is active: the controller put it in rotation, so
// an agent of ours is up to claim the VIP once kube-vip lets go (arp; bgp asks more, see
// takeOverWaits).
func activeMember(members []providers.Member) bool {
	for _, m := range members {
		if m.State == lbv1.TargetActive {
			return true
		}
	}
	return false
}

// fence writes, renews or retires lb's fence Lease after the check (to) and reports the
// KubeVIPTakeOver condition, and an event on a change of phase. It acquires only when the check
// passed, kube-vip elects and a caplb member serves the VIP (takeOverWaits); once held it renews
// while any kube-vip mirror Pod exists, whatever the check says then (letting go while caplb may
// hold the VIP would make two holders). A BGP kube-vip without election is never fenced (it reads no Lease): the
// condition says it overlaps until its mirror Pods are gone, and then that it is retired.
func (b *Backend) fence(ctx context.Context, lb *lbv1.LoadBalancer, to *takeOver, members []providers.Member) (metav1.Condition, *providers.Event) {
	key, _ := fenceKey(lb)
	holder := fenceHolder(lb)
	lease := fmt.Sprintf("Lease %s/%s", key.Namespace, key.Name)
	cond := func(s metav1.ConditionStatus, reason, format string, a ...any) metav1.Condition {
		return metav1.Condition{Type: lbv1.KubeVIPTakeOverCondition, Status: s, Reason: reason, Message: fmt.Sprintf(format, a...)}
	}
	failed := func(err error) metav1.Condition {
		return cond(metav1.ConditionUnknown, lbv1.KubeVIPFenceFailedReason, "fence %s: %v; retried on the next reconcile", lease, err)
	}
	if to.live == nil {
		return cond(metav1.ConditionUnknown, lbv1.KubeVIPFenceFailedReason,
			"kube-vip's Pods cannot be read (see KubeVIPTakeOverReady); the fence %s is left as it is", lease), nil
	}
	log := ctrl.LoggerFrom(ctx).WithValues("lease", key.String(), "holder", holder)
	obs, err := getLease(ctx, to.live, key)
	if err != nil {
		return failed(err), nil
	}
	ours := obs != nil && obs.Spec.HolderIdentity != nil && *obs.Spec.HolderIdentity == holder
	prev := meta.FindStatusCondition(lb.Status.Conditions, lbv1.KubeVIPTakeOverCondition)
	prevIs := func(reasons ...string) bool { return prev != nil && slices.Contains(reasons, prev.Reason) }

	if !to.podsLeft && (ours || prevIs(lbv1.KubeVIPFencedReason, lbv1.KubeVIPRetiredReason, lbv1.KubeVIPOverlappingReason)) {
		return b.retire(ctx, lb, to, obs, ours, prev, lease)
	}
	// waits: why no caplb member serves the VIP yet ("" once one does); only asked before a
	// fence is ours, since letting go of one could make two holders.
	waits := ""
	if !ours && to.passed {
		waits = b.takeOverWaits(ctx, lb, members)
	}
	if !ours && to.passed && !to.elects {
		// Nothing to write: kube-vip announces from every node whatever any Lease says.
		who := "caplb's active members announce it beside kube-vip, and the routers spread connections across both"
		if waits != "" {
			who = "kube-vip alone announces it, and its Machines wait at pre-drain until a caplb member does: " + waits
		}
		return cond(metav1.ConditionFalse, lbv1.KubeVIPOverlappingReason, "kube-vip announces the VIP by BGP from every one of its nodes "+
			"(no Lease election, so no fence: nothing caplb writes makes it withdraw); %s; each kube-vip node withdraws as its Machine "+
			"goes (a powered-off one only when the router's hold timer expires)", who), nil
	}
	if !ours && (!to.passed || waits != "") {
		why := waits
		if !to.passed {
			why = "KubeVIPTakeOverReady is not True"
		}
		return cond(metav1.ConditionFalse, lbv1.KubeVIPFencePendingReason, "no fence on %s yet (%s): kube-vip keeps the VIP", lease, why), nil
	}
	want, write, heldBy := desiredFence(obs, key, holder, to.nodes, b.opts.Now.Now())
	if heldBy != "" {
		return cond(metav1.ConditionFalse, lbv1.KubeVIPFenceHeldReason, "%s is held by %q, neither kube-vip on its nodes (%s) nor this LoadBalancer: "+
			"not taken; if it is a fence an aborted takeover left (holder %s<namespace>/<name>), `caplb cleanup --workload-kubeconfig` "+
			"removes it once that LoadBalancer is gone or no longer takes over (docs/migrate-from-kube-vip.md)",
			lease, heldBy, strings.Join(to.nodes, ", "), lbv1.KubeVIPFenceHolderPrefix), nil
	}
	if write {
		if err := writeLease(ctx, to.live, want, obs == nil); err != nil {
			return failed(err), nil
		}
		log.V(1).Info("Wrote the fence", "acquired", !ours)
	}
	then := "caplb claims the VIP once kube-vip lets go"
	if lb.Spec.Backend.BGP != nil {
		then = "kube-vip's leader withdraws its route while caplb's members announce"
	}
	c := cond(metav1.ConditionFalse, lbv1.KubeVIPFencedReason, "kube-vip fenced by %s (holder %s, %ds, renewed while a kube-vip mirror Pod exists); %s",
		lease, holder, fenceDurationSeconds, then)
	if ours {
		return c, nil
	}
	log.Info("Fenced kube-vip: took its election Lease")
	return c, &providers.Event{Reason: lbv1.EventKubeVIPFenced, Message: fmt.Sprintf("took kube-vip's %s as %s: kube-vip lets go of the VIP", lease, holder)}
}

// retire reports kube-vip retired once no mirror Pod is left: it deletes the fence if it is still
// ours (obs), and says so in the first report only (the event); later ones repeat it.
func (b *Backend) retire(ctx context.Context, lb *lbv1.LoadBalancer, to *takeOver, obs *coordv1.Lease, ours bool,
	prev *metav1.Condition, lease string) (metav1.Condition, *providers.Event) {
	c := metav1.Condition{Type: lbv1.KubeVIPTakeOverCondition, Status: metav1.ConditionTrue, Reason: lbv1.KubeVIPRetiredReason}
	if ours {
		if err := deleteLease(ctx, to.live, obs); err != nil {
			return metav1.Condition{Type: lbv1.KubeVIPTakeOverCondition, Status: metav1.ConditionUnknown, Reason: lbv1.KubeVIPFenceFailedReason,
				Message: fmt.Sprintf("fence %s: %v; retried on the next reconcile", lease, err)}, nil
		}
		ctrl.LoggerFrom(ctx).Info("No kube-vip mirror Pod left; deleted the fence", "lease", lease)
	}
	prevReason := ""
	if prev != nil {
		prevReason = prev.Reason
	}
	if prevReason == lbv1.KubeVIPRetiredReason && !ours {
		c.Message = prev.Message
		return c, nil
	}
	if ours || prevReason == lbv1.KubeVIPFencedReason {
		c.Message = fmt.Sprintf("kube-vip is retired: no kube-vip mirror Pod is left and the fence %s is deleted; "+
			"caplb serves the VIP alone (%s can be removed)", lease, takeOverField(lb))
		return c, &providers.Event{Reason: lbv1.EventKubeVIPRetired, Message: fmt.Sprintf("no kube-vip mirror Pod is left: deleted the fence %s", lease)}
	}
	c.Message = fmt.Sprintf("kube-vip is retired: no kube-vip mirror Pod is left, so none of its nodes announces the VIP (it elected "+
		"no leader, so there was no fence to delete); caplb serves the VIP alone (%s can be removed)", takeOverField(lb))
	return c, &providers.Event{Reason: lbv1.EventKubeVIPRetired, Message: "no kube-vip mirror Pod is left: kube-vip no longer announces the VIP"}
}

// unfence deletes lb's fence when takeOver is gone (rollback) or lb is being deleted, if the
// Lease is still ours; kube-vip then elects a leader again. It reports the condition to keep
// while that failed (nil once nothing of ours is left), and the event of a deletion. After a
// retirement, or an overlap with a kube-vip that elects nothing, there is no fence to delete.
func (b *Backend) unfence(ctx context.Context, lb *lbv1.LoadBalancer) (*metav1.Condition, *providers.Event) {
	key, ok := fenceKey(lb)
	if !ok {
		return nil, nil
	}
	if c := meta.FindStatusCondition(lb.Status.Conditions, lbv1.KubeVIPTakeOverCondition); c != nil &&
		(c.Reason == lbv1.KubeVIPRetiredReason || c.Reason == lbv1.KubeVIPOverlappingReason) {
		return nil, nil
	}
	lease := fmt.Sprintf("Lease %s/%s", key.Namespace, key.Name)
	failed := func(err error) *metav1.Condition {
		return &metav1.Condition{Type: lbv1.KubeVIPTakeOverCondition, Status: metav1.ConditionUnknown, Reason: lbv1.KubeVIPFenceFailedReason,
			Message: fmt.Sprintf("deleting the fence %s (the takeover was withdrawn or the LoadBalancer deleted) failed: %v; retried on the next reconcile", lease, err)}
	}
	c, err := b.liveWorkload(ctx, lb)
	if err != nil {
		return failed(err), nil
	}
	obs, err := getLease(ctx, c, key)
	if err != nil {
		return failed(err), nil
	}
	if obs == nil || obs.Spec.HolderIdentity == nil || *obs.Spec.HolderIdentity != fenceHolder(lb) {
		return nil, nil
	}
	if err := deleteLease(ctx, c, obs); err != nil {
		return failed(err), nil
	}
	ctrl.LoggerFrom(ctx).Info("Deleted the fence; kube-vip elects again", "lease", key.String())
	return nil, &providers.Event{Reason: lbv1.EventKubeVIPFenceRemoved,
		Message: fmt.Sprintf("deleted the fence %s: kube-vip elects a leader and serves the VIP again", lease)}
}

func getLease(ctx context.Context, c client.Client, key client.ObjectKey) (*coordv1.Lease, error) {
	l := &coordv1.Lease{}
	if err := c.Get(ctx, key, l); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("reading Lease %s: %w", key, err)
	}
	return l, nil
}

// writeLease creates the fence, or updates it guarded by the resourceVersion read: kube-vip
// renews every few seconds, and a write over a renewal it did not see would be a guess.
func writeLease(ctx context.Context, c client.Client, l *coordv1.Lease, create bool) error {
	if create {
		if err := c.Create(ctx, l); err != nil {
			return fmt.Errorf("creating Lease %s/%s: %w", l.Namespace, l.Name, err)
		}
		return nil
	}
	if err := c.Update(ctx, l); err != nil {
		return fmt.Errorf("updating Lease %s/%s: %w", l.Namespace, l.Name, err)
	}
	return nil
}

// deleteLease deletes the Lease as read: not one kube-vip took back since.
func deleteLease(ctx context.Context, c client.Client, l *coordv1.Lease) error {
	rv := l.ResourceVersion
	if err := c.Delete(ctx, l, client.Preconditions{ResourceVersion: &rv}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting Lease %s/%s: %w", l.Namespace, l.Name, err)
	}
	return nil
}

// ensureTakeOver adds the takeover's conditions and events to st: KubeVIPTakeOverReady and
// KubeVIPTakeOver while spec.backend.<arp|bgp>.takeOver.kubeVIP is set; after it is removed, the
// rollback of a fence it left (KubeVIPTakeOver only while that fails).
func (b *Backend) ensureTakeOver(ctx context.Context, lb *lbv1.LoadBalancer, vip string, members []providers.Member, st *providers.EndpointStatus) {
	var ev *providers.Event
	if to := b.checkTakeOver(ctx, lb, vip); to != nil {
		var c metav1.Condition
		c, ev = b.fence(ctx, lb, to, members)
		st.Conditions = append(st.Conditions, to.ready, c)
	} else if meta.FindStatusCondition(lb.Status.Conditions, lbv1.KubeVIPTakeOverCondition) != nil {
		var c *metav1.Condition
		if c, ev = b.unfence(ctx, lb); c != nil {
			st.Conditions = append(st.Conditions, *c)
		}
	}
	if ev != nil {
		st.Events = append(st.Events, *ev)
	}
}
