// Package integration proves caplb's flows against a real kube-apiserver and etcd and CAPI's
// own Cluster and Machine reconcilers (see e2e/harness). One control plane serves the whole
// package; every flow runs in a namespace of its own.
package integration

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	lbv1 "github.com/caplb/caplb/api/v1alpha1"
	"github.com/caplb/caplb/e2e/harness"
)

const (
	// machineReadyTimeout bounds how long CAPI takes to give a new Machine a nodeRef and Ready
	// (the ClusterCache's first connection to a workload cluster dominates).
	machineReadyTimeout = 90 * time.Second
	// flowTimeout bounds one step of a caplb flow.
	flowTimeout = 45 * time.Second
)

// nodeTargetsNS plays the manager's own namespace: the only one whose LoadBalancers may target
// Nodes.
const nodeTargetsNS = "caplb-system"

// suite is the shared control plane and managers.
type suite struct {
	// ctx lives as long as the suite (a subtest's t.Context ends with the subtest).
	ctx   context.Context
	env   *harness.Env
	capi  *harness.Running
	caplb *harness.Running
	// logs keeps what the managers logged, shown for a failed flow's namespace.
	logs *managerLog
	// caplbOptions is how every flow's caplb manager runs (restarts included).
	caplbOptions harness.CAPLBOptions
	// webhook is where the caplb manager serves its validating webhook, and the CA of its
	// certificate. No webhook configuration names it for the whole suite: a flow registers the
	// shipped one for its own namespace (publisher_admission_test.go), so that the other flows
	// keep proving what the reconciler does without it.
	webhookURL string
	webhookCA  []byte
}

// TestIntegration starts one control plane for the package and runs every flow as a subtest:
// the independent flows in parallel, then the ones that restart the caplb manager on their own.
// Run one flow with -run 'TestIntegration/<Flow>'.
func TestIntegration(t *testing.T) {
	if testing.Short() {
		t.Skip("integration suite: needs the test control plane (make testbin); skipped with -short")
	}
	s := startSuite(t)

	t.Run("flows", func(t *testing.T) {
		for _, f := range []struct {
			name string
			run  func(*testing.T, *suite)
		}{
			{"EndpointPublishedBeforeMachines", testEndpointBeforeMachines},
			{"StaticMemberEndpoint", testStaticMemberEndpoint},
			{"ClusterEndpointConflict", testClusterEndpointConflict},
			{"ClusterEndpointAdoption", testClusterEndpointAdoption},
			{"SeveralLoadBalancersPerCluster", testSeveralLoadBalancers},
			{"PublisherAdmission", testPublisherAdmission},
			{"TakeOverAdmission", testTakeOverAdmission},
			{"EndpointMoveWorkloadRBAC", testEndpointMoveWorkloadRBAC},
			{"DisableEnableMember", testDisableEnable},
			{"DeleteMemberThroughHook", testDeleteMember},
			{"DeleteLoadBalancerMidFlow", testDeleteLBMidFlow},
			{"HooksSkippedWithoutNode", testHooksSkippedWithoutNode},
			{"PreTerminateHookHoldsSkippedMachine", testPreTerminateHookHoldsSkippedMachine},
			{"PauseUnpause", testPause},
			{"Admission", testAdmission},
			{"AdmissionAcceptsGoodValues", testAdmissionAcceptsGoodValues},
			{"Immutability", testImmutability},
			{"ControlPlanePublication", testControlPlanePublication},
			{"SamplesValid", testSamplesValid},
			{"NodeTargets", testNodeTargets},
			{"NodeTargetsFenced", testNodeTargetsFenced},
			{"RemoteNodeTargets", testRemoteNodeTargets},
			{"RemoteNodeTargetsFenced", testRemoteNodeTargetsFenced},
			{"VIPFromIPAMBeforeMachines", testVIPFromIPAMBeforeMachines},
			{"VIPMembership", testVIPMembership},
			{"VIPSamplesKCP", testVIPSamplesKCP},
			{"KubeadmBootstrapRendersSample", testKubeadmBootstrapRendersSample},
			{"KubeadmControlPlaneFirstMachine", testKubeadmControlPlaneFirstMachine},
			{"VIPDisableAndDeadMember", testVIPDisableAndDeadMember},
			{"VIPRollout", testVIPRollout},
			{"LoadBalancerClass", testLoadBalancerClass},
			{"LoadBalancerClassAdmission", testLoadBalancerClassAdmission},
			{"LoadBalancerClassNotApplied", testLoadBalancerClassNotApplied},
			{"LoadBalancerClassPause", testLoadBalancerClassPause},
			{"ClusterClassSample", testClusterClassSample},
			{"AgentHealthRendered", testAgentHealthRendered},
			{"AgentHealthAdmission", testAgentHealthAdmission},
			{"WorkerTargets", testWorkerTargets},
		} {
			t.Run(f.name, func(t *testing.T) {
				t.Parallel()
				f.run(t, s)
			})
		}
	})
	// Restarts the shared caplb manager: runs alone, after the parallel flows.
	t.Run("ManagerRestartMidQuiesce", func(t *testing.T) { testRestartMidQuiesce(t, s) })
	t.Run("VIPManagerRestart", func(t *testing.T) { testVIPManagerRestart(t, s) })
	// Stops the shared manager and releases its marks by hand: last.
	t.Run("UninstallCleanup", func(t *testing.T) { testUninstallCleanup(t, s) })
}

// startSuite starts the control plane, CAPI's reconcilers and the caplb manager (as its
// ServiceAccount under the shipped RBAC), stopped when t ends.
func startSuite(t *testing.T) *suite {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	logs := &managerLog{}
	env, err := harness.Start(harness.Options{Logger: logs.logger()})
	if err != nil {
		cancel()
		t.Fatalf("starting test control plane: %v", err)
	}
	s := &suite{ctx: ctx, env: env, logs: logs}
	s.caplbOptions = harness.CAPLBOptions{NodeTargetsNamespace: nodeTargetsNS, ServiceAccount: harness.ShippedServiceAccount}

	t.Cleanup(func() {
		if s.caplb != nil {
			if err := s.caplb.Stop(); err != nil {
				t.Errorf("stopping caplb manager: %v", err)
			}
		}
		if s.capi != nil {
			if err := s.capi.Stop(); err != nil {
				t.Errorf("stopping CAPI manager: %v", err)
			}
		}
		if err := env.Stop(); err != nil {
			t.Errorf("stopping control plane: %v", err)
		}
		cancel()
	})
	// CAPI's kubeadm bootstrap and control-plane providers too (kubeadm_bootstrap_test.go).
	if s.capi, err = env.StartCAPIWith(ctx, harness.CAPIOptions{KubeadmBootstrap: true, KubeadmControlPlane: true}); err != nil {
		t.Fatalf("starting CAPI reconcilers: %v", err)
	}
	// The manager runs as its ServiceAccount under the RBAC config/rbac ships (and the
	// node-targets component's): a missing verb fails a flow.
	if err := env.ApplyShippedRBAC(ctx); err != nil {
		t.Fatalf("applying the shipped RBAC: %v", err)
	}
	if err := s.serveWebhook(t.TempDir()); err != nil {
		t.Fatalf("preparing the webhook server: %v", err)
	}
	if s.caplb, err = env.StartCAPLB(ctx, s.caplbOptions); err != nil {
		t.Fatalf("starting caplb manager: %v", err)
	}
	return s
}

// fixture is one flow's namespace and Cluster.
type fixture struct {
	s        *suite
	ctx      context.Context
	ns       string
	cluster  *clusterv1.Cluster
	machines []*clusterv1.Machine
}

// newFixture creates a namespace and a Cluster named "c" in it.
func newFixture(t *testing.T, s *suite, o harness.ClusterOptions) *fixture {
	t.Helper()
	ctx := t.Context()
	ns, err := s.env.CreateNamespace(ctx, nsPrefix(t))
	if err != nil {
		t.Fatal(err)
	}
	s.logs.dumpOnFailure(t, ns)
	c, err := s.env.CreateCluster(ctx, ns, "c", o)
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{s: s, ctx: ctx, ns: ns, cluster: c}
}

// nsPrefix derives a namespace prefix from the flow's name.
func nsPrefix(t *testing.T) string {
	name := strings.ToLower(t.Name()[strings.LastIndex(t.Name(), "/")+1:])
	return name[:min(30, len(name))]
}

// addMachines creates n control-plane Machines with addresses 127.0.0.(2+i) and waits until
// CAPI reports them Ready with a nodeRef.
func (f *fixture) addMachines(t *testing.T, n int) []*clusterv1.Machine {
	t.Helper()
	ms, err := f.s.env.CreateControlPlane(f.ctx, f.cluster, n, func(i int) []clusterv1.MachineAddress {
		return harness.InternalIP(fmt.Sprintf("127.0.0.%d", 2+i))
	})
	if err != nil {
		t.Fatal(err)
	}
	names := make([]string, 0, n)
	for _, m := range ms {
		names = append(names, m.Name)
	}
	if err := f.s.env.WaitMachinesReady(f.ctx, f.ns, names, machineReadyTimeout); err != nil {
		t.Fatal(err)
	}
	f.machines = append(f.machines, ms...)
	return ms
}

// lbOption adjusts a LoadBalancer before it is created.
type lbOption func(*lbv1.LoadBalancer)

// withDrain sets the quiesce drain period (and a timeout comfortably above it).
func withDrain(d time.Duration) lbOption {
	return func(lb *lbv1.LoadBalancer) {
		lb.Spec.Quiesce = lbv1.Quiesce{DrainPeriod: &lbv1.Duration{Duration: d}, Timeout: lbv1.Duration{Duration: 2*d + time.Minute}}
	}
}

// createLB creates a static LoadBalancer "lb" for the fixture's Cluster with a fast health
// check and a 1s drain period unless options say otherwise.
func (f *fixture) createLB(t *testing.T, host string, port int32, opts ...lbOption) *lbv1.LoadBalancer {
	t.Helper()
	lb := &lbv1.LoadBalancer{
		ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "lb"},
		Spec: lbv1.LoadBalancerSpec{
			ClusterName: f.cluster.Name,
			Endpoint:    lbv1.APIEndpoint{Host: host, Port: port},
			Backend:     lbv1.Backend{Static: &lbv1.StaticBackend{}},
			HealthCheck: lbv1.HealthCheck{
				Interval: lbv1.Duration{Duration: time.Second}, Timeout: lbv1.Duration{Duration: time.Second},
			},
			Quiesce: lbv1.Quiesce{
				DrainPeriod: &lbv1.Duration{Duration: time.Second}, Timeout: lbv1.Duration{Duration: time.Minute},
			},
		},
	}
	for _, o := range opts {
		o(lb)
	}
	if err := f.s.env.Client.Create(f.ctx, lb); err != nil {
		t.Fatalf("creating LoadBalancer: %v", err)
	}
	return lb
}

// waitLB waits until pred holds for the fixture's LoadBalancer "lb".
func (f *fixture) waitLB(t *testing.T, what string, pred func(*lbv1.LoadBalancer) bool) *lbv1.LoadBalancer {
	t.Helper()
	lb, err := f.s.env.WaitLB(f.ctx, f.ns, "lb", flowTimeout, what, pred)
	if err != nil {
		t.Fatal(err)
	}
	return lb
}

// allActive holds when every named member is active and counted.
func allActive(names ...string) func(*lbv1.LoadBalancer) bool {
	return func(lb *lbv1.LoadBalancer) bool {
		for _, n := range names {
			if harness.TargetState(lb, n) != lbv1.TargetActive {
				return false
			}
		}
		return int(lb.Status.ActiveTargets) == len(names) && int(lb.Status.TotalTargets) == len(names)
	}
}

func machineNames(ms []*clusterv1.Machine) []string {
	out := make([]string, 0, len(ms))
	for _, m := range ms {
		out = append(out, m.Name)
	}
	return out
}

// machine reads a Machine of the fixture.
func (f *fixture) machine(g Gomega, name string) *clusterv1.Machine {
	m := &clusterv1.Machine{}
	g.Expect(f.s.env.Client.Get(f.ctx, types.NamespacedName{Namespace: f.ns, Name: name}, m)).To(Succeed())
	return m
}

// expectMemberAnnotations asserts the proposal's annotations and our pre-drain hook on a Machine.
func (f *fixture) expectMemberAnnotations(g Gomega, name string, state lbv1.TargetState) {
	m := f.machine(g, name)
	g.Expect(m.Annotations).To(HaveKeyWithValue(lbv1.NameAnnotation, "lb"), "Machine %s", name)
	g.Expect(m.Annotations).To(HaveKeyWithValue(lbv1.StatusAnnotation, string(state)), "Machine %s", name)
	g.Expect(m.Annotations).To(HaveKey(lbv1.PreDrainHookAnnotation("lb")), "Machine %s", name)
}

// expectReleased asserts that a Machine carries nothing of ours.
func (f *fixture) expectReleased(g Gomega, name string) {
	m := f.machine(g, name)
	g.Expect(m.Annotations).NotTo(HaveKey(lbv1.NameAnnotation), "Machine %s", name)
	g.Expect(m.Annotations).NotTo(HaveKey(lbv1.StatusAnnotation), "Machine %s", name)
	g.Expect(m.Annotations).NotTo(HaveKey(lbv1.PreDrainHookAnnotation("lb")), "Machine %s", name)
}

func ptrTo[T any](v T) *T { return &v }

// hasAddr reports whether one of the Machines' addresses is host.
func hasAddr(hosts []string, host string) bool { return slices.Contains(hosts, host) }
