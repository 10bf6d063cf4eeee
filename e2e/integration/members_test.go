package integration

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lbv1 "github.com/caplb/caplb/api/v1alpha1"
	"github.com/caplb/caplb/e2e/harness"
)

// activeCluster is a fixture with an external endpoint (a real listener), a LoadBalancer and
// three control-plane Machines, all active.
func activeCluster(t *testing.T, s *suite, opts ...lbOption) (*fixture, []*clusterv1.Machine) {
	t.Helper()
	ext, err := harness.Listen(0, "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ext.Close)
	f := newFixture(t, s, harness.ClusterOptions{})
	f.createLB(t, "127.0.0.1", int32(ext.Port), opts...)
	ms := f.addMachines(t, 3)
	f.waitLB(t, "three active members", allActive(machineNames(ms)...))
	NewWithT(t).Eventually(func(g Gomega) {
		for _, m := range ms {
			f.expectMemberAnnotations(g, m.Name, lbv1.TargetActive)
		}
	}, flowTimeout).Should(Succeed())
	return f, ms
}

// A user disables a member with the proposal's annotation and enables it again; states,
// annotations and counts follow.
func testDisableEnable(t *testing.T, s *suite) {
	g := NewWithT(t)
	f, ms := activeCluster(t, s)
	m := ms[1]

	g.Expect(s.env.Annotate(f.ctx, m, lbv1.DisabledAnnotation, ptrTo("kernel upgrade"))).To(Succeed())
	lb := f.waitLB(t, "member disabled", func(lb *lbv1.LoadBalancer) bool {
		return harness.TargetState(lb, m.Name) == lbv1.TargetDisabled && lb.Status.ActiveTargets == 2 &&
			lb.Status.TotalTargets == 3
	})
	g.Expect(harness.Target(lb, m.Name).Since.IsZero()).To(BeFalse(), "since should record the transition")
	g.Eventually(func(g Gomega) { f.expectMemberAnnotations(g, m.Name, lbv1.TargetDisabled) }, flowTimeout).Should(Succeed())
	// Still Ready: two members carry the endpoint.
	g.Expect(harness.ConditionIs(lb, lbv1.ReadyCondition, metav1.ConditionTrue)).To(BeTrue(), harness.DescribeLB(lb))

	g.Expect(s.env.Annotate(f.ctx, m, lbv1.DisabledAnnotation, nil)).To(Succeed())
	f.waitLB(t, "member back in rotation", allActive(machineNames(ms)...))
	g.Eventually(func(g Gomega) { f.expectMemberAnnotations(g, m.Name, lbv1.TargetActive) }, flowTimeout).Should(Succeed())
}

// waitHookHeld waits until CAPI's Machine reconciler is waiting on our pre-drain hook for a
// Machine being deleted, while caplb quiesces it, and returns when the member entered removing.
func (f *fixture) waitHookHeld(t *testing.T, name string) time.Time {
	t.Helper()
	g := NewWithT(t)
	g.Eventually(func(g Gomega) {
		m := f.machine(g, name)
		g.Expect(m.DeletionTimestamp.IsZero()).To(BeFalse())
		g.Expect(m.Status.Deletion).NotTo(BeNil(), "CAPI has not started deleting")
		g.Expect(m.Status.Deletion.WaitForPreDrainHookStartTime.IsZero()).To(BeFalse(), "CAPI is not waiting on pre-drain hooks")
		g.Expect(m.Annotations).To(HaveKey(lbv1.PreDrainHookAnnotation("lb")))
		var deleting *metav1.Condition
		for i := range m.Status.Conditions {
			if m.Status.Conditions[i].Type == clusterv1.MachineDeletingCondition {
				deleting = &m.Status.Conditions[i]
			}
		}
		g.Expect(deleting).NotTo(BeNil())
		g.Expect(deleting.Reason).To(Equal(clusterv1.MachineDeletingWaitingForPreDrainHookReason))
	}, flowTimeout).Should(Succeed())
	lb := f.waitLB(t, name+" removing", func(lb *lbv1.LoadBalancer) bool {
		return harness.TargetState(lb, name) == lbv1.TargetRemoving
	})
	return harness.Target(lb, name).Since.Time
}

// Deleting a member: CAPI's Machine reconciler waits on our pre-drain hook while caplb quiesces
// the member for the drain period, then drains, deletes the infrastructure and the Node once
// the hook is released.
func testDeleteMember(t *testing.T, s *suite) {
	g := NewWithT(t)
	const drain = 5 * time.Second
	f, ms := activeCluster(t, s, withDrain(drain))
	victim := ms[0]
	nodeName := f.machine(g, victim.Name).Status.NodeRef.Name

	g.Expect(s.env.Client.Delete(f.ctx, victim)).To(Succeed())
	since := f.waitHookHeld(t, victim.Name)

	g.Expect(s.env.WaitGone(f.ctx, &clusterv1.Machine{ObjectMeta: victim.ObjectMeta}, time.Minute)).To(Succeed())
	// Since has one-second resolution, so this lower bound never flakes.
	g.Expect(time.Now()).To(BeTemporally(">=", since.Add(drain)), "the hook was released before the drain period")
	err := s.env.Client.Get(f.ctx, client.ObjectKey{Name: nodeName}, &corev1.Node{})
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "CAPI should have deleted Node %s: %v", nodeName, err)

	rest := machineNames(ms[1:])
	f.waitLB(t, "the others stay active", allActive(rest...))
	for _, n := range rest {
		f.expectMemberAnnotations(g, n, lbv1.TargetActive)
	}
	for _, reason := range []string{lbv1.EventTargetRemoving, lbv1.EventTargetRemoved} {
		ev, err := s.env.WaitEvent(f.ctx, f.ns, "LoadBalancer", "lb", "Normal", reason, flowTimeout)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(ev.Message).To(ContainSubstring(victim.Name))
	}
}

// Deleting the LoadBalancer while a member is being removed releases every hook and
// annotation: no Machine stays blocked by a LoadBalancer that is gone.
func testDeleteLBMidFlow(t *testing.T, s *suite) {
	g := NewWithT(t)
	// A drain period far above flowTimeout: the Machine can only go in time if the hook is
	// released by the LoadBalancer's deletion, not by the end of the quiesce.
	f, ms := activeCluster(t, s, withDrain(5*time.Minute))
	victim := ms[0]
	g.Expect(s.env.Client.Delete(f.ctx, victim)).To(Succeed())
	f.waitHookHeld(t, victim.Name)

	lb, err := s.env.GetLB(f.ctx, f.ns, "lb")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(s.env.Client.Delete(f.ctx, lb)).To(Succeed())
	g.Expect(s.env.WaitGone(f.ctx, lb, flowTimeout)).To(Succeed())
	g.Expect(s.env.WaitGone(f.ctx, &clusterv1.Machine{ObjectMeta: victim.ObjectMeta}, flowTimeout)).To(Succeed())
	for _, m := range ms[1:] {
		f.expectReleased(g, m.Name)
	}
}

// Standalone use: Nodes as members, no Cluster, no hooks.
func testNodeTargets(t *testing.T, s *suite) {
	g := NewWithT(t)
	hosts := []string{"127.0.0.2", "127.0.0.3", "127.0.0.4"}
	apiservers, err := harness.Listen(0, hosts...)
	g.Expect(err).NotTo(HaveOccurred())
	defer apiservers.Close()
	ctx := t.Context()
	// Node targets are accepted only in the manager's own namespace.
	ns := nodeTargetsNS

	pool := map[string]string{"caplb.test/pool": ns}
	var nodes []string
	for i, h := range hosts {
		n, err := s.env.CreateNode(ctx, ns+"-n"+string(rune('0'+i)), pool, h)
		g.Expect(err).NotTo(HaveOccurred())
		nodes = append(nodes, n.Name)
		// Nodes are cluster-scoped: they do not go with the namespace. (t.Context is
		// cancelled before cleanups run.)
		t.Cleanup(func() { _ = s.env.Client.Delete(context.Background(), n) })
	}
	f := &fixture{s: s, ctx: ctx, ns: ns}
	lb := &lbv1.LoadBalancer{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "lb"},
		Spec: lbv1.LoadBalancerSpec{
			TargetKind: lbv1.TargetKind{APIGroup: "", Kind: "Node"},
			Selector:   &metav1.LabelSelector{MatchLabels: pool},
			TargetPort: int32(apiservers.Port),
			Backend:    lbv1.Backend{Static: &lbv1.StaticBackend{}},
			HealthCheck: lbv1.HealthCheck{
				Interval: lbv1.Duration{Duration: time.Second}, Timeout: lbv1.Duration{Duration: time.Second},
			},
			Quiesce: lbv1.Quiesce{
				DrainPeriod: &lbv1.Duration{Duration: time.Second}, Timeout: lbv1.Duration{Duration: time.Minute},
			},
		},
	}
	g.Expect(s.env.Client.Create(ctx, lb)).To(Succeed())
	got := f.waitLB(t, "three active Nodes, a member's address published", func(lb *lbv1.LoadBalancer) bool {
		return allActive(nodes...)(lb) && hasAddr(hosts, lb.Status.Endpoint.Host) &&
			lb.Status.Endpoint.Port == int32(apiservers.Port)
	})
	g.Eventually(func(g Gomega) {
		for _, n := range nodes {
			node := &corev1.Node{}
			g.Expect(s.env.Client.Get(ctx, client.ObjectKey{Name: n}, node)).To(Succeed())
			// Nodes are cluster-scoped: the owner is namespace/name.
			g.Expect(node.Annotations).To(HaveKeyWithValue(lbv1.NameAnnotation, ns+"/lb"))
			g.Expect(node.Annotations).To(HaveKeyWithValue(lbv1.StatusAnnotation, string(lbv1.TargetActive)))
			// Deletion hooks are a CAPI Machine contract: never on Nodes.
			g.Expect(node.Annotations).NotTo(HaveKey(lbv1.PreDrainHookAnnotation("lb")))
		}
	}, flowTimeout).Should(Succeed())

	// Disable the Node whose address is published.
	var victim string
	for _, tg := range got.Status.Targets {
		if tg.Address == got.Status.Endpoint.Host {
			victim = tg.Name
		}
	}
	g.Expect(victim).NotTo(BeEmpty(), harness.DescribeLB(got))
	node := &corev1.Node{}
	g.Expect(s.env.Client.Get(ctx, client.ObjectKey{Name: victim}, node)).To(Succeed())
	g.Expect(s.env.Annotate(ctx, node, lbv1.DisabledAnnotation, ptrTo(""))).To(Succeed())
	f.waitLB(t, "Node disabled, endpoint moved", func(lb *lbv1.LoadBalancer) bool {
		return harness.TargetState(lb, victim) == lbv1.TargetDisabled && lb.Status.ActiveTargets == 2 &&
			lb.Status.Endpoint.Host != got.Status.Endpoint.Host && hasAddr(hosts, lb.Status.Endpoint.Host)
	})

	// Deleting the LoadBalancer releases the Nodes.
	g.Expect(s.env.Client.Delete(ctx, lb)).To(Succeed())
	g.Expect(s.env.WaitGone(ctx, lb, flowTimeout)).To(Succeed())
	for _, n := range nodes {
		node := &corev1.Node{}
		g.Expect(s.env.Client.Get(ctx, client.ObjectKey{Name: n}, node)).To(Succeed())
		g.Expect(node.Annotations).NotTo(HaveKey(lbv1.NameAnnotation))
		g.Expect(node.Annotations).NotTo(HaveKey(lbv1.StatusAnnotation))
	}
}

// CAPI skips pre-drain hooks for a Machine that never got a nodeRef (it never joined): deleting
// one goes ahead at once whatever caplb holds, and caplb reports the member gone without a
// quiesce instead of pretending it drained it.
func testHooksSkippedWithoutNode(t *testing.T, s *suite) {
	g := NewWithT(t)
	f, ms := activeCluster(t, s, withDrain(5*time.Minute))
	lost, err := s.env.CreateMachine(f.ctx, f.cluster, "c-never-joins", harness.MachineOptions{
		Addresses: harness.InternalIP("127.0.0.9"), NoNode: true,
	})
	g.Expect(err).NotTo(HaveOccurred())
	f.waitLB(t, "the Machine without a Node selected", func(lb *lbv1.LoadBalancer) bool {
		return harness.Target(lb, lost.Name) != nil
	})

	g.Expect(s.env.Client.Delete(f.ctx, lost)).To(Succeed())
	// Well inside the 5-minute drain period: CAPI did not wait for our hook.
	g.Expect(s.env.WaitGone(f.ctx, &clusterv1.Machine{ObjectMeta: lost.ObjectMeta}, flowTimeout)).To(Succeed())
	_, err = s.env.WaitEvent(f.ctx, f.ns, "LoadBalancer", "lb", "Warning", lbv1.EventTargetGoneWithoutQuiesce, flowTimeout)
	g.Expect(err).NotTo(HaveOccurred())
	f.waitLB(t, "back to the three members", allActive(machineNames(ms)...))
}

// Node targets outside the manager's namespace are refused with a message that says where they
// are accepted, and no Node is read, annotated or claimed for them — even with `selector: {}`.
func testNodeTargetsFenced(t *testing.T, s *suite) {
	g := NewWithT(t)
	ctx := t.Context()
	ns, err := s.env.CreateNamespace(ctx, "tenant")
	g.Expect(err).NotTo(HaveOccurred())
	n, err := s.env.CreateNode(ctx, ns+"-n0", map[string]string{"caplb.test/pool": ns}, "127.0.0.9")
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = s.env.Client.Delete(context.Background(), n) })
	lb := &lbv1.LoadBalancer{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "lb"},
		Spec: lbv1.LoadBalancerSpec{
			TargetKind: lbv1.TargetKind{APIGroup: "", Kind: "Node"},
			Selector:   &metav1.LabelSelector{},
			Backend:    lbv1.Backend{Static: &lbv1.StaticBackend{}},
		},
	}
	g.Expect(s.env.Client.Create(ctx, lb)).To(Succeed())
	f := &fixture{s: s, ctx: ctx, ns: ns}
	got := f.waitLB(t, "refused as InvalidSpec", func(lb *lbv1.LoadBalancer) bool {
		c := meta.FindStatusCondition(lb.Status.Conditions, lbv1.ReadyCondition)
		return c != nil && c.Reason == lbv1.InvalidSpecReason
	})
	msg := meta.FindStatusCondition(got.Status.Conditions, lbv1.ReadyCondition).Message
	g.Expect(msg).To(And(ContainSubstring("spec.targetKind"), ContainSubstring(nodeTargetsNS)))
	g.Expect(got.Status.Targets).To(BeEmpty())
	g.Consistently(func(g Gomega) {
		node := &corev1.Node{}
		g.Expect(s.env.Client.Get(ctx, client.ObjectKeyFromObject(n), node)).To(Succeed())
		g.Expect(node.Annotations).NotTo(HaveKey(lbv1.NameAnnotation))
	}, 2*time.Second, 200*time.Millisecond).Should(Succeed())
}

// With spec.quiesce.preTerminateHook, a Machine whose pre-drain hook CAPI skips (no nodeRef) is
// still held by caplb's pre-terminate hook until it has left the load balancer (the drain
// period), then released; CAPI deletes it after.
func testPreTerminateHookHoldsSkippedMachine(t *testing.T, s *suite) {
	g := NewWithT(t)
	const drain = 4 * time.Second
	f, ms := activeCluster(t, s, withDrain(drain), func(lb *lbv1.LoadBalancer) {
		lb.Spec.Quiesce.PreTerminateHook = ptr.To(true)
	})
	lost, err := s.env.CreateMachine(f.ctx, f.cluster, "c-never-joins", harness.MachineOptions{
		Addresses: harness.InternalIP("127.0.0.9"), NoNode: true,
	})
	g.Expect(err).NotTo(HaveOccurred())
	g.Eventually(func(g Gomega) {
		g.Expect(f.machine(g, lost.Name).Annotations).To(HaveKey(lbv1.PreTerminateHookAnnotation("lb")))
	}, flowTimeout).Should(Succeed())

	deleteAt := time.Now()
	g.Expect(s.env.Client.Delete(f.ctx, lost)).To(Succeed())
	g.Consistently(func(g Gomega) {
		m := f.machine(g, lost.Name)
		g.Expect(m.Annotations).To(HaveKey(lbv1.PreTerminateHookAnnotation("lb")))
	}, drain/2, 200*time.Millisecond).Should(Succeed(), "the infrastructure waits while the member drains")
	g.Expect(s.env.WaitGone(f.ctx, &clusterv1.Machine{ObjectMeta: lost.ObjectMeta}, flowTimeout)).To(Succeed())
	g.Expect(time.Now()).To(BeTemporally(">=", deleteAt.Add(drain)), "released before the drain period")
	for _, m := range ms {
		g.Expect(f.machine(g, m.Name).Annotations).To(HaveKey(lbv1.PreTerminateHookAnnotation("lb")))
	}
}
