package vip

import (
	"context"
	"errors"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	coordv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	lbv1 "github.com/caplb/caplb/api/v1alpha1"
	"github.com/caplb/caplb/providers"
)

const us = "caplb:ns/lb"

var fenceKeyDefault = client.ObjectKey{Namespace: "kube-system", Name: "plndr-cp-lock"}

// takeOverLB is arpLB taking over from kube-vip; ack acknowledges kube-vip's Service VIPs (the
// fixture's kube-vip has svc_enable, so without it the check refuses). prev is the
// KubeVIPTakeOver reason a previous reconcile recorded ("" for none).
func takeOverLB(ack bool, prev string) *lbv1.LoadBalancer {
	lb := arpLB()
	lb.Spec.Backend.ARP.TakeOver = &lbv1.TakeOver{KubeVIP: &lbv1.KubeVIPTakeOver{AcknowledgeServiceVIPs: ack}}
	withPrev(lb, prev)
	return lb
}

func withPrev(lb *lbv1.LoadBalancer, reason string) {
	if reason != "" {
		lb.Status.Conditions = []metav1.Condition{{Type: lbv1.KubeVIPTakeOverCondition, Status: metav1.ConditionFalse, Reason: reason,
			Message: "kube-vip fenced by Lease kube-system/plndr-cp-lock (holder caplb:ns/lb, 3600s)"}}
	}
}

func member(state lbv1.TargetState) []providers.Member {
	return []providers.Member{{Name: "m-0", State: state}}
}

// conflictOnUpdate makes every Update fail as when kube-vip renewed between the read and the write.
var conflictOnUpdate = interceptor.Funcs{Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
	if _, isLease := obj.(*coordv1.Lease); isLease {
		return apierrors.NewConflict(schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}, obj.GetName(),
			errors.New("the object has been modified"))
	}
	return c.Update(ctx, obj, opts...)
}}

func readLease(t *testing.T, c client.Client) *coordv1.Lease {
	t.Helper()
	l, err := getLease(context.Background(), c, fenceKeyDefault)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func eventReasons(es []providers.Event) []string {
	var out []string
	for _, e := range es {
		out = append(out, e.Reason)
	}
	return out
}

// Ensure fences kube-vip once the check passes and a caplb member is active, renews the fence
// while kube-vip's mirror Pods exist, and retires it when none is left.
func TestEnsureFencesKubeVIP(t *testing.T) {
	for _, tc := range []struct {
		name      string
		lb        *lbv1.LoadBalancer
		pods      bool
		lease     *coordv1.Lease
		state     lbv1.TargetState
		intercept *interceptor.Funcs
		status    metav1.ConditionStatus
		reason    string
		holder    string        // the Lease's holder afterwards; "" for no Lease
		renewed   time.Duration // how long before now the Lease was renewed afterwards
		events    []string
	}{
		{name: "a member active, no Lease: created", lb: takeOverLB(true, ""), pods: true, state: lbv1.TargetActive,
			status: metav1.ConditionFalse, reason: lbv1.KubeVIPFencedReason, holder: us, events: []string{lbv1.EventKubeVIPFenced}},
		{name: "kube-vip leads: taken", lb: takeOverLB(true, ""), pods: true, lease: lease("cp-a", time.Second, 15, 4), state: lbv1.TargetActive,
			status: metav1.ConditionFalse, reason: lbv1.KubeVIPFencedReason, holder: us, events: []string{lbv1.EventKubeVIPFenced}},
		{name: "no member active: kube-vip keeps it", lb: takeOverLB(true, ""), pods: true, lease: lease("cp-a", time.Second, 15, 4), state: lbv1.TargetAdding,
			status: metav1.ConditionFalse, reason: lbv1.KubeVIPFencePendingReason, holder: "cp-a", renewed: time.Second},
		{name: "the check refuses: kube-vip keeps it", lb: takeOverLB(false, ""), pods: true, lease: lease("cp-a", time.Second, 15, 4), state: lbv1.TargetActive,
			status: metav1.ConditionFalse, reason: lbv1.KubeVIPFencePendingReason, holder: "cp-a", renewed: time.Second},
		{name: "fenced, the check refuses now: still renewed", lb: takeOverLB(false, lbv1.KubeVIPFencedReason), pods: true,
			lease: lease(us, fenceRenewAfter+time.Minute, fenceDurationSeconds, 5), state: lbv1.TargetAdding,
			status: metav1.ConditionFalse, reason: lbv1.KubeVIPFencedReason, holder: us},
		{name: "fenced and fresh: not written", lb: takeOverLB(true, lbv1.KubeVIPFencedReason), pods: true,
			lease: lease(us, time.Minute, fenceDurationSeconds, 5), state: lbv1.TargetActive,
			status: metav1.ConditionFalse, reason: lbv1.KubeVIPFencedReason, holder: us, renewed: time.Minute},
		{name: "another LoadBalancer's fence: not taken", lb: takeOverLB(true, ""), pods: true,
			lease: lease("caplb:other/lb", time.Minute, fenceDurationSeconds, 5), state: lbv1.TargetActive,
			status: metav1.ConditionFalse, reason: lbv1.KubeVIPFenceHeldReason, holder: "caplb:other/lb", renewed: time.Minute},
		{name: "kube-vip renewed in between: conflict, retried", lb: takeOverLB(true, ""), pods: true, lease: lease("cp-a", time.Second, 15, 4),
			state: lbv1.TargetActive, intercept: &conflictOnUpdate,
			status: metav1.ConditionUnknown, reason: lbv1.KubeVIPFenceFailedReason, holder: "cp-a", renewed: time.Second},
		{name: "no kube-vip Pod left: retired", lb: takeOverLB(true, lbv1.KubeVIPFencedReason), lease: lease(us, time.Minute, fenceDurationSeconds, 5),
			state: lbv1.TargetActive, status: metav1.ConditionTrue, reason: lbv1.KubeVIPRetiredReason, events: []string{lbv1.EventKubeVIPRetired}},
		{name: "retired before: no second event", lb: takeOverLB(true, lbv1.KubeVIPRetiredReason), state: lbv1.TargetActive,
			status: metav1.ConditionTrue, reason: lbv1.KubeVIPRetiredReason},
		{name: "no kube-vip Pod, never fenced: nothing written", lb: takeOverLB(true, ""), state: lbv1.TargetActive,
			status: metav1.ConditionFalse, reason: lbv1.KubeVIPFencePendingReason},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			objs := []client.Object{tc.lb}
			if tc.pods {
				objs = append(objs, kubeVIPMirrorPod("kube-system", "cp-a", "192.0.2.10"), kubeVIPMirrorPod("kube-system", "cp-b", "192.0.2.10"))
			}
			if tc.lease != nil {
				objs = append(objs, tc.lease)
			}
			bld := fake.NewClientBuilder().WithScheme(newScheme(t)).WithObjects(objs...)
			if tc.intercept != nil {
				bld = bld.WithInterceptorFuncs(*tc.intercept)
			}
			c := bld.Build()
			b := NewARP(Options{Client: c, Workload: sameCluster{c}, AgentImage: "img", Now: func() time.Time { return fenceNow }})

			st, err := b.Ensure(context.Background(), tc.lb, member(tc.state))
			g.Expect(err).NotTo(HaveOccurred())
			got := meta.FindStatusCondition(st.Conditions, lbv1.KubeVIPTakeOverCondition)
			g.Expect(got).NotTo(BeNil())
			g.Expect(got.Status).To(Equal(tc.status), got.Message)
			g.Expect(got.Reason).To(Equal(tc.reason), got.Message)
			g.Expect(got.Message).To(ContainSubstring("Lease kube-system/plndr-cp-lock"))
			g.Expect(eventReasons(st.Events)).To(ConsistOf(tc.events))

			l := readLease(t, c)
			if tc.holder == "" {
				g.Expect(l).To(BeNil())
				return
			}
			g.Expect(l).NotTo(BeNil())
			g.Expect(*l.Spec.HolderIdentity).To(Equal(tc.holder))
			g.Expect(l.Spec.RenewTime.Time).To(BeTemporally("==", fenceNow.Add(-tc.renewed)))
		})
	}
}

// Removing takeOver before kube-vip retired (rollback) and deleting the LoadBalancer delete the
// fence when it is still ours, and leave kube-vip's Lease alone.
func TestUnfence(t *testing.T) {
	withdrawn := func() *lbv1.LoadBalancer {
		lb := arpLB()
		withPrev(lb, lbv1.KubeVIPFencedReason)
		return lb
	}
	for _, tc := range []struct {
		name     string
		lb       *lbv1.LoadBalancer
		release  bool // Release instead of Ensure
		lease    *coordv1.Lease
		workload func(client.Client) WorkloadClients
		holder   string // afterwards; "" for none
		events   []string
		kept     bool // Ensure still reports KubeVIPTakeOver (the deletion failed)
	}{
		{name: "withdrawn while fenced: deleted", lb: withdrawn(), lease: lease(us, time.Minute, fenceDurationSeconds, 5),
			events: []string{lbv1.EventKubeVIPFenceRemoved}},
		{name: "withdrawn: kube-vip's Lease left alone", lb: withdrawn(), lease: lease("cp-a", time.Second, 15, 4), holder: "cp-a"},
		{name: "withdrawn, workload unreachable: kept for a retry", lb: withdrawn(), lease: lease(us, time.Minute, fenceDurationSeconds, 5),
			workload: func(client.Client) WorkloadClients { return unreachable{} }, holder: us, kept: true},
		{name: "never taken over: not looked at", lb: arpLB(), lease: lease(us, time.Minute, fenceDurationSeconds, 5), holder: us},
		{name: "LoadBalancer deleted while fenced: deleted", lb: takeOverLB(true, lbv1.KubeVIPFencedReason), release: true,
			lease: lease(us, time.Minute, fenceDurationSeconds, 5)},
		{name: "LoadBalancer deleted before fencing: kube-vip's Lease left alone", lb: takeOverLB(true, ""), release: true,
			lease: lease("cp-a", time.Second, 15, 4), holder: "cp-a"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			c := fake.NewClientBuilder().WithScheme(newScheme(t)).WithObjects(tc.lb, tc.lease,
				kubeVIPMirrorPod("kube-system", "cp-a", "192.0.2.10")).Build()
			var wl WorkloadClients = sameCluster{c}
			if tc.workload != nil {
				wl = tc.workload(c)
			}
			b := NewARP(Options{Client: c, Workload: wl, AgentImage: "img", Now: func() time.Time { return fenceNow }})
			if tc.release {
				g.Expect(b.Release(context.Background(), tc.lb)).To(Succeed())
			} else {
				st, err := b.Ensure(context.Background(), tc.lb, nil)
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(eventReasons(st.Events)).To(ConsistOf(tc.events))
				got := meta.FindStatusCondition(st.Conditions, lbv1.KubeVIPTakeOverCondition)
				g.Expect(got != nil).To(Equal(tc.kept))
				if tc.kept {
					g.Expect(got.Reason).To(Equal(lbv1.KubeVIPFenceFailedReason))
					g.Expect(got.Message).To(ContainSubstring("Lease kube-system/plndr-cp-lock"))
				}
			}
			l := readLease(t, c)
			if tc.holder == "" {
				g.Expect(l).To(BeNil())
				return
			}
			g.Expect(l).NotTo(BeNil())
			g.Expect(*l.Spec.HolderIdentity).To(Equal(tc.holder))
		})
	}
}
