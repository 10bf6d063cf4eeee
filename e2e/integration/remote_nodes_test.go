package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/kubeconfig"
	"sigs.k8s.io/cluster-api/util/secret"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentv1 "github.com/caplb/caplb/api/agent/v1alpha1"
	lbv1 "github.com/caplb/caplb/api/v1alpha1"
	"github.com/caplb/caplb/e2e/harness"
	"github.com/caplb/caplb/e2e/testinfra"
)

// workloadOutageTimeout bounds how long the ClusterCache takes to notice a workload API server
// that went away: a failed health probe (every 10s, 5s timeout), then its cluster source after
// 15s without a passing probe.
const workloadOutageTimeout = 90 * time.Second

// Remote Node targets: an externally managed cluster (its infrastructure carries
// cluster.x-k8s.io/managed-by; no control plane object, no Machines) served by a second,
// real API server that the manager reaches only through the <cluster>-kubeconfig Secret, with
// the token of config/workload's ServiceAccount (Nodes: get, list, watch, patch). The
// LoadBalancer lives in a tenant namespace: remote Node targets are not fenced.
func testRemoteNodeTargets(t *testing.T, s *suite) {
	g := NewWithT(t)
	const vipAddr = "10.60.0.50"
	wl, err := s.env.StartWorkload(s.ctx)
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = wl.Stop() })
	f := newFixture(t, s, harness.ClusterOptions{ExternallyManaged: true})
	f.createLB(t, vipAddr, 0, withARP(vipAddr), withDrain(time.Second), func(lb *lbv1.LoadBalancer) {
		lb.Spec.TargetKind = lbv1.TargetKind{APIGroup: "", Kind: lbv1.NodeKind}
		lb.Spec.Quiesce.WhenCordoned = true
	})

	// The VIP is published before the workload cluster can be reached, let alone has Nodes: its
	// API server may need the VIP to come up.
	f.waitLB(t, "VIP published, workload cluster not reachable yet", func(lb *lbv1.LoadBalancer) bool {
		return lb.Status.Endpoint.Host == vipAddr &&
			harness.ConditionIs(lb, lbv1.WorkloadClusterReachableCondition, metav1.ConditionFalse)
	})
	g.Eventually(func(g Gomega) {
		c := &clusterv1.Cluster{}
		g.Expect(s.env.Client.Get(f.ctx, client.ObjectKeyFromObject(f.cluster), c)).To(Succeed())
		g.Expect(c.Spec.ControlPlaneEndpoint.Host).To(Equal(vipAddr))
	}, flowTimeout).Should(Succeed())

	// The external tool brings the cluster up: its infrastructure is provisioned and it hands
	// the management cluster a kubeconfig.
	g.Expect(wl.CreateKubeconfigSecret(f.ctx, s.env.Client, f.cluster)).To(Succeed())
	g.Expect(testinfra.SetProvisioned(f.ctx, s.env.Client, f.ns, f.cluster.Name)).To(Succeed())
	got := f.waitLB(t, "workload cluster reachable, no Node yet", func(lb *lbv1.LoadBalancer) bool {
		return harness.ConditionIs(lb, lbv1.WorkloadClusterReachableCondition, metav1.ConditionTrue)
	})
	g.Expect(got.Status.Targets).To(BeEmpty())

	// Nodes join; the default selector takes the control-plane ones, not the worker.
	agents := newFakeAgents(f.ctx, wl.Client)
	cp := map[string]string{"node-role.kubernetes.io/control-plane": ""}
	nodes := []string{"cp-0", "cp-1", "cp-2"}
	for i, n := range nodes {
		_, err := wl.CreateNode(f.ctx, n, cp, fmt.Sprintf("127.0.0.%d", 2+i))
		g.Expect(err).NotTo(HaveOccurred())
		agents.run(n, false)
	}
	_, err = wl.CreateNode(f.ctx, "w-0", map[string]string{"node-role.kubernetes.io/worker": ""}, "127.0.0.9")
	g.Expect(err).NotTo(HaveOccurred())
	f.waitLB(t, "three control-plane Nodes active, agents on the membership", func(lb *lbv1.LoadBalancer) bool {
		return allActive(nodes...)(lb) && harness.ConditionIs(lb, lbv1.AgentsReadyCondition, metav1.ConditionTrue)
	})
	m := f.membership(g)
	g.Expect(memberNames(m)).To(Equal(nodes))
	for _, n := range nodes {
		node := workloadNode(g, f.ctx, wl.Client, n)
		// Nodes are cluster-scoped: the owner is namespace/name.
		g.Expect(node.Annotations).To(HaveKeyWithValue(lbv1.NameAnnotation, f.ns+"/lb"), "Node %s", n)
		g.Expect(node.Annotations).To(HaveKeyWithValue(lbv1.StatusAnnotation, string(lbv1.TargetActive)), "Node %s", n)
		g.Expect(node.Annotations).To(HaveKeyWithValue(agentv1.MembershipAnnotation, m.String()), "Node %s", n)
	}
	g.Expect(workloadNode(g, f.ctx, wl.Client, "w-0").Annotations).NotTo(HaveKey(lbv1.NameAnnotation))

	// The disabled annotation on a remote Node quiesces it through its agent, and back.
	g.Expect(harness.AnnotateWith(f.ctx, wl.Client, workloadNode(g, f.ctx, wl.Client, "cp-1"), lbv1.DisabledAnnotation, ptrTo("maintenance"))).To(Succeed())
	f.waitLB(t, "cp-1 disabled", func(lb *lbv1.LoadBalancer) bool {
		return harness.TargetState(lb, "cp-1") == lbv1.TargetDisabled && lb.Status.ActiveTargets == 2
	})
	node := workloadNode(g, f.ctx, wl.Client, "cp-1")
	g.Expect(node.Annotations).To(HaveKeyWithValue(agentv1.QuiesceAnnotation, "disabled"))
	g.Expect(node.Annotations).To(HaveKeyWithValue(lbv1.StatusAnnotation, string(lbv1.TargetDisabled)))
	g.Expect(harness.AnnotateWith(f.ctx, wl.Client, node, lbv1.DisabledAnnotation, nil)).To(Succeed())
	f.waitLB(t, "cp-1 restored", allActive(nodes...))

	// The cluster's lifecycle tool takes cp-2 out the way kubectl drain starts: a cordon
	// (spec.quiesce.whenCordoned). It waits for the Node's status annotation to read disabled,
	// then deletes the Node: the member goes, and the membership without it.
	node = workloadNode(g, f.ctx, wl.Client, "cp-2")
	base := node.DeepCopy()
	node.Spec.Unschedulable = true
	g.Expect(wl.Client.Patch(f.ctx, node, client.MergeFrom(base))).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(workloadNode(g, f.ctx, wl.Client, "cp-2").Annotations).To(HaveKeyWithValue(lbv1.StatusAnnotation, string(lbv1.TargetDisabled)))
	}, flowTimeout).Should(Succeed())
	g.Expect(wl.Client.Delete(f.ctx, node)).To(Succeed())
	f.waitLB(t, "cp-2 removed with its Node", allActive("cp-0", "cp-1"))
	g.Eventually(func(g Gomega) {
		g.Expect(memberNames(f.membership(g))).To(Equal([]string{"cp-0", "cp-1"}))
	}, flowTimeout).Should(Succeed())
	_, err = s.env.WaitEvent(f.ctx, f.ns, "LoadBalancer", "lb", "Normal", lbv1.EventTargetRemoved, flowTimeout)
	g.Expect(err).NotTo(HaveOccurred())
	before := f.membership(g)

	// The workload API server goes away (connections refused): the condition says so, and
	// nothing else changes — members, endpoint, the Cluster's endpoint, the agents' membership.
	g.Expect(wl.Stop()).To(Succeed())
	outage, err := s.env.WaitLB(f.ctx, f.ns, "lb", workloadOutageTimeout, "workload cluster unreachable",
		func(lb *lbv1.LoadBalancer) bool {
			return harness.ConditionIs(lb, lbv1.WorkloadClusterReachableCondition, metav1.ConditionFalse)
		})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(harness.Condition(outage, lbv1.WorkloadClusterReachableCondition).Reason).To(Equal(lbv1.WorkloadClusterUnreachableReason))
	g.Consistently(func(g Gomega) {
		lb, err := s.env.GetLB(f.ctx, f.ns, "lb")
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(allActive("cp-0", "cp-1")(lb)).To(BeTrue(), harness.DescribeLB(lb))
		g.Expect(lb.Status.Endpoint.Host).To(Equal(vipAddr))
		c := &clusterv1.Cluster{}
		g.Expect(s.env.Client.Get(f.ctx, client.ObjectKeyFromObject(f.cluster), c)).To(Succeed())
		g.Expect(c.Spec.ControlPlaneEndpoint.Host).To(Equal(vipAddr))
		g.Expect(f.membership(g)).To(Equal(before))
		// Not an error loop: the agents' reports are unread, nothing failed.
		g.Expect(harness.Condition(lb, lbv1.ReadyCondition).Reason).NotTo(Equal(lbv1.ReconcileErrorReason))
	}, 5*time.Second, 250*time.Millisecond).Should(Succeed())

	// Deleting the LoadBalancer does not wait for a workload cluster that may never answer.
	g.Expect(s.env.Client.Delete(f.ctx, &lbv1.LoadBalancer{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "lb"}})).To(Succeed())
	g.Expect(s.env.WaitGone(f.ctx, &lbv1.LoadBalancer{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "lb"}}, flowTimeout)).To(Succeed())
}

// workloadNode reads a Node of a workload cluster.
func workloadNode(g Gomega, ctx context.Context, c client.Client, name string) *corev1.Node {
	n := &corev1.Node{}
	g.Expect(c.Get(ctx, types.NamespacedName{Name: name}, n)).To(Succeed())
	return n
}

// The fence of local Node targets holds against remote ones. A tenant's kubeconfig Secret that
// leads back to the management cluster with the manager's own identity through a tokenFile
// naming the manager's ServiceAccount token (as a pod would mount it) is refused before any
// connection. Should the identity reach a Secret some other way (the token inline), the
// connection is made, but no management Node becomes a member or is annotated, even with
// `selector: {}`.
func testRemoteNodeTargetsFenced(t *testing.T, s *suite) {
	g := NewWithT(t)
	ctx := t.Context()
	f := newFixture(t, s, harness.ClusterOptions{ExternallyManaged: true})
	mgmtNode, err := s.env.CreateNode(ctx, f.ns+"-mgmt", map[string]string{"node-role.kubernetes.io/control-plane": ""}, "127.0.0.9")
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = s.env.Client.Delete(context.Background(), mgmtNode) })

	kc, err := s.env.ManagerTokenFileKubeconfig(ctx, t.TempDir())
	g.Expect(err).NotTo(HaveOccurred())
	kcSecret := kubeconfig.GenerateSecret(f.cluster, kc)
	g.Expect(s.env.Client.Create(ctx, kcSecret)).To(Succeed())
	g.Expect(testinfra.SetProvisioned(ctx, s.env.Client, f.ns, f.cluster.Name)).To(Succeed())
	// Every authenticated user may GET "/" here (some clusters allow it), which the
	// ClusterCache's connect needs: only the guard stands between the tokenFile and a connection.
	g.Expect(s.env.GrantRootPath(ctx, f.ns)).To(Succeed())
	f.createLB(t, "api.fenced.example", 6443, func(lb *lbv1.LoadBalancer) {
		lb.Spec.TargetKind = lbv1.TargetKind{APIGroup: "", Kind: lbv1.NodeKind}
		lb.Spec.Selector = &metav1.LabelSelector{}
	})
	unconnected := func(g Gomega) {
		lb, err := s.env.GetLB(ctx, f.ns, "lb")
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(lb.Status.Targets).To(BeEmpty())
		n := &corev1.Node{}
		g.Expect(s.env.Client.Get(ctx, client.ObjectKeyFromObject(mgmtNode), n)).To(Succeed())
		g.Expect(n.Annotations).NotTo(HaveKey(lbv1.NameAnnotation))
	}
	f.waitLB(t, "the tokenFile kubeconfig refused", func(lb *lbv1.LoadBalancer) bool {
		c := harness.Condition(lb, lbv1.WorkloadClusterReachableCondition)
		return c != nil && c.Status == metav1.ConditionFalse && c.Reason == lbv1.KubeconfigTokenFileReason &&
			lb.Status.Endpoint.Host == "api.fenced.example"
	})
	g.Consistently(func(g Gomega) {
		unconnected(g)
		lb, err := s.env.GetLB(ctx, f.ns, "lb")
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(harness.Condition(lb, lbv1.WorkloadClusterReachableCondition).Reason).To(Equal(lbv1.KubeconfigTokenFileReason))
	}, 2*time.Second, 200*time.Millisecond).Should(Succeed())

	// The manager's token inline: the connection is made, and the management cluster's Nodes
	// stay hidden all the same.
	kc, err = s.env.ManagerInlineTokenKubeconfig(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(s.env.Client.Get(ctx, client.ObjectKeyFromObject(kcSecret), kcSecret)).To(Succeed())
	kcSecret.Data[secret.KubeconfigDataName] = kc
	g.Expect(s.env.Client.Update(ctx, kcSecret)).To(Succeed())
	f.waitLB(t, "connected to the 'workload cluster' (the management cluster itself)", func(lb *lbv1.LoadBalancer) bool {
		return harness.ConditionIs(lb, lbv1.WorkloadClusterReachableCondition, metav1.ConditionTrue) &&
			harness.ConditionIs(lb, lbv1.TargetsAvailableCondition, metav1.ConditionFalse)
	})
	g.Consistently(unconnected, 3*time.Second, 200*time.Millisecond).Should(Succeed())
}
