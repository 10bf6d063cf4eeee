package controllers

import (
	"testing"

	"k8s.io/utils/ptr"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	lbv1 "github.com/caplb/caplb/api/v1alpha1"
)

func TestDesiredMarks(t *testing.T) {
	lb := newLB("lb")
	hook := lbv1.PreDrainHookAnnotation("lb")
	str := func(s string) *string { return &s }
	tests := []struct {
		name  string
		hooks bool
		f     facts
		cur   record
		want  marks
	}{
		{"active Machine gets name, status and hook", true, facts{}, rec(lbv1.TargetActive),
			marks{lbv1.NameAnnotation: str("lb"), lbv1.StatusAnnotation: str("active"), hook: str(lbv1.HookOwner)}},
		{"disabled Machine keeps its hook", true, facts{ourHook: true}, rec(lbv1.TargetDisabled),
			marks{lbv1.NameAnnotation: str("lb"), lbv1.StatusAnnotation: str("disabled"), hook: str(lbv1.HookOwner)}},
		{"removing Machine keeps its hook", true, facts{deleting: true, ourHook: true}, rec(lbv1.TargetRemoving),
			marks{lbv1.NameAnnotation: str("lb"), lbv1.StatusAnnotation: str("removing"), hook: str(lbv1.HookOwner)}},
		{"removing Machine without hook never gets one", true, facts{deleting: true}, rec(lbv1.TargetRemoving),
			marks{lbv1.NameAnnotation: str("lb"), lbv1.StatusAnnotation: str("removing"), hook: nil}},
		{"removed Machine loses the hook, keeps status", true, facts{deleting: true, ourHook: true}, rec(lbv1.TargetRemoved),
			marks{lbv1.NameAnnotation: str("lb"), lbv1.StatusAnnotation: str("removed"), hook: nil}},
		{"Node member carries no hook", false, facts{}, rec(lbv1.TargetActive),
			marks{lbv1.NameAnnotation: str("lb"), lbv1.StatusAnnotation: str("active")}},
		{"released: our annotations go", true, facts{owner: "lb", ourHook: true}, record{},
			marks{lbv1.NameAnnotation: nil, lbv1.StatusAnnotation: nil, hook: nil}},
		{"released: another LoadBalancer's annotations stay", true, facts{owner: "other", ourHook: true}, record{},
			marks{hook: nil}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			NewWithT(t).Expect(desiredMarks(lb, tt.hooks, tt.f, tt.cur)).To(Equal(tt.want))
		})
	}
}

// A LoadBalancer that does not publish the Cluster's endpoint shares members with the publisher:
// its own hook only; the name and status annotations are the publisher's.
func TestDesiredMarksAdditionalEndpoint(t *testing.T) {
	lb := newLB("internal")
	lb.Spec.PublishClusterEndpoint = ptr.To(false)
	hook := lbv1.PreDrainHookAnnotation("internal")
	str := func(s string) *string { return &s }
	tests := []struct {
		name string
		f    facts
		cur  record
		want marks
	}{
		{"shared active member: hook only", facts{owner: "lb"}, rec(lbv1.TargetActive), marks{hook: str(lbv1.HookOwner)}},
		{"unowned member: still no name", facts{}, rec(lbv1.TargetActive), marks{hook: str(lbv1.HookOwner)}},
		{"was the publisher: hands name and status back", facts{owner: "internal"}, rec(lbv1.TargetActive),
			marks{lbv1.NameAnnotation: nil, lbv1.StatusAnnotation: nil, hook: str(lbv1.HookOwner)}},
		{"removed: hook released, publisher's marks untouched", facts{owner: "lb", deleting: true, ourHook: true}, rec(lbv1.TargetRemoved),
			marks{hook: nil}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			NewWithT(t).Expect(desiredMarks(lb, true, tt.f, tt.cur)).To(Equal(tt.want))
		})
	}
}

func TestMarksApply(t *testing.T) {
	g := NewWithT(t)
	hook := lbv1.PreDrainHookAnnotation("lb")
	m := &clusterv1.Machine{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{
		lbv1.NameAnnotation: "lb", lbv1.StatusAnnotation: "active", hook: lbv1.HookOwner, "keep": "me",
	}}}
	g.Expect(desiredMarks(newLB("lb"), true, facts{}, rec(lbv1.TargetActive)).apply(m)).To(BeFalse(), "already current")
	g.Expect(desiredMarks(newLB("lb"), true, facts{owner: "lb", ourHook: true}, record{}).apply(m)).To(BeTrue())
	g.Expect(m.Annotations).To(Equal(map[string]string{"keep": "me"}))
	empty := &clusterv1.Machine{}
	g.Expect(desiredMarks(newLB("lb"), true, facts{}, rec(lbv1.TargetAdding)).apply(empty)).To(BeTrue())
	g.Expect(empty.Annotations).To(HaveKeyWithValue(hook, lbv1.HookOwner))
}

// The optional pre-terminate hook (spec.quiesce.preTerminateHook, default on for arp and bgp)
// follows the pre-drain hook's life, is never added to a Machine already being deleted, and is
// never held while the Cluster is being deleted.
func TestDesiredMarksPreTerminateHook(t *testing.T) {
	on := newLB("lb")
	on.Spec.Quiesce.PreTerminateHook = ptrTo(true)
	pt := lbv1.PreTerminateHookAnnotation("lb")
	hook := lbv1.PreDrainHookAnnotation("lb")
	str := func(s string) *string { return &s }
	tests := []struct {
		name string
		f    facts
		cur  record
		want *string
	}{
		{"active member holds it", facts{}, rec(lbv1.TargetActive), str(lbv1.HookOwner)},
		{"removing member keeps it", facts{deleting: true, ourHook: true, ourPreTermHook: true}, rec(lbv1.TargetRemoving), str(lbv1.HookOwner)},
		{"removing member without it never gets one", facts{deleting: true}, rec(lbv1.TargetRemoving), nil},
		{"removed member loses it", facts{deleting: true, ourPreTermHook: true}, rec(lbv1.TargetRemoved), nil},
		{"Cluster being deleted: released", facts{deleting: true, ourPreTermHook: true, clusterDeleting: true}, rec(lbv1.TargetRemoving), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			m := desiredMarks(on, true, tt.f, tt.cur)
			g.Expect(m).To(HaveKey(pt))
			g.Expect(m[pt]).To(Equal(tt.want))
			g.Expect(m).To(HaveKey(hook))
		})
	}
	// Off (the static default): no key wanted, but one left from an earlier setting goes.
	off := newLB("lb")
	NewWithT(t).Expect(desiredMarks(off, true, facts{}, rec(lbv1.TargetActive))).NotTo(HaveKey(pt))
	NewWithT(t).Expect(desiredMarks(off, true, facts{ourPreTermHook: true}, rec(lbv1.TargetActive))).To(HaveKeyWithValue(pt, BeNil()))
	// Released LoadBalancer: both go.
	NewWithT(t).Expect(desiredMarks(off, true, facts{owner: "lb", ourHook: true, ourPreTermHook: true}, record{})).
		To(And(HaveKeyWithValue(pt, BeNil()), HaveKeyWithValue(hook, BeNil())))
}
