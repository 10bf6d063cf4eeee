package integration

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lbv1 "github.com/caplb/caplb/api/v1alpha1"
	"github.com/caplb/caplb/e2e/harness"
)

// The caplb manager stops while a member is being removed and a new one takes over: the
// quiesce completes from where it was (the drain period is measured from the persisted
// transition time, not restarted, not skipped), the hook is released once, and the Machine
// is never blocked and never let go early.
func testRestartMidQuiesce(t *testing.T, s *suite) {
	g := NewWithT(t)
	const drain = 8 * time.Second
	f, ms := activeCluster(t, s, withDrain(drain))
	victim := ms[0]

	// The member's quiesce cannot start before the delete is issued: a drain that ends before
	// deleteAt + drain was cut short.
	deleteAt := time.Now()
	g.Expect(s.env.Client.Delete(f.ctx, victim)).To(Succeed())
	since := f.waitHookHeld(t, victim.Name)

	if err := s.caplb.Stop(); err != nil {
		t.Fatalf("stopping caplb manager: %v", err)
	}
	stoppedAt := time.Now()
	// With caplb down, CAPI keeps waiting on our hook: nothing else releases it.
	g.Consistently(func(g Gomega) {
		m := f.machine(g, victim.Name)
		g.Expect(m.Annotations).To(HaveKey(lbv1.PreDrainHookAnnotation("lb")))
		g.Expect(m.Annotations).To(HaveKeyWithValue(lbv1.StatusAnnotation, string(lbv1.TargetRemoving)))
	}, 4*time.Second, 200*time.Millisecond).Should(Succeed())

	var err error
	restartAt := time.Now()
	if s.caplb, err = s.env.StartCAPLB(s.ctx, s.caplbOptions); err != nil {
		t.Fatalf("restarting caplb manager: %v", err)
	}
	t.Logf("caplb down for %s, member removing since %s", time.Since(stoppedAt).Round(time.Millisecond), since.Format(time.RFC3339))

	// The hook's release, seen by polling every 20 ms.
	var releasedAt time.Time
	g.Eventually(func(g Gomega) {
		m := &clusterv1.Machine{}
		err := s.env.Client.Get(f.ctx, client.ObjectKeyFromObject(victim), m)
		if err == nil {
			g.Expect(m.Annotations).NotTo(HaveKey(lbv1.PreDrainHookAnnotation("lb")))
		} else {
			g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "%v", err)
		}
		releasedAt = time.Now()
	}, time.Minute, 20*time.Millisecond).Should(Succeed())
	g.Expect(releasedAt).To(BeTemporally(">=", deleteAt.Add(drain)), "the drain was cut short (the persisted since is earlier than the real transition?)")
	g.Expect(releasedAt).To(BeTemporally("<", restartAt.Add(drain)), "the new manager restarted the drain period instead of resuming it")
	g.Expect(s.env.WaitGone(f.ctx, &clusterv1.Machine{ObjectMeta: victim.ObjectMeta}, time.Minute)).To(Succeed())
	rest := machineNames(ms[1:])
	f.waitLB(t, "the others active, nothing removing", func(lb *lbv1.LoadBalancer) bool {
		return allActive(rest...)(lb) && harness.Target(lb, victim.Name) == nil
	})
	for _, n := range rest {
		f.expectMemberAnnotations(g, n, lbv1.TargetActive)
	}
}
