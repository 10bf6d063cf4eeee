package integration

import (
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lbv1 "github.com/caplb/caplb/api/v1alpha1"
	"github.com/caplb/caplb/e2e/harness"
)

// pauseHold is how long a paused LoadBalancer is watched for changes it must not make: long
// enough for several reconciles (watch events arrive within milliseconds), short for the suite.
const pauseHold = 3 * time.Second

func (f *fixture) setClusterPaused(g Gomega, paused bool) {
	patch := fmt.Appendf(nil, `{"spec":{"paused":%t}}`, paused)
	g.Expect(f.s.env.Client.Patch(f.ctx, &clusterv1.Cluster{ObjectMeta: f.cluster.ObjectMeta},
		client.RawPatch(types.MergePatchType, patch))).To(Succeed())
}

// expectFrozen asserts that, for pauseHold, the member keeps its state in the status and on
// the Machine.
func (f *fixture) expectFrozen(g Gomega, name string, state lbv1.TargetState) {
	g.Consistently(func(g Gomega) {
		lb, err := f.s.env.GetLB(f.ctx, f.ns, "lb")
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(harness.TargetState(lb, name)).To(Equal(state))
		g.Expect(f.machine(g, name).Annotations).To(HaveKeyWithValue(lbv1.StatusAnnotation, string(state)))
	}, pauseHold, 200*time.Millisecond).Should(Succeed())
}

// Cluster.spec.paused and the cluster.x-k8s.io/paused annotation both stop reconciliation: a
// Paused condition says so, and a user's change waits until unpause.
func testPause(t *testing.T, s *suite) {
	g := NewWithT(t)
	f, ms := activeCluster(t, s)
	m := ms[1]
	paused := func(want metav1.ConditionStatus) func(*lbv1.LoadBalancer) bool {
		return func(lb *lbv1.LoadBalancer) bool { return harness.ConditionIs(lb, lbv1.PausedCondition, want) }
	}

	// Through the Cluster.
	f.setClusterPaused(g, true)
	lb := f.waitLB(t, "Paused by the Cluster", paused(metav1.ConditionTrue))
	g.Expect(harness.Condition(lb, lbv1.PausedCondition).Reason).To(Equal(lbv1.PausedReason))
	g.Expect(s.env.Annotate(f.ctx, m, lbv1.DisabledAnnotation, ptrTo(""))).To(Succeed())
	f.expectFrozen(g, m.Name, lbv1.TargetActive)
	f.setClusterPaused(g, false)
	f.waitLB(t, "unpaused, the change applied", func(lb *lbv1.LoadBalancer) bool {
		return paused(metav1.ConditionFalse)(lb) && harness.TargetState(lb, m.Name) == lbv1.TargetDisabled
	})

	// Through the annotation on the LoadBalancer.
	lb, err := s.env.GetLB(f.ctx, f.ns, "lb")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(s.env.Annotate(f.ctx, lb, clusterv1.PausedAnnotation, ptrTo(""))).To(Succeed())
	f.waitLB(t, "Paused by annotation", paused(metav1.ConditionTrue))
	g.Expect(s.env.Annotate(f.ctx, m, lbv1.DisabledAnnotation, nil)).To(Succeed())
	f.expectFrozen(g, m.Name, lbv1.TargetDisabled)
	g.Expect(s.env.Annotate(f.ctx, lb, clusterv1.PausedAnnotation, nil)).To(Succeed())
	f.waitLB(t, "unpaused, the member back", func(lb *lbv1.LoadBalancer) bool {
		return paused(metav1.ConditionFalse)(lb) && allActive(machineNames(ms)...)(lb)
	})
}
