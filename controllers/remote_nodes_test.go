package controllers

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/cluster-api/controllers/clustercache"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	lbv1 "github.com/caplb/caplb/api/v1alpha1"
)

// fakeClusterCache answers GetClient and GetHealthCheckingState for every Cluster; the other
// methods are not used by the reconcile paths under test (the embedded nil interface panics if
// they are).
type fakeClusterCache struct {
	clustercache.ClusterCache
	c       client.Client
	connErr error
	state   clustercache.HealthCheckingState
}

func (f *fakeClusterCache) GetClient(context.Context, client.ObjectKey) (client.Client, error) {
	if f.connErr != nil {
		return nil, f.connErr
	}
	return f.c, nil
}

func (f *fakeClusterCache) GetHealthCheckingState(context.Context, client.ObjectKey) clustercache.HealthCheckingState {
	return f.state
}

// workloadClient is a fake workload cluster holding the given Nodes.
func workloadClient(t *testing.T, nodes ...client.Object) client.Client {
	t.Helper()
	s := runtime.NewScheme()
	if err := AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	return fake.NewClientBuilder().WithScheme(s).WithObjects(nodes...).Build()
}

func nodeLB(cluster, ns string) *lbv1.LoadBalancer {
	lb := newLB("lb")
	lb.Namespace = ns
	lb.Spec.ClusterName = cluster
	lb.Spec.TargetKind = lbv1.TargetKind{Kind: lbv1.NodeKind}
	return lb
}

// The kind of members follows the spec alone: Machine targets, local Nodes (fenced by the
// manager's --node-targets-namespace), remote Nodes (spec.clusterName; no fence: the tenant's
// kubeconfig) and remote Nodes whose workload cluster does not answer.
func TestMemberKindChoice(t *testing.T) {
	connected := &fakeClusterCache{c: workloadClient(t)}
	down := &fakeClusterCache{connErr: clustercache.ErrClusterNotConnected}
	probeFailing := &fakeClusterCache{c: workloadClient(t), state: clustercache.HealthCheckingState{ConsecutiveFailures: 2}}
	machineLB := newLB("lb")
	tests := []struct {
		name      string
		lb        *lbv1.LoadBalancer
		allowedNS string
		cc        clustercache.ClusterCache
		want      memberKind
		fenceErrs int
		reachable *metav1.ConditionStatus // nil: no WorkloadClusterReachable condition
	}{
		{"Machine targets", machineLB, "", connected, machineKind{}, 0, nil},
		{"local Nodes, Node targets disabled", nodeLB("", "ns"), "", connected, fencedKind{}, 1, nil},
		{"local Nodes, another namespace than the allowed one", nodeLB("", "tenant"), "caplb-system", connected, fencedKind{}, 1, nil},
		{"local Nodes in the allowed namespace", nodeLB("", "caplb-system"), "caplb-system", connected, nodeKind{}, 0, nil},
		{"remote Nodes, Node targets disabled: not fenced", nodeLB("edge", "tenant"), "", connected, remoteNodeKind{}, 0, ptrTo(metav1.ConditionTrue)},
		{"remote Nodes in any namespace: not fenced", nodeLB("edge", "tenant"), "caplb-system", connected, remoteNodeKind{}, 0, ptrTo(metav1.ConditionTrue)},
		{"remote Nodes, no connection", nodeLB("edge", "tenant"), "", down, unreachableKind{}, 0, ptrTo(metav1.ConditionFalse)},
		{"remote Nodes, health probe failing", nodeLB("edge", "tenant"), "", probeFailing, unreachableKind{}, 0, ptrTo(metav1.ConditionFalse)},
		{"remote Nodes, manager without ClusterCache", nodeLB("edge", "tenant"), "", nil, unreachableKind{}, 0, ptrTo(metav1.ConditionFalse)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			r := &LoadBalancerReconciler{Client: workloadClient(t), NodeTargetsNamespace: tt.allowedNS}
			if tt.cc != nil {
				r.ClusterCache = tt.cc
			}
			s := &scope{lb: tt.lb}
			k := r.memberKindFor(context.Background(), s)
			g.Expect(k).To(BeAssignableToTypeOf(tt.want))
			g.Expect(nodeTargetErrors(tt.lb, tt.allowedNS)).To(HaveLen(tt.fenceErrs))
			if tt.reachable == nil {
				g.Expect(s.workload).To(BeNil())
				return
			}
			g.Expect(s.workload).NotTo(BeNil())
			g.Expect(s.workload.Status).To(Equal(*tt.reachable))
		})
	}
}

func TestRemoteNodesPredicate(t *testing.T) {
	tests := []struct {
		kind, cluster string
		remote, local bool
	}{
		{lbv1.MachineKind, "c", false, false},
		{"", "c", false, false},
		{lbv1.NodeKind, "", false, true},
		{lbv1.NodeKind, "c", true, false},
	}
	for _, tt := range tests {
		g := NewWithT(t)
		spec := lbv1.LoadBalancerSpec{TargetKind: lbv1.TargetKind{Kind: tt.kind}, ClusterName: tt.cluster}
		g.Expect(spec.RemoteNodes()).To(Equal(tt.remote), "%s/%q", tt.kind, tt.cluster)
		g.Expect(spec.LocalNodes()).To(Equal(tt.local), "%s/%q", tt.kind, tt.cluster)
	}
}

func TestWorkloadCondition(t *testing.T) {
	last := time.Date(2026, 11, 25, 6, 0, 0, 0, time.UTC)
	tests := []struct {
		name    string
		err     error
		st      clustercache.HealthCheckingState
		status  metav1.ConditionStatus
		reason  string
		message string
	}{
		{"connected, probe passing", nil, clustercache.HealthCheckingState{LastProbeSuccessTime: last}, metav1.ConditionTrue,
			lbv1.WorkloadClusterReachableReason, "answers through its edge-kubeconfig Secret"},
		{"not connected", clustercache.ErrClusterNotConnected, clustercache.HealthCheckingState{}, metav1.ConditionFalse,
			lbv1.WorkloadClusterUnreachableReason, "no connection to workload cluster edge through its edge-kubeconfig Secret"},
		{"probe failing", nil, clustercache.HealthCheckingState{ConsecutiveFailures: 3, LastProbeSuccessTime: last}, metav1.ConditionFalse,
			lbv1.WorkloadClusterUnreachableReason, "3 health probe(s) in a row failed, last success 2026-11-25T06:00:00Z"},
		{"probe never passed", nil, clustercache.HealthCheckingState{ConsecutiveFailures: 1}, metav1.ConditionFalse,
			lbv1.WorkloadClusterUnreachableReason, "last success never"},
		{"kubeconfig refused", fmt.Errorf("the edge-kubeconfig Secret: %w", &kubeconfigRefusal{Reason: lbv1.KubeconfigTokenFileReason,
			Field: `users["u"].user.tokenFile`, Fix: "put the token itself in token"}), clustercache.HealthCheckingState{},
			metav1.ConditionFalse, lbv1.KubeconfigTokenFileReason,
			`refuses the edge-kubeconfig Secret and does not connect to workload cluster edge: users["u"].user.tokenFile: put the token itself in token`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			c := workloadCondition("edge", tt.err, tt.st)
			g.Expect(c.Type).To(Equal(lbv1.WorkloadClusterReachableCondition))
			g.Expect(c.Status).To(Equal(tt.status))
			g.Expect(c.Reason).To(Equal(tt.reason))
			g.Expect(c.Message).To(ContainSubstring(tt.message))
			if tt.status == metav1.ConditionFalse {
				g.Expect(c.Message).To(ContainSubstring("stay as they were"))
			}
		})
	}
}

func TestNodeFactsWhenCordoned(t *testing.T) {
	tests := []struct {
		name                             string
		cordoned, whenCordoned, disabled bool
		want                             bool
	}{
		{"not cordoned", false, true, false, false},
		{"cordoned, opt-in off", true, false, false, false},
		{"cordoned, opt-in on", true, true, false, true},
		{"disabled annotation, opt-in off", false, false, true, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			lb := nodeLB("edge", "ns")
			lb.Spec.Quiesce.WhenCordoned = tt.whenCordoned
			n := testNode("n1", "10.0.0.1", true, true)
			n.Spec.Unschedulable = tt.cordoned
			if tt.disabled {
				n.Annotations = map[string]string{lbv1.DisabledAnnotation: ""}
			}
			g.Expect(nodeKind{}.facts(lb, n).disabled).To(Equal(tt.want))
		})
	}
}

// A kubeconfig Secret that leads back to the management cluster never hands its Nodes to a
// remote LoadBalancer: the fence of local Node targets holds.
func TestRemoteNodeKindHidesManagementNodes(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	wl1 := testNode("wl-1", "10.0.0.1", true, true)
	wl1.UID = types.UID("u-wl-1")
	mgmt := testNode("mgmt-1", "10.9.0.1", true, true)
	mgmt.UID = types.UID("u-mgmt-1")
	mgmt.Annotations = map[string]string{lbv1.NameAnnotation: "ns/lb"}
	lb := nodeLB("edge", "ns")

	own := workloadClient(t, mgmt.DeepCopy())
	k := remoteNodeKind{nodeKind: nodeKind{c: workloadClient(t, wl1, mgmt.DeepCopy())},
		own: &ownNodeGuard{cache: own, live: own, verdicts: &sync.Map{}}}
	cands, err := k.candidates(ctx, lb)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(names(cands)).To(ConsistOf("wl-1"))
	ann, err := k.annotated(ctx, lb)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(ann).To(BeEmpty())
	_, err = k.get(ctx, lb, "mgmt-1")
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "got %v", err)

	// Without Node targets the manager cannot read its own Nodes (and is refused them through
	// such a kubeconfig): nothing to compare, nothing hidden.
	k.own = nil
	cands, err = k.candidates(ctx, lb)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(names(cands)).To(ConsistOf("wl-1", "mgmt-1"))
}

func names(objs []client.Object) []string {
	out := make([]string, 0, len(objs))
	for _, o := range objs {
		out = append(out, o.GetName())
	}
	return out
}

// Remote Node targets through the reconciler: members and annotations live in the workload
// cluster, the management cluster's Nodes are never touched; an unreachable workload cluster
// keeps the members and the endpoint and says so; a Node deleted after a quiesce is removed.
func TestRemoteNodeTargetsReconcile(t *testing.T) {
	lb := nodeLB("edge", "ns")
	lb.Finalizers = []string{lbv1.LoadBalancerFinalizer}
	lb.Spec.Endpoint = lbv1.APIEndpoint{Host: "api.edge.example", Port: 6443}
	lb.Spec.HealthCheck.Disabled = true
	lb.Spec.Quiesce = lbv1.Quiesce{DrainPeriod: &lbv1.Duration{}, Timeout: lbv1.Duration{Duration: time.Minute}, WhenCordoned: true}
	mgmtNode := testNode("n1", "10.9.0.1", true, true) // same name as a workload Node, other cluster
	h := newHarness(t, lb, testCluster("edge"), mgmtNode)
	g := h.g
	ctx := context.Background()
	wl := workloadClient(t, testNode("n1", "10.0.0.1", true, true), testNode("n2", "10.0.0.2", true, true),
		testNode("w1", "10.0.0.9", false, true))
	cc := &fakeClusterCache{c: wl}
	h.r.ClusterCache = cc

	h.reconcile("lb")
	got := h.lb("lb")
	g.Expect(targetStates(got)).To(Equal(map[string]lbv1.TargetState{"n1": lbv1.TargetActive, "n2": lbv1.TargetActive}),
		"the default selector picks the control-plane Nodes")
	g.Expect(got.Status.Endpoint.Host).To(Equal("api.edge.example"))
	g.Expect(conditions.IsTrue(got, lbv1.WorkloadClusterReachableCondition)).To(BeTrue())
	g.Expect(h.cluster("edge").Spec.ControlPlaneEndpoint.Host).To(Equal("api.edge.example"))
	wn := &corev1.Node{}
	g.Expect(wl.Get(ctx, client.ObjectKey{Name: "n1"}, wn)).To(Succeed())
	g.Expect(wn.Annotations).To(HaveKeyWithValue(lbv1.StatusAnnotation, "active"))
	mn := &corev1.Node{}
	g.Expect(h.c.Get(ctx, client.ObjectKey{Name: "n1"}, mn)).To(Succeed())
	g.Expect(mn.Annotations).To(BeEmpty(), "the management cluster's Node of the same name is not a member")

	// The lifecycle tool cordons n2 (opt-in): it leaves like a disabled member; then deletes it.
	g.Expect(wl.Get(ctx, client.ObjectKey{Name: "n2"}, wn)).To(Succeed())
	orig := wn.DeepCopy()
	wn.Spec.Unschedulable = true
	g.Expect(wl.Patch(ctx, wn, client.MergeFrom(orig))).To(Succeed())
	h.reconcile("lb")
	h.reconcile("lb")
	g.Expect(targetStates(h.lb("lb"))).To(HaveKeyWithValue("n2", lbv1.TargetDisabled))
	g.Expect(wl.Get(ctx, client.ObjectKey{Name: "n2"}, wn)).To(Succeed())
	g.Expect(wn.Annotations).To(HaveKeyWithValue(lbv1.StatusAnnotation, "disabled"))
	g.Expect(wl.Delete(ctx, wn)).To(Succeed())
	h.events()
	h.reconcile("lb")
	g.Expect(targetStates(h.lb("lb"))).To(Equal(map[string]lbv1.TargetState{"n1": lbv1.TargetActive}))
	evs := h.events()
	g.Expect(hasEvent(evs, "Normal", lbv1.EventTargetRemoved, "n2")).To(BeTrue(), "%v", evs)
	g.Expect(hasEvent(evs, "Warning", lbv1.EventTargetGoneWithoutQuiesce, "")).To(BeFalse(), "%v", evs)

	// The workload cluster goes away: nothing changes but the condition.
	cc.connErr = errors.Join(clustercache.ErrClusterNotConnected, errors.New("dial tcp: connection refused"))
	res := h.reconcile("lb")
	got = h.lb("lb")
	g.Expect(targetStates(got)).To(Equal(map[string]lbv1.TargetState{"n1": lbv1.TargetActive}))
	g.Expect(got.Status.Endpoint.Host).To(Equal("api.edge.example"))
	g.Expect(conditions.GetReason(got, lbv1.WorkloadClusterReachableCondition)).To(Equal(lbv1.WorkloadClusterUnreachableReason))
	g.Expect(conditions.GetMessage(got, lbv1.WorkloadClusterReachableCondition)).To(ContainSubstring("connection refused"))
	g.Expect(conditions.IsTrue(got, lbv1.ReadyCondition)).To(BeTrue(), "the data plane does not depend on the manager's view")
	g.Expect(res.RequeueAfter).To(BeNumerically(">", 0))
	g.Expect(res.RequeueAfter).To(BeNumerically("<=", workloadRecheck))

	// Back: the condition clears.
	cc.connErr = nil
	h.reconcile("lb")
	g.Expect(conditions.IsTrue(h.lb("lb"), lbv1.WorkloadClusterReachableCondition)).To(BeTrue())

	// Deleting the LoadBalancer while the workload cluster is unreachable does not wait for it.
	cc.connErr = clustercache.ErrClusterNotConnected
	g.Expect(h.c.Delete(ctx, h.lb("lb"))).To(Succeed())
	h.reconcile("lb")
	err := h.c.Get(ctx, client.ObjectKey{Namespace: "ns", Name: "lb"}, &lbv1.LoadBalancer{})
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "finalizer removed: %v", err)
}

// An unreachable workload cluster before the first contact: the endpoint is still published
// (an externally managed cluster's API server may need the VIP to come up).
func TestRemoteNodeTargetsPublishBeforeReachable(t *testing.T) {
	lb := nodeLB("edge", "ns")
	lb.Finalizers = []string{lbv1.LoadBalancerFinalizer}
	lb.Spec.Endpoint = lbv1.APIEndpoint{Host: "api.edge.example", Port: 6443}
	lb.Spec.HealthCheck.Disabled = true
	h := newHarness(t, lb, testCluster("edge"))
	h.r.ClusterCache = &fakeClusterCache{connErr: clustercache.ErrClusterNotConnected}
	h.reconcile("lb")
	got := h.lb("lb")
	g := h.g
	g.Expect(got.Status.Endpoint.Host).To(Equal("api.edge.example"))
	g.Expect(got.Status.Targets).To(BeEmpty())
	g.Expect(conditions.IsFalse(got, lbv1.WorkloadClusterReachableCondition)).To(BeTrue())
	g.Expect(h.cluster("edge").Spec.ControlPlaneEndpoint.Host).To(Equal("api.edge.example"))
}

// A management cluster Node's event wakes the local Node LoadBalancers only: remote ones take
// their Nodes from a workload cluster.
func TestNodeEventsMapToLocalNodeTargetsOnly(t *testing.T) {
	local := nodeLB("", "ns")
	local.Name = "local"
	remote := nodeLB("edge", "ns")
	remote.Name = "remote"
	machines := newLB("machines")
	h := newHarness(t, local, remote, machines)
	reqs := h.r.nodeToLoadBalancers(context.Background(), testNode("n1", "10.0.0.1", true, true))
	h.g.Expect(reqs).To(HaveLen(1))
	h.g.Expect(reqs[0].Name).To(Equal("local"))
}

// The ClusterCache's connect/disconnect/probe events wake a Cluster's LoadBalancers that work
// through the connection (remote Node targets, VIP backends, an endpoint move), not a static one
// of Machine targets, nor another Cluster's.
func TestClusterCacheEventsMapToWorkloadLoadBalancers(t *testing.T) {
	remote := nodeLB("c1", "ns")
	remote.Name = "remote"
	static := newLB("static") // cluster c1 too
	arp := newLB("arp")
	arp.Spec.Backend = lbv1.Backend{ARP: &lbv1.ARPBackend{}}
	bgp := newLB("bgp")
	bgp.Spec.Backend = lbv1.Backend{BGP: &lbv1.BGPBackend{}}
	move := newLB("move")
	move.Spec.TakeOverEndpointFrom = &lbv1.EndpointTakeOver{}
	otherCluster := newLB("other")
	otherCluster.Spec.ClusterName = "c2"
	otherCluster.Spec.Backend = lbv1.Backend{ARP: &lbv1.ARPBackend{}}
	h := newHarness(t, remote, static, arp, bgp, move, otherCluster)
	var names []string
	for _, r := range h.r.clusterToWorkloadLoadBalancers(context.Background(), testCluster("c1")) {
		names = append(names, r.Name)
	}
	h.g.Expect(names).To(ConsistOf("remote", "arp", "bgp", "move"))
}

// Deleting a remote Node LoadBalancer whose workload cluster answers releases the workload
// Nodes' annotations.
func TestRemoteNodeTargetsDeleteReleasesWorkloadNodes(t *testing.T) {
	lb := nodeLB("edge", "ns")
	lb.Finalizers = []string{lbv1.LoadBalancerFinalizer}
	lb.Spec.Endpoint = lbv1.APIEndpoint{Host: "api.edge.example", Port: 6443}
	lb.Spec.HealthCheck.Disabled = true
	h := newHarness(t, lb, testCluster("edge"))
	g := h.g
	ctx := context.Background()
	wl := workloadClient(t, testNode("n1", "10.0.0.1", true, true))
	h.r.ClusterCache = &fakeClusterCache{c: wl}
	h.reconcile("lb")
	n := &corev1.Node{}
	g.Expect(wl.Get(ctx, client.ObjectKey{Name: "n1"}, n)).To(Succeed())
	g.Expect(n.Annotations).To(HaveKeyWithValue(lbv1.NameAnnotation, "ns/lb"))

	g.Expect(h.c.Delete(ctx, h.lb("lb"))).To(Succeed())
	h.reconcile("lb")
	g.Expect(wl.Get(ctx, client.ObjectKey{Name: "n1"}, n)).To(Succeed())
	g.Expect(n.Annotations).NotTo(HaveKey(lbv1.NameAnnotation))
	g.Expect(n.Annotations).NotTo(HaveKey(lbv1.StatusAnnotation))
	err := h.c.Get(ctx, client.ObjectKey{Namespace: "ns", Name: "lb"}, &lbv1.LoadBalancer{})
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "finalizer removed: %v", err)
}

// countingReader counts Gets.
type countingReader struct {
	client.Reader
	gets int
}

func (c *countingReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	c.gets++
	return c.Reader.Get(ctx, key, obj, opts...)
}

// The workload client's informer may see a new management Node before the manager's own cache
// does: the guard then reads it live, by name, and compares UIDs; verdicts are remembered.
func TestOwnNodeGuardBeatsCacheLag(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	mgmt := testNode("mgmt-new", "10.9.0.2", true, true)
	mgmt.UID = "u-mgmt-new"
	sameName := testNode("cp-0", "10.0.0.1", true, true) // a workload Node whose name the management cluster also uses
	sameName.UID = "u-wl-cp-0"
	mgmtCP0 := testNode("cp-0", "10.9.0.3", true, true)
	mgmtCP0.UID = "u-mgmt-cp-0"
	live := &countingReader{Reader: workloadClient(t, mgmt.DeepCopy(), mgmtCP0.DeepCopy())}
	guard := ownNodeGuard{cache: workloadClient(t), live: live, verdicts: &sync.Map{}} // the cache lags: empty

	kept, err := guard.filter(ctx, []client.Object{mgmt.DeepCopy(), sameName.DeepCopy()})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(names(kept)).To(ConsistOf("cp-0"), "the management Node is hidden, the workload Node of the same name kept")
	g.Expect(live.gets).To(Equal(2))

	kept, err = guard.filter(ctx, []client.Object{mgmt.DeepCopy(), sameName.DeepCopy()})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(names(kept)).To(ConsistOf("cp-0"))
	g.Expect(live.gets).To(Equal(2), "verdicts are remembered")
}
