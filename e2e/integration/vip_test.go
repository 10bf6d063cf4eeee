package integration

import (
	"context"
	"encoding/base64"
	"fmt"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	agentv1 "github.com/caplb/caplb/api/agent/v1alpha1"
	lbv1 "github.com/caplb/caplb/api/v1alpha1"
	"github.com/caplb/caplb/e2e/harness"
	"github.com/caplb/caplb/e2e/testinfra"
	"github.com/caplb/caplb/providers/vip"
)

// withARP makes the fixture's LoadBalancer an arp one: the VIP from spec.endpoint.host (host
// non-empty) or from an InClusterIPPool named "vips" (host empty).
func withARP(host string) lbOption {
	return func(lb *lbv1.LoadBalancer) {
		lb.Spec.Endpoint = lbv1.APIEndpoint{Host: host}
		lb.Spec.Backend = lbv1.Backend{ARP: &lbv1.ARPBackend{}}
		if host == "" {
			lb.Spec.Backend.ARP.AddressFrom = &lbv1.AddressFrom{PoolRef: lbv1.IPPoolReference{
				APIGroup: "ipam.cluster.x-k8s.io", Kind: "InClusterIPPool", Name: "vips"}}
		}
	}
}

// bootstrapSecret reads the fixture's bootstrap Secret.
func (f *fixture) bootstrapSecret(g Gomega) *corev1.Secret {
	s := &corev1.Secret{}
	g.Expect(f.s.env.Client.Get(f.ctx, types.NamespacedName{Namespace: f.ns, Name: f.cluster.Name + vip.SecretSuffix}, s)).To(Succeed())
	return s
}

// membership reads the authoritative membership from the bootstrap Secret.
func (f *fixture) membership(g Gomega) agentv1.Membership {
	m, err := agentv1.ParseMembership(string(f.bootstrapSecret(g).Data[agentv1.SecretMembershipKey]))
	g.Expect(err).NotTo(HaveOccurred())
	return m
}

func memberNames(m agentv1.Membership) []string {
	out := make([]string, 0, len(m.Members))
	for _, x := range m.Members {
		out = append(out, x.Name)
	}
	return out
}

// An arp LoadBalancer with an IPAM pool: the claim is created and owned by the LoadBalancer,
// AddressAllocated says what it waits for, and once the pool allocates the VIP is the Cluster's
// endpoint — with no Machine at all. The bootstrap Secret holds files the agent accepts.
func testVIPFromIPAMBeforeMachines(t *testing.T, s *suite) {
	g := NewWithT(t)
	f := newFixture(t, s, harness.ClusterOptions{})
	lb := f.createLB(t, "", 0, withARP(""))

	claim := &ipamv1.IPAddressClaim{}
	g.Eventually(func(g Gomega) {
		g.Expect(s.env.Client.Get(f.ctx, types.NamespacedName{Namespace: f.ns, Name: "lb"}, claim)).To(Succeed())
	}, flowTimeout).Should(Succeed())
	g.Expect(metav1.IsControlledBy(claim, lb)).To(BeTrue(), "the claim must be controlled by the LoadBalancer")
	g.Expect(claim.Spec.ClusterName).To(Equal(f.cluster.Name))
	g.Expect(claim.Spec.PoolRef.Kind).To(Equal("InClusterIPPool"))
	f.waitLB(t, "AddressAllocated False, waiting", func(lb *lbv1.LoadBalancer) bool {
		return harness.ConditionIs(lb, lbv1.AddressAllocatedCondition, metav1.ConditionFalse) &&
			harness.Condition(lb, lbv1.AddressAllocatedCondition).Reason == lbv1.WaitingForAddressReason &&
			lb.Status.Endpoint.Host == ""
	})

	// Play the IPAM provider: an address with the pool's /24 prefix, then the claim's status.
	ip := &ipamv1.IPAddress{
		ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "lb-addr"},
		Spec: ipamv1.IPAddressSpec{
			ClaimRef: ipamv1.IPAddressClaimReference{Name: "lb"},
			PoolRef:  ipamv1.IPPoolReference{APIGroup: "ipam.cluster.x-k8s.io", Kind: "InClusterIPPool", Name: "vips"},
			Address:  "10.20.0.50",
			Prefix:   ptrTo(int32(24)),
		},
	}
	g.Expect(s.env.Client.Create(f.ctx, ip)).To(Succeed())
	claim.Status.AddressRef = ipamv1.IPAddressReference{Name: ip.Name}
	g.Expect(s.env.Client.Status().Update(f.ctx, claim)).To(Succeed())

	f.waitLB(t, "endpoint is the VIP", func(lb *lbv1.LoadBalancer) bool {
		return lb.Status.Endpoint == lbv1.APIEndpoint{Host: "10.20.0.50", Port: 6443} &&
			harness.ConditionIs(lb, lbv1.AddressAllocatedCondition, metav1.ConditionTrue) &&
			harness.ConditionIs(lb, lbv1.ClusterEndpointCondition, metav1.ConditionTrue)
	})
	c := &clusterv1.Cluster{}
	g.Expect(s.env.Client.Get(f.ctx, client.ObjectKeyFromObject(f.cluster), c)).To(Succeed())
	g.Expect(c.Spec.ControlPlaneEndpoint).To(Equal(clusterv1.APIEndpoint{Host: "10.20.0.50", Port: 6443}))
	var machines clusterv1.MachineList
	g.Expect(s.env.Client.List(f.ctx, &machines, client.InNamespace(f.ns))).To(Succeed())
	g.Expect(machines.Items).To(BeEmpty(), "the endpoint must be published before any Machine exists")

	// The bootstrap Secret: what the first Machine boots from.
	var sec *corev1.Secret
	g.Eventually(func(g Gomega) {
		sec = f.bootstrapSecret(g)
		g.Expect(sec.Data).To(HaveKey(agentv1.SecretConfigKey))
	}, flowTimeout).Should(Succeed())
	g.Expect(metav1.IsControlledBy(sec, lb)).To(BeTrue())
	for _, k := range []string{agentv1.SecretConfigKey, agentv1.SecretGossipKeyKey, agentv1.SecretManifestKey, agentv1.SecretMembershipKey} {
		g.Expect(sec.Data).To(HaveKey(k))
	}
	key, err := base64.StdEncoding.DecodeString(string(sec.Data[agentv1.SecretGossipKeyKey]))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(key).To(HaveLen(32))
	cfg, err := agentv1.Parse(sec.Data[agentv1.SecretConfigKey])
	g.Expect(err).NotTo(HaveOccurred(), "the agent must accept the rendered file:\n%s", sec.Data[agentv1.SecretConfigKey])
	g.Expect(cfg.VIPs).To(Equal([]string{"10.20.0.50"}), "installed as a single address, not the pool's /24")
	g.Expect(cfg.Mode).To(Equal(agentv1.ModeARP))
	g.Expect(cfg.Membership.Dynamic).To(BeTrue())
	g.Expect(cfg.Membership.Version).To(BeZero())
	g.Expect(cfg.Members).To(BeEmpty(), "version 0: the first member holds the VIP alone")
	g.Expect(cfg.NodeAPI.Kubeconfig).To(Equal("/etc/kubernetes/kubelet.conf"))
	g.Expect(cfg.Health.CAFile).To(Equal("/etc/kubernetes/pki/ca.crt"))
	g.Expect(cfg.Health.ServerName).To(Equal("kubernetes"))
	g.Expect(cfg.Election.SecretKeyFile).To(Equal(agentv1.GossipKeyPath))
	g.Expect(cfg.Election.Label).To(Equal(f.ns + "/lb"))
	pod := &corev1.Pod{}
	g.Expect(yaml.UnmarshalStrict(sec.Data[agentv1.SecretManifestKey], pod)).To(Succeed())
	g.Expect(pod.Spec.HostNetwork).To(BeTrue())
	g.Expect(pod.Spec.Containers[0].Image).To(Equal(harness.AgentImage))
	g.Expect(pod.Spec.Containers[0].Command).To(Equal([]string{"caplb-agent", "--config", agentv1.ConfigPath}))

	// The gossip key is generated once and kept across reconciles (a spec change forces one).
	g.Expect(s.env.Client.Get(f.ctx, client.ObjectKeyFromObject(lb), lb)).To(Succeed())
	gen := lb.Generation
	orig := lb.DeepCopy()
	lb.Spec.HealthCheck.Timeout = lbv1.Duration{Duration: 500 * time.Millisecond}
	g.Expect(s.env.Client.Patch(f.ctx, lb, client.MergeFrom(orig))).To(Succeed())
	f.waitLB(t, "reconciled the change", func(lb *lbv1.LoadBalancer) bool { return lb.Status.ObservedGeneration > gen })
	g.Expect(f.bootstrapSecret(g).Data[agentv1.SecretGossipKeyKey]).To(Equal(sec.Data[agentv1.SecretGossipKeyKey]))

	// Deleting the LoadBalancer frees the claim and the Secret.
	g.Expect(s.env.Client.Delete(f.ctx, lb)).To(Succeed())
	g.Expect(s.env.WaitGone(f.ctx, lb, flowTimeout)).To(Succeed())
	g.Expect(s.env.WaitGone(f.ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: sec.Name}}, flowTimeout)).To(Succeed())
	g.Expect(s.env.WaitGone(f.ctx, &ipamv1.IPAddressClaim{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "lb"}}, flowTimeout)).To(Succeed())
}

// vipMachine creates one control-plane Machine with a Node named "<ns>-<name>" and waits until
// CAPI reports it Ready with that nodeRef.
func (f *fixture) vipMachine(t *testing.T, name, ip string) string {
	t.Helper()
	if _, err := f.s.env.CreateMachine(f.ctx, f.cluster, name, harness.MachineOptions{Addresses: harness.InternalIP(ip)}); err != nil {
		t.Fatal(err)
	}
	if err := f.s.env.WaitMachinesReady(f.ctx, f.ns, []string{name}, machineReadyTimeout); err != nil {
		t.Fatal(err)
	}
	return testinfra.NodeName(testinfra.NewMachine(f.ns, name, testinfra.MachineSpec{}))
}

// Membership follows the Machines one change at a time, each change waiting for a majority of
// the previous version's members to run it; a joining node is added only once its agent
// reports; members become active only on their agents' reports; and a deleted member is handed
// over, removed from the membership and only then released to CAPI — never before its agent
// reports it quiesced.
func testVIPMembership(t *testing.T, s *suite) {
	g := NewWithT(t)
	const drain = 2 * time.Second
	f := newFixture(t, s, harness.ClusterOptions{})
	f.createLB(t, "10.30.0.50", 0, withARP("10.30.0.50"), withDrain(drain))
	agents := newFakeAgents(f.ctx, s.env.Client)

	// Bootstrap: one Machine; nothing is issued until its agent reports.
	n0 := f.vipMachine(t, "m0", "127.0.0.2")
	g.Consistently(func(g Gomega) {
		g.Expect(f.membership(g).Version).To(BeZero())
	}, 2*time.Second, 200*time.Millisecond).Should(Succeed(), "no member before its agent reports")
	agents.run(n0, false)
	f.waitLB(t, "m0 active, endpoint served", func(lb *lbv1.LoadBalancer) bool {
		return harness.TargetState(lb, "m0") == lbv1.TargetActive &&
			harness.ConditionIs(lb, lbv1.EndpointAvailableCondition, metav1.ConditionTrue) &&
			harness.ConditionIs(lb, lbv1.AgentsReadyCondition, metav1.ConditionTrue)
	})
	g.Expect(f.membership(g)).To(Equal(agentv1.Membership{Version: 1, Members: []agentv1.MemberConfig{{Name: n0, Address: "127.0.0.2"}}}))
	// `kubectl get lb -o wide` shows who holds the VIP and who is in rotation.
	g.Eventually(func(g Gomega) {
		row := f.lbWideRow(g, "lb")
		g.Expect(row).To(HaveKeyWithValue("Owner", n0))
		g.Expect(row).To(HaveKeyWithValue("Active Members", "m0"))
	}, flowTimeout).Should(Succeed())
	node := &corev1.Node{}
	g.Expect(s.env.Client.Get(f.ctx, client.ObjectKey{Name: n0}, node)).To(Succeed())
	g.Expect(node.Annotations[agentv1.MembershipAnnotation]).To(Equal(f.membership(g).String()))
	// The Secret's agent.yaml follows: a Machine booted now starts from version 1.
	cfg, err := agentv1.Parse(f.bootstrapSecret(g).Data[agentv1.SecretConfigKey])
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(cfg.Membership.Version).To(Equal(int64(1)))

	// Scale to three. m2's agent is stuck: m1 joins (version 2), m2 cannot.
	n1 := f.vipMachine(t, "m1", "127.0.0.3")
	n2 := f.vipMachine(t, "m2", "127.0.0.4")
	agents.run(n1, false)
	agents.run(n2, true)
	g.Eventually(func(g Gomega) {
		g.Expect(memberNames(f.membership(g))).To(Equal([]string{n0, n1}))
	}, flowTimeout).Should(Succeed())
	g.Consistently(func(g Gomega) {
		g.Expect(f.membership(g).Version).To(Equal(int64(2)))
	}, 2*time.Second, 200*time.Millisecond).Should(Succeed(), "a node whose agent never reported must not join")
	agents.pause(n2, false)
	f.waitLB(t, "three active", allActive("m0", "m1", "m2"))
	m := f.membership(g)
	g.Expect(m.Version).To(Equal(int64(3)), "one change per version: %v", m)
	g.Expect(memberNames(m)).To(Equal([]string{n0, n1, n2}))

	// Delete the VIP owner (m0) while its agent is stuck: no report of quiesced, no release.
	agents.pause(n0, true)
	g.Expect(s.env.Client.Delete(f.ctx, f.machine(g, "m0"))).To(Succeed())
	f.waitHookHeld(t, "m0")
	g.Eventually(func(g Gomega) {
		g.Expect(s.env.Client.Get(f.ctx, client.ObjectKey{Name: n0}, node)).To(Succeed())
		g.Expect(node.Annotations).To(HaveKeyWithValue(agentv1.QuiesceAnnotation, "removing"))
	}, flowTimeout).Should(Succeed())
	g.Consistently(func(g Gomega) {
		lb := &lbv1.LoadBalancer{}
		g.Expect(s.env.Client.Get(f.ctx, types.NamespacedName{Namespace: f.ns, Name: "lb"}, lb)).To(Succeed())
		g.Expect(harness.TargetState(lb, "m0")).To(Equal(lbv1.TargetRemoving))
		g.Expect(f.machine(g, "m0").Annotations).To(HaveKey(lbv1.PreDrainHookAnnotation("lb")))
		g.Expect(f.membership(g).Has(n0)).To(BeTrue(), "removed from the membership before it handed over")
	}, 3*time.Second, 300*time.Millisecond).Should(Succeed(), "quiesce must wait for the agent's report")

	// The agent comes back, hands over and reports quiesced: removal, acknowledgement, release.
	agents.pause(n0, false)
	released := time.Now()
	g.Expect(s.env.WaitGone(f.ctx, &clusterv1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "m0"}}, time.Minute)).To(Succeed())
	g.Expect(time.Since(released)).To(BeNumerically(">=", drain), "released before the drain period")
	m = f.membership(g)
	g.Expect(m.Version).To(Equal(int64(4)))
	g.Expect(memberNames(m)).To(Equal([]string{n1, n2}))
	f.waitLB(t, "the others stay active and serve", func(lb *lbv1.LoadBalancer) bool {
		return allActive("m1", "m2")(lb) && harness.ConditionIs(lb, lbv1.EndpointAvailableCondition, metav1.ConditionTrue)
	})
	ev, err := s.env.WaitEvent(f.ctx, f.ns, "LoadBalancer", "lb", "Normal", "MembershipChanged", flowTimeout)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(ev.Message).To(ContainSubstring("membership version"))
}

// vipCluster is a fixture with an arp LoadBalancer and three Machines whose fake agents run,
// all active at membership version 3.
func vipCluster(t *testing.T, s *suite, host string, drain time.Duration) (*fixture, *fakeAgents, []string) {
	t.Helper()
	f := newFixture(t, s, harness.ClusterOptions{})
	f.createLB(t, host, 0, withARP(host), withDrain(drain))
	agents := newFakeAgents(f.ctx, s.env.Client)
	var nodes []string
	for i := range 3 {
		n := f.vipMachine(t, fmt.Sprintf("m%d", i), fmt.Sprintf("127.0.0.%d", 2+i))
		agents.run(n, false)
		nodes = append(nodes, n)
	}
	f.waitLB(t, "three active", func(lb *lbv1.LoadBalancer) bool {
		return allActive("m0", "m1", "m2")(lb) && harness.ConditionIs(lb, lbv1.AgentsReadyCondition, metav1.ConditionTrue)
	})
	return f, agents, nodes
}

// The disabled annotation on a Machine reaches its agent as a quiesce request on its Node; the
// member is disabled once the agent reports quiesced, and restored when the annotation goes.
// A member whose node is dead is quiesced from the survivors' view (another member serves the
// VIP): its removal completes and the hook is released without an answer from it.
func testVIPDisableAndDeadMember(t *testing.T, s *suite) {
	g := NewWithT(t)
	f, agents, nodes := vipCluster(t, s, "10.40.0.50", time.Second)

	g.Expect(s.env.Annotate(f.ctx, f.machine(g, "m1"), lbv1.DisabledAnnotation, ptrTo("maintenance"))).To(Succeed())
	f.waitLB(t, "m1 disabled", func(lb *lbv1.LoadBalancer) bool {
		return harness.TargetState(lb, "m1") == lbv1.TargetDisabled && lb.Status.ActiveTargets == 2
	})
	node := &corev1.Node{}
	g.Expect(s.env.Client.Get(f.ctx, client.ObjectKey{Name: nodes[1]}, node)).To(Succeed())
	g.Expect(node.Annotations).To(HaveKeyWithValue(agentv1.QuiesceAnnotation, "disabled"))
	st, err := agentv1.ParseAgentStatus(node.Annotations[agentv1.AgentStatusAnnotation])
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(st.Quiesced).To(BeTrue(), "disabled only on the agent's report")
	g.Expect(f.membership(g).Has(nodes[1])).To(BeTrue(), "a disabled member stays a member")

	g.Expect(s.env.Annotate(f.ctx, f.machine(g, "m1"), lbv1.DisabledAnnotation, nil)).To(Succeed())
	f.waitLB(t, "m1 restored", allActive("m0", "m1", "m2"))
	g.Expect(s.env.Client.Get(f.ctx, client.ObjectKey{Name: nodes[1]}, node)).To(Succeed())
	g.Expect(node.Annotations).NotTo(HaveKey(agentv1.QuiesceAnnotation))

	// m2's node dies (its agent stops, its Node goes NotReady), then a MachineHealthCheck-style
	// deletion: m0 still holds the VIP, so m2 counts as quiesced.
	agents.pause(nodes[2], true)
	g.Expect(s.env.Client.Get(f.ctx, client.ObjectKey{Name: nodes[2]}, node)).To(Succeed())
	g.Expect(testinfra.SetNodeReady(f.ctx, s.env.Client, node, false, nil)).To(Succeed())
	g.Expect(s.env.Client.Delete(f.ctx, f.machine(g, "m2"))).To(Succeed())
	g.Expect(s.env.WaitGone(f.ctx, &clusterv1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "m2"}}, time.Minute)).To(Succeed())
	m := f.membership(g)
	g.Expect(memberNames(m)).To(Equal([]string{nodes[0], nodes[1]}))
	g.Expect(m.Version).To(Equal(int64(4)))
	f.waitLB(t, "two active", allActive("m0", "m1"))

	// Deleting the LoadBalancer removes what it wrote on the workload cluster's Nodes.
	g.Expect(s.env.Client.Delete(f.ctx, &lbv1.LoadBalancer{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "lb"}})).To(Succeed())
	g.Expect(s.env.WaitGone(f.ctx, &lbv1.LoadBalancer{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "lb"}}, flowTimeout)).To(Succeed())
	for _, n := range nodes[:2] {
		g.Expect(s.env.Client.Get(f.ctx, client.ObjectKey{Name: n}, node)).To(Succeed())
		g.Expect(node.Annotations).NotTo(HaveKey(agentv1.MembershipAnnotation), "Node %s", n)
		g.Expect(node.Annotations).NotTo(HaveKey(agentv1.QuiesceAnnotation), "Node %s", n)
	}
}

// A restarted manager continues from the bootstrap Secret's membership: versions go on from
// where they were, never back to 0.
func testVIPManagerRestart(t *testing.T, s *suite) {
	g := NewWithT(t)
	f, _, nodes := vipCluster(t, s, "10.41.0.50", time.Second)
	g.Expect(f.membership(g).Version).To(Equal(int64(3)))
	g.Expect(s.caplb.Stop()).To(Succeed())
	var err error
	s.caplb, err = s.env.StartCAPLB(s.ctx, harness.CAPLBOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(s.env.Client.Delete(f.ctx, f.machine(g, "m0"))).To(Succeed())
	g.Expect(s.env.WaitGone(f.ctx, &clusterv1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "m0"}}, time.Minute)).To(Succeed())
	m := f.membership(g)
	g.Expect(m.Version).To(Equal(int64(4)))
	g.Expect(memberNames(m)).To(Equal([]string{nodes[1], nodes[2]}))
}

// membershipHistory records every membership version the bootstrap Secret holds, with the
// agents' reports seen right after it appeared.
type membershipHistory struct {
	mu       sync.Mutex
	versions []agentv1.Membership
	// acked[n] is how many members of version n-1 reported >= n-1 when version n was first seen.
	acked map[int64]int
}

func (f *fixture) recordMemberships(t *testing.T) *membershipHistory {
	h := &membershipHistory{acked: map[int64]int{}}
	ctx, cancel := context.WithCancel(f.ctx)
	t.Cleanup(cancel)
	go func() {
		for ctx.Err() == nil {
			s := &corev1.Secret{}
			if err := f.s.env.Client.Get(ctx, types.NamespacedName{Namespace: f.ns, Name: f.cluster.Name + vip.SecretSuffix}, s); err == nil {
				if m, err := agentv1.ParseMembership(string(s.Data[agentv1.SecretMembershipKey])); err == nil {
					h.mu.Lock()
					if len(h.versions) == 0 || h.versions[len(h.versions)-1].Version != m.Version {
						if len(h.versions) > 0 {
							prev := h.versions[len(h.versions)-1]
							n := 0
							for _, x := range prev.Members {
								node := &corev1.Node{}
								if f.s.env.Client.Get(ctx, client.ObjectKey{Name: x.Name}, node) == nil {
									if st, err := agentv1.ParseAgentStatus(node.Annotations[agentv1.AgentStatusAnnotation]); err == nil && st.MembershipVersion >= prev.Version {
										n++
									}
								}
							}
							h.acked[m.Version] = n
						}
						h.versions = append(h.versions, m)
					}
					h.mu.Unlock()
				}
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	return h
}

// A KubeadmControlPlane-style rollout, three times over: add a new Machine, then delete the
// oldest (the first is the VIP owner). Every version differs from the previous one by exactly
// one member and was issued only after a majority of the previous version ran it; the endpoint
// stays served throughout.
func testVIPRollout(t *testing.T, s *suite) {
	g := NewWithT(t)
	f, agents, nodes := vipCluster(t, s, "10.42.0.50", 500*time.Millisecond)
	h := f.recordMemberships(t)
	for i := range 3 {
		name := fmt.Sprintf("m%d", 3+i)
		n := f.vipMachine(t, name, fmt.Sprintf("127.0.0.%d", 5+i))
		agents.run(n, false)
		nodes = append(nodes, n)
		g.Eventually(func(g Gomega) { g.Expect(f.membership(g).Has(n)).To(BeTrue()) }, flowTimeout).Should(Succeed())
		old := fmt.Sprintf("m%d", i)
		g.Expect(s.env.Client.Delete(f.ctx, f.machine(g, old))).To(Succeed())
		g.Expect(s.env.WaitGone(f.ctx, &clusterv1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: old}}, time.Minute)).To(Succeed())
		g.Expect(f.membership(g).Has(nodes[i])).To(BeFalse())
		lb := f.waitLB(t, "serving after round "+name, func(lb *lbv1.LoadBalancer) bool {
			return harness.ConditionIs(lb, lbv1.EndpointAvailableCondition, metav1.ConditionTrue) &&
				lb.Status.ActiveTargets == 3 && lb.Status.TotalTargets == 3
		})
		g.Expect(harness.Target(lb, old)).To(BeNil())
	}
	g.Expect(memberNames(f.membership(g))).To(Equal(nodes[3:]))

	h.mu.Lock()
	defer h.mu.Unlock()
	g.Expect(len(h.versions)).To(BeNumerically(">=", 6), "three additions and three removals")
	for i := 1; i < len(h.versions); i++ {
		prev, cur := h.versions[i-1], h.versions[i]
		g.Expect(cur.Version).To(Equal(prev.Version+1), "versions step by one")
		added, removed := 0, 0
		for _, m := range cur.Members {
			if !prev.Has(m.Name) {
				added++
			}
		}
		for _, m := range prev.Members {
			if !cur.Has(m.Name) {
				removed++
			}
		}
		g.Expect(added+removed).To(Equal(1), "version %d -> %d changes one member", prev.Version, cur.Version)
		g.Expect(h.acked[cur.Version]).To(BeNumerically(">", len(prev.Members)/2),
			"version %d was issued before a majority of version %d ran it", cur.Version, prev.Version)
	}
}
