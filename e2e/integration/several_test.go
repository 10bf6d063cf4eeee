package integration

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	lbv1 "github.com/caplb/caplb/api/v1alpha1"
	"github.com/caplb/caplb/e2e/harness"
)

// One Cluster, two LoadBalancers: an external endpoint that publishes the Cluster's
// controlPlaneEndpoint and an internal one that does not. Both select the same control-plane
// Machines, each holds its own pre-drain hook, and a Machine's deletion waits for both. A third
// LoadBalancer that also wants to publish is refused with a message naming the publisher — by the
// reconciler: no webhook configuration covers this flow's namespace, so this proves the backstop
// for what gets past the webhook (PublisherAdmission proves the webhook).
func testSeveralLoadBalancers(t *testing.T, s *suite) {
	g := NewWithT(t)
	external, err := harness.Listen(0, "127.0.0.1")
	g.Expect(err).NotTo(HaveOccurred())
	defer external.Close()
	internal, err := harness.Listen(0, "127.0.0.1")
	g.Expect(err).NotTo(HaveOccurred())
	defer internal.Close()

	const externalDrain, internalDrain = time.Second, 12 * time.Second
	f := newFixture(t, s, harness.ClusterOptions{})
	f.createLB(t, "127.0.0.1", int32(external.Port), withDrain(externalDrain))
	f.createLB(t, "127.0.0.1", int32(internal.Port), withDrain(internalDrain), named("internal"),
		func(lb *lbv1.LoadBalancer) { lb.Spec.PublishClusterEndpoint = ptr.To(false) })
	ms := f.addMachines(t, 3)
	names := machineNames(ms)
	t.Cleanup(func() {
		if t.Failed() {
			for _, n := range []string{"lb", "internal", "second"} {
				if lb, err := s.env.GetLB(s.ctx, f.ns, n); err == nil {
					t.Logf("%s: %s", n, harness.DescribeLB(lb))
				}
			}
		}
	})
	f.waitLB(t, "external: members active, Cluster endpoint published", func(lb *lbv1.LoadBalancer) bool {
		return allActive(names...)(lb) && harness.ConditionIs(lb, lbv1.ClusterEndpointCondition, metav1.ConditionTrue)
	})
	in, err := s.env.WaitLB(f.ctx, f.ns, "internal", flowTimeout, "internal: members active, not the publisher", func(lb *lbv1.LoadBalancer) bool {
		c := harness.Condition(lb, lbv1.ClusterEndpointCondition)
		return allActive(names...)(lb) && c != nil && c.Status == metav1.ConditionTrue && c.Reason == lbv1.NotPublisherReason
	})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(in.Status.CertSANs).To(Equal([]string{"127.0.0.1"}), "the extra endpoint's host, for the API servers' certSANs")
	g.Expect(f.clusterEndpoint(g)).To(Equal(clusterv1.APIEndpoint{Host: "127.0.0.1", Port: int32(external.Port)}),
		"the publisher's endpoint, never the internal one")

	victim := ms[0].Name
	hooks := []string{lbv1.PreDrainHookAnnotation("lb"), lbv1.PreDrainHookAnnotation("internal")}
	g.Expect(f.machine(g, victim).GetAnnotations()).To(And(HaveKey(hooks[0]), HaveKey(hooks[1])), "one hook per LoadBalancer")
	deleted := time.Now()
	g.Expect(s.env.Client.Delete(f.ctx, ms[0])).To(Succeed())
	// The external LoadBalancer lets go after its short drain; the Machine must then still be
	// there, held by the internal LoadBalancer's hook alone.
	g.Eventually(func(g Gomega) {
		anns := f.machine(g, victim).GetAnnotations()
		g.Expect(anns).NotTo(HaveKey(hooks[0]))
		g.Expect(anns).To(HaveKey(hooks[1]))
	}, flowTimeout, harness.PollInterval).Should(Succeed(), "the external hook released while the internal one holds the Machine")
	g.Expect(s.env.WaitGone(f.ctx, &clusterv1.Machine{ObjectMeta: ms[0].ObjectMeta}, time.Minute)).To(Succeed())
	g.Expect(time.Since(deleted)).To(BeNumerically(">=", internalDrain), "the Machine went before the internal LoadBalancer's drain ended")

	// A second publisher for the same Cluster is refused; the first keeps the Cluster's endpoint.
	another, err := harness.Listen(0, "127.0.0.1")
	g.Expect(err).NotTo(HaveOccurred())
	defer another.Close()
	f.createLB(t, "127.0.0.1", int32(another.Port), named("second"))
	second, err := s.env.WaitLB(f.ctx, f.ns, "second", flowTimeout, "second publisher refused", func(lb *lbv1.LoadBalancer) bool {
		c := harness.Condition(lb, lbv1.ClusterEndpointCondition)
		return c != nil && c.Status == metav1.ConditionFalse && c.Reason == lbv1.AnotherPublisherReason
	})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(harness.Condition(second, lbv1.ClusterEndpointCondition).Message).To(
		And(ContainSubstring("LoadBalancer lb also publishes"), ContainSubstring("spec.publishClusterEndpoint: false")))
	_, err = s.env.WaitEvent(f.ctx, f.ns, "LoadBalancer", "second", "Warning", lbv1.EventAnotherPublisher, flowTimeout)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(f.clusterEndpoint(g)).To(Equal(clusterv1.APIEndpoint{Host: "127.0.0.1", Port: int32(external.Port)}))

	// A node runs one caplb agent: a second LoadBalancer with a node-side data plane is refused
	// before it renders anything, and the first keeps its bootstrap Secret.
	noPublish := func(lb *lbv1.LoadBalancer) { lb.Spec.PublishClusterEndpoint = ptr.To(false) }
	f.createLB(t, "10.30.0.60", 0, withARP("10.30.0.60"), named("vip-a"), noPublish)
	_, err = s.env.WaitLB(f.ctx, f.ns, "vip-a", flowTimeout, "the first VIP renders its agents' Secret", func(lb *lbv1.LoadBalancer) bool {
		return lb.Status.Endpoint.Host == "10.30.0.60"
	})
	g.Expect(err).NotTo(HaveOccurred())
	agentSecret := f.bootstrapSecret(g).DeepCopy()
	f.createLB(t, "10.30.0.61", 0, withARP("10.30.0.61"), named("vip-b"), noPublish)
	b, err := s.env.WaitLB(f.ctx, f.ns, "vip-b", flowTimeout, "the second VIP refused", func(lb *lbv1.LoadBalancer) bool {
		c := harness.Condition(lb, lbv1.ReadyCondition)
		return c != nil && c.Reason == lbv1.InvalidSpecReason
	})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(harness.Condition(b, lbv1.ReadyCondition).Message).To(ContainSubstring("LoadBalancer vip-a of Cluster c already runs the node agent"))
	g.Expect(f.bootstrapSecret(g).Data).To(Equal(agentSecret.Data), "the first VIP's agent configuration is untouched")
}

// named gives the LoadBalancer another name than the fixture's "lb".
func named(name string) lbOption {
	return func(lb *lbv1.LoadBalancer) { lb.Name = name }
}
