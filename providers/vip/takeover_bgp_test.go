package vip

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	coordv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	agentv1 "github.com/caplb/caplb/api/agent/v1alpha1"
	lbv1 "github.com/caplb/caplb/api/v1alpha1"
	"github.com/caplb/caplb/providers"
)

// kubeVIPBGPMirrorPod is kube-vip's BGP static pod (`kube-vip manifest pod --bgp`) as the kubelet
// mirrors it on node: it announces 192.0.2.10 to bgpLB's two routers, electing a leader on
// kube-system/plndr-cp-lock when elects, else from every node.
func kubeVIPBGPMirrorPod(node string, elects bool) *corev1.Pod {
	p := kubeVIPMirrorPod("kube-system", node, "192.0.2.10")
	env := []corev1.EnvVar{}
	for _, e := range p.Spec.Containers[0].Env {
		switch e.Name {
		case "vip_arp":
			e.Value = "false"
		case "vip_leaderelection":
			e.Value = "false"
			if elects {
				e.Value = "true"
			}
		}
		env = append(env, e)
	}
	p.Spec.Containers[0].Env = append(env, corev1.EnvVar{Name: "bgp_enable", Value: "true"}, corev1.EnvVar{Name: "bgp_as", Value: "64512"},
		corev1.EnvVar{Name: "bgp_peers", Value: "192.0.2.1:64500::false,192.0.2.2:64500::false"})
	return p
}

// bgpPassword is the Secret bgpLB's first router's password comes from.
func bgpPassword() *corev1.Secret {
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "bgp"}, Data: map[string][]byte{"password": []byte("pw")}}
}

// bgpTakeOverLB is bgpLB taking over from kube-vip (Service VIPs acknowledged); prev is the
// KubeVIPTakeOver reason a previous reconcile recorded ("" for none).
func bgpTakeOverLB(prev string) *lbv1.LoadBalancer {
	lb := bgpLB()
	lb.Spec.Backend.BGP.TakeOver = &lbv1.TakeOver{KubeVIP: &lbv1.KubeVIPTakeOver{AcknowledgeServiceVIPs: true}}
	withPrev(lb, prev)
	return lb
}

// sessions is a caplb member's agent report: announcing, est of its of routers' sessions
// Established (bgp).
type sessions struct{ est, of int }

// A BGP kube-vip with Lease election is fenced as an ARP one, once a caplb member is active and
// its agent reports announcing with every router's session Established (before that, kube-vip's
// withdrawal could leave the routers no path); without election nothing is ever written: the
// condition says kube-vip overlaps until its mirror Pods are gone, then that it is retired.
func TestEnsureTakesOverBGPKubeVIP(t *testing.T) {
	for _, tc := range []struct {
		name   string
		lb     *lbv1.LoadBalancer
		pods   int  // kube-vip mirror Pods
		elects bool // kube-vip's vip_leaderelection
		lease  *coordv1.Lease
		state  lbv1.TargetState
		report *sessions // the member's agent report; nil for none
		status metav1.ConditionStatus
		reason string
		msg    string
		holder string // the Lease's holder afterwards; "" for no Lease
		events []string
	}{
		{name: "election, no member active: kube-vip keeps announcing", lb: bgpTakeOverLB(""), pods: 2, elects: true,
			lease: lease("cp-a", time.Second, 15, 4), state: lbv1.TargetAdding,
			status: metav1.ConditionFalse, reason: lbv1.KubeVIPFencePendingReason, msg: "no caplb member is active yet", holder: "cp-a"},
		{name: "election, a member announces, 0 of 2 sessions up: not fenced", lb: bgpTakeOverLB(""), pods: 2, elects: true,
			lease: lease("cp-a", time.Second, 15, 4), state: lbv1.TargetActive, report: &sessions{0, 2},
			status: metav1.ConditionFalse, reason: lbv1.KubeVIPFencePendingReason,
			msg: "no caplb member announces the VIP with an Established BGP session to every router yet: new-1 has 0 of 2 Established; " +
				"check the neighbour configuration of the routers 192.0.2.1 (AS 64500), 192.0.2.2 (AS 64500) for the new Machines' addresses",
			holder: "cp-a"},
		{name: "election, a member announces, 1 of 2 sessions up: not fenced", lb: bgpTakeOverLB(""), pods: 2, elects: true,
			lease: lease("cp-a", time.Second, 15, 4), state: lbv1.TargetActive, report: &sessions{1, 2},
			status: metav1.ConditionFalse, reason: lbv1.KubeVIPFencePendingReason, msg: "new-1 has 1 of 2 Established", holder: "cp-a"},
		{name: "election, an active member with no report: not fenced", lb: bgpTakeOverLB(""), pods: 2, elects: true,
			lease: lease("cp-a", time.Second, 15, 4), state: lbv1.TargetActive,
			status: metav1.ConditionFalse, reason: lbv1.KubeVIPFencePendingReason, msg: "new-1 has not reported", holder: "cp-a"},
		{name: "election, a member announces, 2 of 2 sessions up: fenced", lb: bgpTakeOverLB(""), pods: 2, elects: true,
			lease: lease("cp-a", time.Second, 15, 4), state: lbv1.TargetActive, report: &sessions{2, 2},
			status: metav1.ConditionFalse, reason: lbv1.KubeVIPFencedReason, msg: "kube-vip's leader withdraws its route while caplb's members announce",
			holder: us, events: []string{lbv1.EventKubeVIPFenced}},
		{name: "election, fenced already: renewed whatever the sessions say", lb: bgpTakeOverLB(lbv1.KubeVIPFencedReason), pods: 2, elects: true,
			lease: lease(us, time.Minute, fenceDurationSeconds, 5), state: lbv1.TargetActive, report: &sessions{0, 2},
			status: metav1.ConditionFalse, reason: lbv1.KubeVIPFencedReason, msg: "kube-vip fenced by Lease kube-system/plndr-cp-lock", holder: us},
		{name: "election, no Pod left: retired, fence deleted", lb: bgpTakeOverLB(lbv1.KubeVIPFencedReason), elects: true,
			lease: lease(us, time.Minute, fenceDurationSeconds, 5), state: lbv1.TargetActive,
			status: metav1.ConditionTrue, reason: lbv1.KubeVIPRetiredReason, msg: "the fence Lease kube-system/plndr-cp-lock is deleted",
			events: []string{lbv1.EventKubeVIPRetired}},
		{name: "no election, no member active: overlapping, nothing written", lb: bgpTakeOverLB(""), pods: 2, state: lbv1.TargetAdding,
			status: metav1.ConditionFalse, reason: lbv1.KubeVIPOverlappingReason,
			msg: "kube-vip alone announces it, and its Machines wait at pre-drain until a caplb member does: no caplb member is active yet"},
		{name: "no election, a member announces, 0 of 2 sessions up: kube-vip alone", lb: bgpTakeOverLB(""), pods: 2, state: lbv1.TargetActive,
			report: &sessions{0, 2}, status: metav1.ConditionFalse, reason: lbv1.KubeVIPOverlappingReason,
			msg: "kube-vip alone announces it, and its Machines wait at pre-drain until a caplb member does: no caplb member announces " +
				"the VIP with an Established BGP session to every router yet: new-1 has 0 of 2 Established"},
		{name: "no election, a member announces, 2 of 2 sessions up: overlapping, nothing written", lb: bgpTakeOverLB(""), pods: 2,
			state: lbv1.TargetActive, report: &sessions{2, 2}, status: metav1.ConditionFalse, reason: lbv1.KubeVIPOverlappingReason,
			msg: "caplb's active members announce it beside kube-vip, and the routers spread connections across both"},
		{name: "no election: a Lease there is left alone", lb: bgpTakeOverLB(lbv1.KubeVIPOverlappingReason), pods: 1,
			lease: lease("cp-a", time.Hour, 15, 4), state: lbv1.TargetActive, report: &sessions{2, 2},
			status: metav1.ConditionFalse, reason: lbv1.KubeVIPOverlappingReason, msg: "each kube-vip node withdraws as its Machine goes", holder: "cp-a"},
		{name: "no election, no Pod left: retired without a fence", lb: bgpTakeOverLB(lbv1.KubeVIPOverlappingReason), state: lbv1.TargetActive,
			status: metav1.ConditionTrue, reason: lbv1.KubeVIPRetiredReason, msg: "there was no fence to delete", events: []string{lbv1.EventKubeVIPRetired}},
		{name: "retired before: no second event", lb: bgpTakeOverLB(lbv1.KubeVIPRetiredReason), state: lbv1.TargetActive,
			status: metav1.ConditionTrue, reason: lbv1.KubeVIPRetiredReason, msg: "kube-vip fenced by Lease"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			objs := []client.Object{tc.lb, bgpPassword(), memberNode(tc.report)}
			for _, n := range []string{"cp-a", "cp-b"}[:tc.pods] {
				objs = append(objs, kubeVIPBGPMirrorPod(n, tc.elects))
			}
			if tc.lease != nil {
				objs = append(objs, tc.lease)
			}
			c := fake.NewClientBuilder().WithScheme(newScheme(t)).WithObjects(objs...).Build()
			b := NewBGP(Options{Client: c, Workload: sameCluster{c}, AgentImage: "img", Now: func() time.Time { return fenceNow }})

			// The member has no address, so the membership leaves it alone: only the fence reads it.
			st, err := b.Ensure(context.Background(), tc.lb, []providers.Member{{Name: "m-new-1", NodeName: "new-1", State: tc.state}})
			g.Expect(err).NotTo(HaveOccurred())
			if tc.pods > 0 {
				ready := meta.FindStatusCondition(st.Conditions, lbv1.KubeVIPTakeOverReadyCondition)
				g.Expect(ready).NotTo(BeNil())
				g.Expect(ready.Status).To(Equal(metav1.ConditionTrue), ready.Message)
				g.Expect(ready.Message).To(ContainSubstring("by BGP to 192.0.2.1 (AS 64500), 192.0.2.2 (AS 64500)"))
			}
			got := meta.FindStatusCondition(st.Conditions, lbv1.KubeVIPTakeOverCondition)
			g.Expect(got).NotTo(BeNil())
			g.Expect(got.Status).To(Equal(tc.status), got.Message)
			g.Expect(got.Reason).To(Equal(tc.reason), got.Message)
			g.Expect(got.Message).To(ContainSubstring(tc.msg))
			g.Expect(eventReasons(st.Events)).To(ConsistOf(tc.events))

			l := readLease(t, c)
			if tc.holder == "" {
				g.Expect(l).To(BeNil(), "no Lease written")
				return
			}
			g.Expect(l).NotTo(BeNil())
			g.Expect(*l.Spec.HolderIdentity).To(Equal(tc.holder))
			if tc.holder != us {
				g.Expect(l.ResourceVersion).To(Equal("7"), "not written")
			}
		})
	}
}

// memberNode is the Node of the caplb member new-1, with its agent's report (none when r is
// nil) written at fenceNow.
func memberNode(r *sessions) *corev1.Node {
	n := readyNode("new-1")
	if r != nil {
		st := agentv1.AgentStatus{MembershipVersion: 1, Member: true, InDataPlane: true, Holding: true,
			PeersEstablished: r.est, Peers: r.of, UpdatedAt: metav1.NewMicroTime(fenceNow)}
		n.Annotations = map[string]string{agentv1.AgentStatusAnnotation: st.String()}
	}
	return n
}

// Removing spec.backend.bgp.takeOver rolls a fence back as for ARP; after an overlap (no fence
// was written) there is nothing to delete and the condition goes.
func TestUnfenceBGP(t *testing.T) {
	withdrawn := func(prev string) *lbv1.LoadBalancer {
		lb := bgpLB()
		withPrev(lb, prev)
		if prev == lbv1.KubeVIPOverlappingReason {
			lb.Status.Conditions[0].Message = "kube-vip announces the VIP by BGP from every one of its nodes"
		}
		return lb
	}
	for _, tc := range []struct {
		name   string
		lb     *lbv1.LoadBalancer
		lease  *coordv1.Lease
		holder string // afterwards; "" for none
		events []string
	}{
		{name: "withdrawn while fenced: deleted", lb: withdrawn(lbv1.KubeVIPFencedReason), lease: lease(us, time.Minute, fenceDurationSeconds, 5),
			events: []string{lbv1.EventKubeVIPFenceRemoved}},
		{name: "withdrawn while fenced: kube-vip's Lease left alone", lb: withdrawn(lbv1.KubeVIPFencedReason), lease: lease("cp-a", time.Second, 15, 4),
			holder: "cp-a"},
		{name: "withdrawn while overlapping: nothing to delete", lb: withdrawn(lbv1.KubeVIPOverlappingReason), lease: lease("cp-a", time.Second, 15, 4),
			holder: "cp-a"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			c := fake.NewClientBuilder().WithScheme(newScheme(t)).WithObjects(tc.lb, tc.lease, bgpPassword(), kubeVIPBGPMirrorPod("cp-a", true)).Build()
			b := NewBGP(Options{Client: c, Workload: sameCluster{c}, AgentImage: "img", Now: func() time.Time { return fenceNow }})
			st, err := b.Ensure(context.Background(), tc.lb, nil)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(eventReasons(st.Events)).To(ConsistOf(tc.events))
			g.Expect(meta.FindStatusCondition(st.Conditions, lbv1.KubeVIPTakeOverCondition)).To(BeNil(), "nothing of ours is left")
			l := readLease(t, c)
			if tc.holder == "" {
				g.Expect(l).To(BeNil())
				return
			}
			g.Expect(*l.Spec.HolderIdentity).To(Equal(tc.holder))
		})
	}
}
