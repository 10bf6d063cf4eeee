package controllers

import (
	"testing"

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
