package integration

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lbv1 "github.com/caplb/caplb/api/v1alpha1"
	"github.com/caplb/caplb/controllers"
)

// The manager is uninstalled while a LoadBalancer exists: CAPI then waits on caplb's pre-drain
// hook for ever, and the LoadBalancer cannot be deleted (its finalizer). `caplb cleanup`
// (controllers.Cleanup) releases both without a manager.
func testUninstallCleanup(t *testing.T, s *suite) {
	g := NewWithT(t)
	f, ms := activeCluster(t, s)
	victim := ms[0]
	// A LoadBalancerClass (selecting nothing) carries its finalizer too.
	class := &lbv1.LoadBalancerClass{
		ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "cls"},
		Spec: lbv1.LoadBalancerClassSpec{
			ClusterSelector: metav1.LabelSelector{MatchLabels: map[string]string{"nothing": "matches"}},
			Template:        lbv1.LoadBalancerClassTemplate{Spec: lbv1.LoadBalancerTemplateSpec{Backend: lbv1.Backend{Static: &lbv1.StaticBackend{}}}},
		},
	}
	g.Expect(s.env.Client.Create(f.ctx, class)).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(s.env.Client.Get(f.ctx, client.ObjectKeyFromObject(class), class)).To(Succeed())
		g.Expect(class.Finalizers).To(ContainElement(lbv1.LoadBalancerClassFinalizer))
	}, flowTimeout).Should(Succeed())

	if err := s.caplb.Stop(); err != nil {
		t.Fatalf("stopping caplb manager: %v", err)
	}
	defer func() {
		var err error
		if s.caplb, err = s.env.StartCAPLB(s.ctx, s.caplbOptions); err != nil {
			t.Errorf("restarting caplb manager: %v", err)
		}
	}()

	g.Expect(s.env.Client.Delete(f.ctx, victim)).To(Succeed())
	g.Consistently(func(g Gomega) {
		g.Expect(f.machine(g, victim.Name).Annotations).To(HaveKey(lbv1.PreDrainHookAnnotation("lb")))
	}, 2*time.Second, 200*time.Millisecond).Should(Succeed(), "without a manager, nothing releases the hook")

	// A dry run reports and changes nothing.
	rep, err := controllers.Cleanup(f.ctx, s.env.Client, controllers.CleanupOptions{Namespace: f.ns, DryRun: true})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(rep.Hooks).To(HaveLen(3))
	g.Expect(rep.Finalizers).To(ConsistOf(f.ns + "/lb"))
	g.Expect(rep.ClassFinalizers).To(ConsistOf(f.ns + "/cls"))
	g.Expect(f.machine(g, victim.Name).Annotations).To(HaveKey(lbv1.PreDrainHookAnnotation("lb")))

	rep, err = controllers.Cleanup(f.ctx, s.env.Client, controllers.CleanupOptions{Namespace: f.ns})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(rep.Marks).To(Equal(3))
	g.Expect(s.env.WaitGone(f.ctx, &clusterv1.Machine{ObjectMeta: victim.ObjectMeta}, time.Minute)).To(Succeed(),
		"CAPI deletes the Machine once the hook is gone")
	for _, m := range ms[1:] {
		got := f.machine(g, m.Name)
		g.Expect(got.Annotations).NotTo(HaveKey(lbv1.PreDrainHookAnnotation("lb")))
		g.Expect(got.Annotations).NotTo(HaveKey(lbv1.NameAnnotation))
	}
	lb := &lbv1.LoadBalancer{}
	g.Expect(s.env.Client.Get(f.ctx, client.ObjectKey{Namespace: f.ns, Name: "lb"}, lb)).To(Succeed())
	g.Expect(s.env.Client.Delete(f.ctx, lb)).To(Succeed())
	g.Expect(s.env.WaitGone(f.ctx, lb, 30*time.Second)).To(Succeed(), "no finalizer left to wait on a manager")
	g.Expect(s.env.Client.Delete(f.ctx, class)).To(Succeed())
	g.Expect(s.env.WaitGone(f.ctx, class, 30*time.Second)).To(Succeed(), "the class's finalizer is gone too")

	// Idempotent.
	rep, err = controllers.Cleanup(f.ctx, s.env.Client, controllers.CleanupOptions{Namespace: f.ns})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(rep.Hooks).To(BeEmpty())
}
