package install

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lbv1 "github.com/caplb/caplb/api/v1alpha1"
	"github.com/caplb/caplb/config/rbac"
	"github.com/caplb/caplb/e2e/harness"
)

// A standalone install has no Cluster API: the real manager binary, under the RBAC caplb ships
// (with the node-targets component), starts on an API server that serves caplb's CRDs only,
// serves a LoadBalancer of the cluster's own Nodes as it does next to CAPI, and reports a
// LoadBalancer of Machines with the CRD it lacks instead of failing to start.
func TestStandaloneWithoutCAPI(t *testing.T) {
	if testing.Short() {
		t.Skip("standalone test: needs the test control plane (make testbin); skipped with -short")
	}
	g := NewWithT(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	bin := buildManager(t)
	env, err := harness.Start(harness.Options{WithoutCAPICRDs: true})
	if err != nil {
		t.Fatalf("starting test control plane: %v", err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Errorf("stopping control plane: %v", err)
		}
	})
	// The premise: this API server knows no CAPI kind.
	err = env.Client.List(ctx, &clusterv1.MachineList{})
	g.Expect(meta.IsNoMatchError(err)).To(BeTrue(), "Machines must not be served here: %v", err)
	g.Expect(env.ApplyShippedRBAC(ctx)).To(Succeed())
	kubeconfig, _ := serviceAccountKubeconfig(ctx, t, env.Config, rbac.Namespace, rbac.ServiceAccount)

	// The released container's arguments, the node-targets component's flag, and no webhook
	// server (no cert-manager here).
	mgr := startManager(t, bin, []string{"manager", "--insecure-diagnostics", "--leader-elect", "--leader-election-namespace=" + rbac.Namespace,
		"--node-targets-namespace=" + rbac.Namespace, "--webhook-port=0"}, kubeconfig)
	if err := harness.Poll(ctx, timeout, "the manager ready without CAPI's CRDs", mgr.ready); err != nil {
		t.Fatal(err)
	}
	g.Expect(discoveryLine(mgr.log())).To(And(
		ContainSubstring(`"found":[]`),
		ContainSubstring("machines.cluster.x-k8s.io/v1beta2"),
		ContainSubstring("clusters.cluster.x-k8s.io/v1beta2"),
		ContainSubstring("ipaddressclaims.ipam.cluster.x-k8s.io/v1beta2")), "the start-up log names the missing APIs")

	runStandaloneNodeLoadBalancer(ctx, t, env)
	expectMachineLoadBalancerReported(ctx, t, env)
	g.Expect(mgr.forbidden()).To(BeEmpty(), "the manager hit RBAC denials: config/rbac misses a verb")
	ready, status, err := mgr.ready(ctx)
	g.Expect(err).NotTo(HaveOccurred(), "the manager still runs")
	g.Expect(ready).To(BeTrue(), "the manager is still ready: %s", status)
}

// discoveryLine returns the manager's log line that reports the optional APIs.
func discoveryLine(log string) string {
	lines := strings.Split(log, "\n")
	if i := slices.IndexFunc(lines, func(l string) bool { return strings.Contains(l, "Optional APIs discovered") }); i >= 0 {
		return lines[i]
	}
	return ""
}

// runStandaloneNodeLoadBalancer serves the cluster's control-plane Nodes: every one active, a
// member's address published, Ready; deleting it releases the Nodes.
func runStandaloneNodeLoadBalancer(ctx context.Context, t *testing.T, env *harness.Env) {
	t.Helper()
	g := NewWithT(t)
	hosts := []string{"127.0.0.2", "127.0.0.3"}
	apiservers, err := harness.Listen(0, hosts...)
	g.Expect(err).NotTo(HaveOccurred())
	defer apiservers.Close()
	var nodes []string
	for i, h := range hosts {
		n, err := env.CreateNode(ctx, fmt.Sprintf("cp-%d", i), map[string]string{"node-role.kubernetes.io/control-plane": ""}, h)
		g.Expect(err).NotTo(HaveOccurred())
		nodes = append(nodes, n.Name)
	}
	lb := &lbv1.LoadBalancer{
		ObjectMeta: metav1.ObjectMeta{Namespace: rbac.Namespace, Name: "nodes"},
		Spec: lbv1.LoadBalancerSpec{
			TargetKind: lbv1.TargetKind{Kind: lbv1.NodeKind},
			TargetPort: int32(apiservers.Port),
			Backend:    lbv1.Backend{Static: &lbv1.StaticBackend{}},
			HealthCheck: lbv1.HealthCheck{
				Interval: lbv1.Duration{Duration: time.Second}, Timeout: lbv1.Duration{Duration: time.Second},
			},
		},
	}
	g.Expect(env.Client.Create(ctx, lb)).To(Succeed())
	if _, err := env.WaitLB(ctx, lb.Namespace, lb.Name, timeout, "Ready with both Nodes active", func(lb *lbv1.LoadBalancer) bool {
		return harness.ConditionIs(lb, lbv1.ReadyCondition, metav1.ConditionTrue) &&
			harness.TargetState(lb, nodes[0]) == lbv1.TargetActive && harness.TargetState(lb, nodes[1]) == lbv1.TargetActive &&
			slices.Contains(hosts, lb.Status.Endpoint.Host) && lb.Status.Endpoint.Port == int32(apiservers.Port)
	}); err != nil {
		t.Fatal(err)
	}
	for _, name := range nodes {
		n := &corev1.Node{}
		g.Expect(env.Client.Get(ctx, client.ObjectKey{Name: name}, n)).To(Succeed())
		g.Expect(n.Annotations).To(HaveKeyWithValue(lbv1.NameAnnotation, rbac.Namespace+"/nodes"))
	}
	g.Expect(env.Client.Delete(ctx, lb)).To(Succeed())
	g.Expect(env.WaitGone(ctx, lb, timeout)).To(Succeed(), "the finalizer is removed under the shipped RBAC")
	g.Eventually(func(g Gomega) {
		for _, name := range nodes {
			n := &corev1.Node{}
			g.Expect(env.Client.Get(ctx, client.ObjectKey{Name: name}, n)).To(Succeed())
			g.Expect(n.Annotations).NotTo(HaveKey(lbv1.NameAnnotation))
		}
	}, timeout, harness.PollInterval).Should(Succeed(), "the Nodes are released with the LoadBalancer")
}

// expectMachineLoadBalancerReported: a LoadBalancer of Machines gets Ready False APINotInstalled
// naming the CRD and the fix, and is deleted without a CAPI kind to release.
func expectMachineLoadBalancerReported(ctx context.Context, t *testing.T, env *harness.Env) {
	t.Helper()
	g := NewWithT(t)
	ns, err := env.CreateNamespace(ctx, "machines")
	g.Expect(err).NotTo(HaveOccurred())
	lb := &lbv1.LoadBalancer{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "machines"},
		Spec: lbv1.LoadBalancerSpec{
			ClusterName: "c",
			Endpoint:    lbv1.APIEndpoint{Host: "127.0.0.1", Port: 6443},
			Backend:     lbv1.Backend{Static: &lbv1.StaticBackend{}},
		},
	}
	g.Expect(env.Client.Create(ctx, lb)).To(Succeed())
	got, err := env.WaitLB(ctx, ns, lb.Name, timeout, "reported APINotInstalled", func(lb *lbv1.LoadBalancer) bool {
		return conditions.GetReason(lb, lbv1.ReadyCondition) == lbv1.APINotInstalledReason
	})
	if err != nil {
		t.Fatal(err)
	}
	msg := conditions.GetMessage(got, lbv1.ReadyCondition)
	g.Expect(msg).To(ContainSubstring("machines.cluster.x-k8s.io/v1beta2"))
	g.Expect(msg).To(ContainSubstring("clusters.cluster.x-k8s.io/v1beta2"))
	g.Expect(msg).To(ContainSubstring("install Cluster API"))
	g.Expect(msg).To(ContainSubstring("target Nodes"))
	_, err = env.WaitEvent(ctx, ns, "LoadBalancer", lb.Name, corev1.EventTypeWarning, lbv1.EventAPINotInstalled, timeout)
	g.Expect(err).NotTo(HaveOccurred(), "a Warning event says the same")
	g.Expect(env.Client.Delete(ctx, lb)).To(Succeed())
	g.Expect(env.WaitGone(ctx, lb, timeout)).To(Succeed())
}
