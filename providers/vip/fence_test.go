package vip

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	coordv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lbv1 "github.com/caplb/caplb/api/v1alpha1"
)

var fenceNow = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

// lease is kube-system/plndr-cp-lock held by holder ("" for released), renewed renewedAgo
// before fenceNow for durationSeconds, after transitions hand-overs.
func lease(holder string, renewedAgo time.Duration, durationSeconds, transitions int32) *coordv1.Lease {
	acquired := metav1.NewMicroTime(fenceNow.Add(-2 * time.Hour))
	renewed := metav1.NewMicroTime(fenceNow.Add(-renewedAgo))
	return &coordv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "plndr-cp-lock", ResourceVersion: "7"},
		Spec: coordv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &durationSeconds, AcquireTime: &acquired,
			RenewTime: &renewed, LeaseTransitions: &transitions}}
}

// desiredFence takes a Lease kube-vip holds or released, or that expired, as client-go takes one
// (holder, duration, acquire and renew times, one more transition); renews only a stale fence of
// ours; never takes an unexpired Lease of another holder.
func TestDesiredFence(t *testing.T) {
	const us = "caplb:ns/lb"
	key := client.ObjectKey{Namespace: "kube-system", Name: "plndr-cp-lock"}
	nodes := []string{"cp-a", "cp-b"}
	for _, tc := range []struct {
		name        string
		obs         *coordv1.Lease
		write       bool
		heldBy      string
		acquired    bool // acquireTime is now (taken), not kept
		transitions int32
	}{
		{name: "absent: created", obs: nil, write: true, acquired: true, transitions: 0},
		{name: "held by kube-vip", obs: lease("cp-b", time.Second, 15, 4), write: true, acquired: true, transitions: 5},
		{name: "held by kube-vip under its FQDN hostname", obs: lease("CP-A.example.org", time.Second, 15, 4), write: true, acquired: true, transitions: 5},
		{name: "released by a stopping kube-vip", obs: lease("", time.Second, 1, 4), write: true, acquired: true, transitions: 5},
		{name: "ours and fresh: left alone", obs: lease(us, time.Minute, fenceDurationSeconds, 5), write: false, transitions: 5},
		{name: "ours and stale: renewed", obs: lease(us, fenceRenewAfter+time.Second, fenceDurationSeconds, 5), write: true, transitions: 5},
		{name: "another LoadBalancer's fence: not taken", obs: lease("caplb:other/lb", time.Minute, fenceDurationSeconds, 5), heldBy: "caplb:other/lb"},
		{name: "a holder that is not kube-vip: not taken", obs: lease("cp-z", time.Second, 15, 4), heldBy: "cp-z"},
		{name: "a holder that is not kube-vip, expired: taken", obs: lease("cp-z", time.Minute, 15, 4), write: true, acquired: true, transitions: 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			before := tc.obs.DeepCopy()
			want, write, heldBy := desiredFence(tc.obs, key, us, nodes, fenceNow)
			g.Expect(tc.obs).To(Equal(before), "the observed Lease is not changed")
			g.Expect(write).To(Equal(tc.write))
			g.Expect(heldBy).To(Equal(tc.heldBy))
			if tc.heldBy != "" {
				g.Expect(want).To(BeNil())
				return
			}
			g.Expect(want.Namespace + "/" + want.Name).To(Equal("kube-system/plndr-cp-lock"))
			g.Expect(*want.Spec.HolderIdentity).To(Equal(us))
			g.Expect(*want.Spec.LeaseDurationSeconds).To(BeEquivalentTo(fenceDurationSeconds))
			g.Expect(ptr.Deref(want.Spec.LeaseTransitions, 0)).To(Equal(tc.transitions))
			if tc.write {
				g.Expect(want.Spec.RenewTime.Time).To(Equal(fenceNow))
			} else {
				g.Expect(want.Spec.RenewTime.Time).To(Equal(tc.obs.Spec.RenewTime.Time))
			}
			if tc.acquired {
				g.Expect(want.Spec.AcquireTime.Time).To(Equal(fenceNow))
			} else {
				g.Expect(want.Spec.AcquireTime.Time).To(Equal(fenceNow.Add(-2 * time.Hour)))
			}
			if tc.obs != nil {
				// The update is guarded by what was read.
				g.Expect(want.ResourceVersion).To(Equal("7"))
			}
		})
	}
}

// The fence's Lease comes from the spec while takeOver is set, from the KubeVIPTakeOver
// condition after it was removed, and there is none without either.
func TestFenceKey(t *testing.T) {
	withSpec := func(ns, name string) *lbv1.LoadBalancer {
		lb := arpLB()
		lb.Spec.Backend.ARP.TakeOver = &lbv1.TakeOver{KubeVIP: &lbv1.KubeVIPTakeOver{LeaseNamespace: ns, LeaseName: name}}
		return lb
	}
	withCondition := func(msg string) *lbv1.LoadBalancer {
		lb := arpLB()
		lb.Status.Conditions = []metav1.Condition{{Type: lbv1.KubeVIPTakeOverCondition, Status: metav1.ConditionFalse,
			Reason: lbv1.KubeVIPFencedReason, Message: msg}}
		return lb
	}
	for _, tc := range []struct {
		name string
		lb   *lbv1.LoadBalancer
		want string
		ok   bool
	}{
		{"spec defaults", withSpec("", ""), "kube-system/plndr-cp-lock", true},
		{"spec names another Lease", withSpec("vip", "cp-lock"), "vip/cp-lock", true},
		{"takeOver removed: the condition names it", withCondition("kube-vip fenced by Lease vip/cp-lock.v2 (holder caplb:ns/lb, 3600s)"), "vip/cp-lock.v2", true},
		{"takeOver removed: a condition naming none", withCondition("something else"), "kube-system/plndr-cp-lock", true},
		{"no takeover", arpLB(), "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			key, ok := fenceKey(tc.lb)
			g.Expect(ok).To(Equal(tc.ok))
			if ok {
				g.Expect(key.String()).To(Equal(tc.want))
			}
		})
	}
}
