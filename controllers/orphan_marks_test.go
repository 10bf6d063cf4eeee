package controllers

import (
	"context"

	"testing"

	. "github.com/onsi/gomega"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lbv1 "github.com/caplb/caplb/api/v1alpha1"
)

// TestOrphanMarksReleased: a hook whose LoadBalancer no longer exists (placed by a reconcile that
// raced the deletion) is removed by the reconcile its Machine maps to, with the annotations the
// LoadBalancer left; another LoadBalancer's hook on the same Machine stays. While the
// LoadBalancer exists on the API server (the cache behind its create), nothing is touched.
func TestOrphanMarksReleased(t *testing.T) {
	for _, tc := range []struct {
		name    string
		live    bool // the API server has the LoadBalancer the cache does not
		release bool
	}{
		{name: "gone", release: true},
		{name: "the cache is behind its create", live: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := testMachine("m1", "c1", "10.0.0.1", true, true)
			owner := lbv1.HookOwner
			m.Annotations = map[string]string{
				lbv1.PreDrainHookAnnotation("ghost"):     owner,
				lbv1.PreTerminateHookAnnotation("ghost"): owner,
				lbv1.NameAnnotation:                      "ghost",
				lbv1.StatusAnnotation:                    string(lbv1.TargetActive),
				lbv1.PreDrainHookAnnotation("other"):     owner,
			}
			h := newHarness(t, testCluster("c1"), m)
			g := h.g
			if tc.live {
				h.r.APIReader = &liveLB{Client: h.c, lb: testLB("ghost", "c1")}
			}
			h.reconcile("ghost")
			ann := h.machine("m1").Annotations
			g.Expect(ann).To(HaveKey(lbv1.PreDrainHookAnnotation("other")), "another LoadBalancer's hook stays")
			for _, k := range []string{lbv1.PreDrainHookAnnotation("ghost"), lbv1.PreTerminateHookAnnotation("ghost"), lbv1.NameAnnotation, lbv1.StatusAnnotation} {
				if tc.release {
					g.Expect(ann).NotTo(HaveKey(k))
				} else {
					g.Expect(ann).To(HaveKey(k))
				}
			}
		})
	}
}

// liveLB is an API reader that has one LoadBalancer more than the cache.
type liveLB struct {
	client.Client
	lb *lbv1.LoadBalancer
}

func (l *liveLB) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if lb, ok := obj.(*lbv1.LoadBalancer); ok && key == client.ObjectKeyFromObject(l.lb) {
		l.lb.DeepCopyInto(lb)
		return nil
	}
	return l.Client.Get(ctx, key, obj, opts...)
}
