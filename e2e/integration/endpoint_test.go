package integration

import (
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lbv1 "github.com/caplb/caplb/api/v1alpha1"
	"github.com/caplb/caplb/e2e/harness"
)

// clusterEndpoint reads the Cluster's spec.controlPlaneEndpoint.
func (f *fixture) clusterEndpoint(g Gomega) clusterv1.APIEndpoint {
	c := &clusterv1.Cluster{}
	g.Expect(f.s.env.Client.Get(f.ctx, client.ObjectKeyFromObject(f.cluster), c)).To(Succeed())
	return c.Spec.ControlPlaneEndpoint
}

// An external load balancer (a real TCP listener) is published to the Cluster before any
// Machine exists, which is what KubeadmControlPlane waits for before creating its first one.
func testEndpointBeforeMachines(t *testing.T, s *suite) {
	g := NewWithT(t)
	ext, err := harness.Listen(0, "127.0.0.1")
	g.Expect(err).NotTo(HaveOccurred())
	defer ext.Close()
	f := newFixture(t, s, harness.ClusterOptions{})
	port := int32(ext.Port)
	want := lbv1.APIEndpoint{Host: "127.0.0.1", Port: port}

	f.createLB(t, "127.0.0.1", port)
	lb := f.waitLB(t, "endpoint published and probed", func(lb *lbv1.LoadBalancer) bool {
		return lb.Status.Endpoint == want &&
			harness.ConditionIs(lb, lbv1.EndpointAvailableCondition, metav1.ConditionTrue) &&
			harness.ConditionIs(lb, lbv1.ClusterEndpointCondition, metav1.ConditionTrue)
	})
	machines := &clusterv1.MachineList{}
	g.Expect(s.env.Client.List(f.ctx, machines, client.InNamespace(f.ns))).To(Succeed())
	g.Expect(machines.Items).To(BeEmpty(), "the endpoint must not wait for a Machine")
	g.Expect(f.clusterEndpoint(g)).To(Equal(clusterv1.APIEndpoint{Host: "127.0.0.1", Port: port}))
	g.Expect(harness.Condition(lb, lbv1.TargetsAvailableCondition)).To(HaveField("Status", metav1.ConditionFalse))
	g.Expect(harness.Condition(lb, lbv1.TargetsAvailableCondition)).To(HaveField("Reason", lbv1.NoTargetsReason))
	g.Expect(harness.Condition(lb, lbv1.ReadyCondition)).To(HaveField("Status", metav1.ConditionFalse))

	// The probe is real: with the listener gone the endpoint is reported unreachable, and
	// available again once it is back.
	ext.Close()
	f.waitLB(t, "endpoint reported unreachable", func(lb *lbv1.LoadBalancer) bool {
		c := harness.Condition(lb, lbv1.EndpointAvailableCondition)
		return c != nil && c.Status == metav1.ConditionFalse && c.Reason == lbv1.EndpointUnreachableReason
	})
	ext2, err := harness.Listen(ext.Port, "127.0.0.1")
	g.Expect(err).NotTo(HaveOccurred())
	defer ext2.Close()
	f.waitLB(t, "endpoint available again", func(lb *lbv1.LoadBalancer) bool {
		return harness.ConditionIs(lb, lbv1.EndpointAvailableCondition, metav1.ConditionTrue)
	})

	// Members join once CAPI has Machines for them.
	ms := f.addMachines(t, 3)
	f.waitLB(t, "three active members, Ready", func(lb *lbv1.LoadBalancer) bool {
		return allActive(machineNames(ms)...)(lb) && harness.ConditionIs(lb, lbv1.ReadyCondition, metav1.ConditionTrue)
	})
	g.Eventually(func(g Gomega) {
		for _, m := range ms {
			f.expectMemberAnnotations(g, m.Name, lbv1.TargetActive)
		}
	}, flowTimeout).Should(Succeed())
	// The Cluster's endpoint stayed what we published first.
	g.Expect(f.clusterEndpoint(g)).To(Equal(clusterv1.APIEndpoint{Host: "127.0.0.1", Port: port}))
}

// With spec.endpoint.host empty, static publishes the address of a ready member, and moves to
// another one (with a Warning event) when that member is disabled. The Cluster's endpoint, once
// set, is never overwritten.
func testStaticMemberEndpoint(t *testing.T, s *suite) {
	g := NewWithT(t)
	hosts := []string{"127.0.0.2", "127.0.0.3", "127.0.0.4"}
	apiservers, err := harness.Listen(0, hosts...)
	g.Expect(err).NotTo(HaveOccurred())
	defer apiservers.Close()
	f := newFixture(t, s, harness.ClusterOptions{})
	port := int32(apiservers.Port)

	f.createLB(t, "", 0, func(lb *lbv1.LoadBalancer) { lb.Spec.TargetPort = port })
	f.waitLB(t, "waiting for a member to publish", func(lb *lbv1.LoadBalancer) bool {
		c := harness.Condition(lb, lbv1.EndpointAvailableCondition)
		return c != nil && c.Status == metav1.ConditionFalse && c.Reason == lbv1.WaitingForEndpointReason
	})
	g.Expect(f.clusterEndpoint(g).IsValid()).To(BeFalse(), "nothing to publish yet")

	ms := f.addMachines(t, 3)
	lb := f.waitLB(t, "a member's address published", func(lb *lbv1.LoadBalancer) bool {
		return hasAddr(hosts, lb.Status.Endpoint.Host) && lb.Status.Endpoint.Port == port &&
			allActive(machineNames(ms)...)(lb) &&
			harness.ConditionIs(lb, lbv1.EndpointAvailableCondition, metav1.ConditionTrue)
	})
	published := lb.Status.Endpoint.Host
	g.Eventually(func(g Gomega) clusterv1.APIEndpoint { return f.clusterEndpoint(g) }, flowTimeout).
		Should(Equal(clusterv1.APIEndpoint{Host: published, Port: port}))

	// Take the published member out of rotation.
	var victim string
	for _, tg := range lb.Status.Targets {
		if tg.Address == published {
			victim = tg.Name
		}
	}
	g.Expect(victim).NotTo(BeEmpty(), "no target has the published address %s: %s", published, harness.DescribeLB(lb))
	g.Expect(s.env.Annotate(f.ctx, f.machine(g, victim), lbv1.DisabledAnnotation, ptrTo("maintenance"))).To(Succeed())
	lb = f.waitLB(t, "endpoint moved off the disabled member", func(lb *lbv1.LoadBalancer) bool {
		return harness.TargetState(lb, victim) == lbv1.TargetDisabled &&
			hasAddr(hosts, lb.Status.Endpoint.Host) && lb.Status.Endpoint.Host != published
	})
	ev, err := s.env.WaitEvent(f.ctx, f.ns, "LoadBalancer", "lb", "Warning", lbv1.EventEndpointMoved, flowTimeout)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(ev.Message).To(ContainSubstring(published))
	t.Logf("endpoint moved %s -> %s; event %s: %s", published, lb.Status.Endpoint.Host, ev.Reason, ev.Message)

	// The Cluster keeps the endpoint it was given; caplb says so instead of overwriting it.
	lb = f.waitLB(t, "ClusterEndpoint mismatch reported", func(lb *lbv1.LoadBalancer) bool {
		c := harness.Condition(lb, lbv1.ClusterEndpointCondition)
		return c != nil && c.Status == metav1.ConditionFalse && c.Reason == lbv1.ClusterEndpointMismatchReason
	})
	g.Expect(f.clusterEndpoint(g)).To(Equal(clusterv1.APIEndpoint{Host: published, Port: port}))
}

// A Cluster that already has a different endpoint is never overwritten: a False ClusterEndpoint
// condition and a Warning event say so.
func testClusterEndpointConflict(t *testing.T, s *suite) {
	g := NewWithT(t)
	ext, err := harness.Listen(0, "127.0.0.1")
	g.Expect(err).NotTo(HaveOccurred())
	defer ext.Close()
	theirs := clusterv1.APIEndpoint{Host: "api.other.example", Port: 6443}
	f := newFixture(t, s, harness.ClusterOptions{Endpoint: theirs})

	f.createLB(t, "127.0.0.1", int32(ext.Port))
	lb := f.waitLB(t, "mismatch reported", func(lb *lbv1.LoadBalancer) bool {
		c := harness.Condition(lb, lbv1.ClusterEndpointCondition)
		return c != nil && c.Status == metav1.ConditionFalse && c.Reason == lbv1.ClusterEndpointMismatchReason
	})
	g.Expect(lb.Status.Endpoint).To(Equal(lbv1.APIEndpoint{Host: "127.0.0.1", Port: int32(ext.Port)}))
	msg := harness.Condition(lb, lbv1.ClusterEndpointCondition).Message
	g.Expect(msg).To(ContainSubstring("api.other.example"), "the condition should name the Cluster's endpoint")
	ev, err := s.env.WaitEvent(f.ctx, f.ns, "LoadBalancer", "lb", "Warning", lbv1.EventClusterEndpointMismatch, flowTimeout)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(ev.Message).To(ContainSubstring("api.other.example"))
	g.Expect(f.clusterEndpoint(g)).To(Equal(theirs), "caplb must never overwrite a Cluster's endpoint")
}

// A LoadBalancer with no endpoint of its own adopts the Cluster's: it is copied into
// spec.endpoint (an EndpointAdopted event says so) and served from then on.
func testClusterEndpointAdoption(t *testing.T, s *suite) {
	g := NewWithT(t)
	ext, err := harness.Listen(0, "127.0.0.1")
	g.Expect(err).NotTo(HaveOccurred())
	defer ext.Close()
	theirs := clusterv1.APIEndpoint{Host: "127.0.0.1", Port: int32(ext.Port)}
	f := newFixture(t, s, harness.ClusterOptions{Endpoint: theirs})

	f.createLB(t, "", 0)
	lb := f.waitLB(t, "Cluster endpoint adopted", func(lb *lbv1.LoadBalancer) bool {
		return lb.Status.Endpoint == lbv1.APIEndpoint{Host: theirs.Host, Port: theirs.Port} &&
			harness.ConditionIs(lb, lbv1.ClusterEndpointCondition, metav1.ConditionTrue) &&
			harness.ConditionIs(lb, lbv1.EndpointAvailableCondition, metav1.ConditionTrue)
	})
	g.Expect(lb.Spec.Endpoint).To(Equal(lbv1.APIEndpoint{Host: theirs.Host, Port: theirs.Port}))
	_, err = s.env.WaitEvent(f.ctx, f.ns, "LoadBalancer", "lb", "Normal", lbv1.EventEndpointAdopted, flowTimeout)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(f.clusterEndpoint(g)).To(Equal(theirs))
}
