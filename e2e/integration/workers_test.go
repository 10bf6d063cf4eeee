package integration

import (
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentv1 "github.com/caplb/caplb/api/agent/v1alpha1"
	lbv1 "github.com/caplb/caplb/api/v1alpha1"
	"github.com/caplb/caplb/e2e/harness"
	"github.com/caplb/caplb/e2e/testinfra"
)

// workerLB makes the fixture's LoadBalancer an ingress VIP on the Machines of MachineDeployment
// md: 443 and 80, a TCP health check, never the Cluster's endpoint.
func workerLB(md string) lbOption {
	return func(lb *lbv1.LoadBalancer) {
		lb.Spec.PublishClusterEndpoint = ptr.To(false)
		lb.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{clusterv1.MachineDeploymentNameLabel: md}}
		lb.Spec.TargetPort = 443
		lb.Spec.Backend.ARP.ExtraPorts = []int32{80}
		lb.Spec.Backend.ARP.Agent.Health = &lbv1.AgentHealth{Type: lbv1.AgentHealthTCP, Port: 443}
	}
}

// One Cluster, two ARP VIPs: the control plane's (the default selector) and an ingress VIP on the
// worker Machines of a MachineDeployment. Both are admitted and reconciled; each renders its own
// bootstrap Secret (<cluster>-caplb-agent, <loadbalancer>-caplb-agent) named in
// status.bootstrapSecretName; the worker one never publishes; each Machine carries the hook of
// its own LoadBalancer only, each Node the membership of its own; a worker Machine's deletion
// waits on the worker LoadBalancer's hook until its agent is out; a third VIP on the same
// MachineDeployment is refused; and a worker selector that would publish is refused at admission.
func testWorkerTargets(t *testing.T, s *suite) {
	g := NewWithT(t)
	const md = "c-md-0"
	f := newFixture(t, s, harness.ClusterOptions{})
	f.createLB(t, "10.50.0.50", 0, withARP("10.50.0.50"), named("cp"), withDrain(time.Second))
	const workerDrain = 3 * time.Second
	f.createLB(t, "10.50.0.51", 0, withARP("10.50.0.51"), named("ingress"), withDrain(workerDrain), workerLB(md))
	cpAgents := newFakeAgents(f.ctx, s.env.Client)
	wAgents := newFakeAgents(f.ctx, s.env.Client)

	var cpNodes, wNodes []string
	for i := range 2 {
		cpNodes = append(cpNodes, f.vipMachine(t, fmt.Sprintf("cp%d", i), fmt.Sprintf("127.0.0.%d", 2+i)))
		cpAgents.run(cpNodes[i], false)
	}
	for i := range 2 {
		name := fmt.Sprintf("w%d", i)
		_, err := s.env.CreateMachine(f.ctx, f.cluster, name, harness.MachineOptions{Worker: true,
			Addresses: harness.InternalIP(fmt.Sprintf("127.0.1.%d", 2+i)),
			Labels:    map[string]string{clusterv1.MachineDeploymentNameLabel: md, clusterv1.MachineSetNameLabel: md + "-x"}})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(s.env.WaitMachinesReady(f.ctx, f.ns, []string{name}, machineReadyTimeout)).To(Succeed())
		wNodes = append(wNodes, testinfra.NodeName(testinfra.NewMachine(f.ns, name, testinfra.MachineSpec{})))
		wAgents.run(wNodes[i], false)
	}

	cp, err := s.env.WaitLB(f.ctx, f.ns, "cp", flowTimeout, "control plane active and published", func(lb *lbv1.LoadBalancer) bool {
		return allActive("cp0", "cp1")(lb) && lb.Status.TotalTargets == 2 &&
			harness.ConditionIs(lb, lbv1.ClusterEndpointCondition, metav1.ConditionTrue) &&
			harness.ConditionIs(lb, lbv1.AgentsReadyCondition, metav1.ConditionTrue)
	})
	g.Expect(err).NotTo(HaveOccurred())
	in, err := s.env.WaitLB(f.ctx, f.ns, "ingress", flowTimeout, "workers active, not the publisher", func(lb *lbv1.LoadBalancer) bool {
		c := harness.Condition(lb, lbv1.ClusterEndpointCondition)
		return allActive("w0", "w1")(lb) && lb.Status.TotalTargets == 2 && c != nil && c.Reason == lbv1.NotPublisherReason &&
			harness.ConditionIs(lb, lbv1.AgentsReadyCondition, metav1.ConditionTrue) && harness.ConditionIs(lb, lbv1.ReadyCondition, metav1.ConditionTrue)
	})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(f.clusterEndpoint(g)).To(Equal(clusterv1.APIEndpoint{Host: "10.50.0.50", Port: 6443}), "the control plane's VIP, never the ingress one")
	g.Expect(in.Status.Endpoint).To(Equal(lbv1.APIEndpoint{Host: "10.50.0.51", Port: 443}))

	// Two Secrets, each named in its LoadBalancer's status, each rendering its own ports and check.
	g.Expect(cp.Status.BootstrapSecretName).To(Equal("c-caplb-agent"))
	g.Expect(in.Status.BootstrapSecretName).To(Equal("ingress-caplb-agent"))
	for lbName, sec := range map[string]string{"cp": "c-caplb-agent", "ingress": "ingress-caplb-agent"} {
		got := f.secret(g, sec)
		g.Expect(got.OwnerReferences).To(ContainElement(HaveField("Name", lbName)), sec)
	}
	cfg, err := agentv1.Parse(f.secret(g, "ingress-caplb-agent").Data[agentv1.SecretConfigKey])
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(cfg.Port).To(Equal(443))
	g.Expect(cfg.ExtraPorts).To(Equal([]int{80}))
	g.Expect(cfg.Health.Type).To(Equal(agentv1.HealthTCP))
	g.Expect(cfg.VIPs).To(Equal([]string{"10.50.0.51"}))
	g.Expect(memberNames(membershipOf(g, f.secret(g, "ingress-caplb-agent")))).To(ConsistOf(wNodes))
	g.Expect(memberNames(membershipOf(g, f.secret(g, "c-caplb-agent")))).To(ConsistOf(cpNodes))

	// Each Machine is held by its own LoadBalancer only; each Node carries its own membership.
	for _, m := range []string{"cp0", "cp1"} {
		g.Expect(f.machine(g, m).Annotations).To(And(HaveKey(lbv1.PreDrainHookAnnotation("cp")), Not(HaveKey(lbv1.PreDrainHookAnnotation("ingress")))), m)
	}
	for _, m := range []string{"w0", "w1"} {
		g.Expect(f.machine(g, m).Annotations).To(And(HaveKey(lbv1.PreDrainHookAnnotation("ingress")), Not(HaveKey(lbv1.PreDrainHookAnnotation("cp")))), m)
	}
	for _, n := range wNodes {
		node := &corev1.Node{}
		g.Expect(s.env.Client.Get(f.ctx, client.ObjectKey{Name: n}, node)).To(Succeed())
		m, err := agentv1.ParseMembership(node.Annotations[agentv1.MembershipAnnotation])
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(memberNames(m)).To(ConsistOf(wNodes), "a worker Node runs the worker membership")
	}

	// A worker Machine leaves as a control-plane one does: held by the pre-drain hook until its
	// agent is quiesced and out of the membership, then deleted. The control plane is untouched.
	hook := lbv1.PreDrainHookAnnotation("ingress")
	deleted := time.Now()
	g.Expect(s.env.Client.Delete(f.ctx, f.machine(g, "w0"))).To(Succeed())
	g.Eventually(func(g Gomega) {
		m := f.machine(g, "w0")
		g.Expect(m.DeletionTimestamp).NotTo(BeNil())
		g.Expect(m.Annotations).To(HaveKey(hook))
		lb, err := s.env.GetLB(f.ctx, f.ns, "ingress")
		g.Expect(err).NotTo(HaveOccurred())
		// A non-publisher keeps its members' states in its own status.targets (the name and status
		// annotations are the publisher's).
		g.Expect(harness.TargetState(lb, "w0")).To(Equal(lbv1.TargetRemoving))
	}, flowTimeout, harness.PollInterval).Should(Succeed(), "the hook holds the deleting worker while it leaves")
	g.Expect(s.env.WaitGone(f.ctx, &clusterv1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "w0"}}, time.Minute)).To(Succeed())
	g.Expect(time.Since(deleted)).To(BeNumerically(">=", workerDrain), "the worker went before its drain period ended")
	g.Expect(memberNames(membershipOf(g, f.secret(g, "ingress-caplb-agent")))).To(Equal([]string{wNodes[1]}))
	_, err = s.env.WaitEvent(f.ctx, f.ns, "LoadBalancer", "ingress", "Normal", lbv1.EventTargetRemoved, flowTimeout)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(memberNames(membershipOf(g, f.secret(g, "c-caplb-agent")))).To(ConsistOf(cpNodes))
	g.Expect(f.clusterEndpoint(g)).To(Equal(clusterv1.APIEndpoint{Host: "10.50.0.50", Port: 6443}))

	// Two node agents on the same Machines are refused before anything is rendered.
	f.createLB(t, "10.50.0.52", 0, withARP("10.50.0.52"), named("ingress-2"), withDrain(time.Second), workerLB(md))
	second, err := s.env.WaitLB(f.ctx, f.ns, "ingress-2", flowTimeout, "refused: same Machines", func(lb *lbv1.LoadBalancer) bool {
		return harness.Condition(lb, lbv1.ReadyCondition) != nil && harness.Condition(lb, lbv1.ReadyCondition).Reason == lbv1.InvalidSpecReason
	})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(harness.Condition(second, lbv1.ReadyCondition).Message).To(And(
		ContainSubstring("LoadBalancer ingress of Cluster c already runs the node agent"), ContainSubstring("spec.selector")))
	err = s.env.Client.Get(f.ctx, types.NamespacedName{Namespace: f.ns, Name: "ingress-2-caplb-agent"}, &corev1.Secret{})
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "a refused LoadBalancer renders nothing: %v", err)

	// A worker selector that would publish the Cluster's endpoint is refused at admission.
	bad := &lbv1.LoadBalancer{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "publishes"}, Spec: lbv1.LoadBalancerSpec{
		ClusterName: f.cluster.Name, Endpoint: lbv1.APIEndpoint{Host: "10.50.0.53"}, Backend: lbv1.Backend{ARP: &lbv1.ARPBackend{}},
		Selector: &metav1.LabelSelector{MatchLabels: map[string]string{clusterv1.MachineDeploymentNameLabel: md}}}}
	err = s.env.Client.Create(f.ctx, bad)
	g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%v", err)
	g.Expect(err.Error()).To(And(ContainSubstring("spec.selector picks worker Machines"), ContainSubstring("spec.publishClusterEndpoint: false")))
}

func membershipOf(g Gomega, s *corev1.Secret) agentv1.Membership {
	m, err := agentv1.ParseMembership(string(s.Data[agentv1.SecretMembershipKey]))
	g.Expect(err).NotTo(HaveOccurred())
	return m
}
