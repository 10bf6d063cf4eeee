// Package install installs caplb the way a CAPI user does and runs it: the release `make
// release` writes, read from a clusterctl local repository through a clusterctl.yaml provider
// entry, processed by clusterctl's own code (variables, target namespace, labels), created on a
// real API server by clusterctl's component client, and the real manager binary run with the
// released container's command line under the ServiceAccount the release ships, serving the
// released validating webhook behind its Service (the test plays cert-manager, which clusterctl
// would have installed: certmanager_test.go), until a LoadBalancer is Ready and then deleted
// cleanly. Any RBAC verb the manager needs and the release lacks fails this test.
package install

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	authorizationv1 "k8s.io/api/authorization/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lbv1 "github.com/caplb/caplb/api/v1alpha1"
	"github.com/caplb/caplb/e2e/harness"
	"github.com/caplb/caplb/hack/release"
)

const (
	// targetNamespace is not the release's own (caplb-system): clusterctl --target-namespace must
	// move everything, the leader-election Lease included.
	targetNamespace = "caplb-install"
	serviceAccount  = "caplb-manager"
	// leaseName is the manager's leader-election Lease (cmd/caplb).
	leaseName = "caplb-manager.loadbalancer.cluster.x-k8s.io"
	timeout   = 90 * time.Second
)

func TestInstallWithClusterctl(t *testing.T) {
	if testing.Short() {
		t.Skip("install test: needs the test control plane (make testbin); skipped with -short")
	}
	g := NewWithT(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)

	start := time.Now()
	bin := buildManager(t)
	// Service endpoint routing: the API server calls the released webhook through its Service
	// (certmanager_test.go).
	env, err := harness.Start(harness.Options{WithoutCAPLBCRDs: true, ServiceEndpointRouting: true})
	if err != nil {
		t.Fatalf("starting test control plane: %v", err)
	}
	// Cleanups run last-registered first: the manager process (startManager) stops before CAPI,
	// and CAPI before the control plane.
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Errorf("stopping control plane: %v", err)
		}
	})
	capi, err := env.StartCAPI(ctx)
	if err != nil {
		t.Fatalf("starting CAPI reconcilers: %v", err)
	}
	t.Cleanup(func() {
		if err := capi.Stop(); err != nil {
			t.Errorf("stopping CAPI manager: %v", err)
		}
	})

	// clusterctl init --addon caplb --target-namespace caplb-install, with one variable set in
	// clusterctl.yaml and the others left to their defaults.
	cfgPath := writeLocalRepository(t, map[string]string{"CAPLB_LOG_LEVEL": "debug"})
	cfg, comps := clusterctlComponents(ctx, t, cfgPath, targetNamespace)
	g.Expect(comps.Images()).To(ConsistOf(managerImage), "the manager image comes from the release's default")
	g.Expect(comps.Variables()).To(ContainElements(release.ManagerImageVariable, "CAPLB_CONCURRENCY", "CAPLB_LOG_LEVEL"))
	g.Expect(comps.TargetNamespace()).To(Equal(targetNamespace))
	installCertManagerCRDs(ctx, t, env)
	installComponents(ctx, t, env, cfg, comps.Objs())
	t.Logf("%s: manager built, control plane and CAPI up, release installed", time.Since(start).Round(time.Millisecond))
	webhook := findWebhookRelease(ctx, t, env)
	certData := issueWebhookCertificate(ctx, t, env, webhook)

	d, c := managerDeployment(t, comps.Objs())
	g.Expect(d.Namespace).To(Equal(targetNamespace))
	g.Expect(d.Spec.Template.Spec.ServiceAccountName).To(Equal(serviceAccount))
	g.Expect(c.Image).To(Equal(managerImage))
	args := containerArgs(t, d, c)
	g.Expect(args).To(ContainElement("--zap-log-level=debug"), "clusterctl.yaml's CAPLB_LOG_LEVEL reaches the flags")
	g.Expect(args).To(ContainElement("--leader-election-namespace=" + targetNamespace))
	g.Expect(strings.Join(args, " ")).NotTo(ContainSubstring("caplb-system"), "nothing may still name the release's default namespace")

	kubeconfig, saCfg := serviceAccountKubeconfig(ctx, t, env.Config, targetNamespace, serviceAccount)
	expectNotAdmin(ctx, t, saCfg)
	// A LoadBalancer that today's CRD refuses is stored before the manager starts: its cache
	// must still sync and every other LoadBalancer be reconciled.
	poisoned := poisonedLoadBalancer(ctx, t, env)
	// The pod's webhook port, where the Service sends, is a free one here (later flags win), and
	// its certificate directory the Secret's data as the pod would mount it.
	webhookAddr := freeAddr(t)
	_, webhookPort, _ := strings.Cut(webhookAddr, ":")
	port, err := strconv.ParseInt(webhookPort, 10, 32)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(args).To(ContainElement("--webhook-port=9443"), "the released manager serves its webhook")
	routeWebhookService(ctx, t, env, webhook.service, int32(port))
	args = append(args, "--webhook-port="+webhookPort, "--webhook-cert-dir="+mountWebhookCertificate(t, certData))
	// The image's entrypoint is the caplb binary (hack/images); the container's args follow it.
	mgr := startManager(t, bin, args, kubeconfig)
	if err := harness.Poll(ctx, timeout, "the manager ready (informers synced under its RBAC)", mgr.ready); err != nil {
		t.Fatal(err)
	}
	g.Eventually(func(g Gomega) {
		lease := &coordinationv1.Lease{}
		g.Expect(env.Client.Get(ctx, client.ObjectKey{Namespace: targetNamespace, Name: leaseName}, lease)).To(Succeed())
		g.Expect(lease.Spec.HolderIdentity).NotTo(BeNil())
	}, timeout, harness.PollInterval).Should(Succeed(), "leader election in the target namespace")

	t.Logf("%s: manager ready and leader under its ServiceAccount", time.Since(start).Round(time.Millisecond))

	expectSecureMetrics(ctx, t, env, mgr, targetNamespace)
	t.Logf("%s: /metrics over HTTPS refused without a token or the reader role, served with it", time.Since(start).Round(time.Millisecond))

	runStaticLoadBalancer(ctx, t, env, mgr)
	t.Logf("%s: LoadBalancer Ready, then deleted with its hook", time.Since(start).Round(time.Millisecond))
	expectPoisonedReported(ctx, t, env, mgr, poisoned)
	t.Logf("%s: the poisoned LoadBalancer is reported InvalidSpec and harmed no other", time.Since(start).Round(time.Millisecond))
	g.Expect(mgr.forbidden()).To(BeEmpty(), "the manager hit RBAC denials: config/rbac misses a verb")
	expectAgentManifestsValid(ctx, t, env, filepath.Dir(cfgPath))
}

// expectAgentManifestsValid creates the released agent manifests in dry-run mode with strict
// field validation: the API server checks them against its schemas (an unknown or misspelt field
// fails) without running anything.
func expectAgentManifestsValid(ctx context.Context, t *testing.T, env *harness.Env, repoBase string) {
	t.Helper()
	dir := filepath.Join(repoBase, release.ProviderLabel, releaseVersion)
	for _, name := range []string{"agent-daemonset.yaml", "agent-static-pod.yaml"} {
		data, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(data), "image: "+agentImage) {
			t.Errorf("%s does not use the release's agent image %s", name, agentImage)
		}
		objs, err := harness.Decode(data)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for _, o := range objs {
			if err := env.Client.Create(ctx, o, client.DryRunAll, client.FieldValidation("Strict")); err != nil {
				t.Errorf("%s: the API server rejects %s %s: %v", name, o.GetKind(), o.GetName(), err)
			}
		}
	}
}

// expectNotAdmin proves the manager's credential is the ServiceAccount's and no more: it may
// patch Machines and read Secrets (the workload kubeconfigs, the arp/bgp bootstrap Secrets), but
// may not delete Machines or read Nodes (Node targets are an opt-in component).
func expectNotAdmin(ctx context.Context, t *testing.T, saCfg *rest.Config) {
	t.Helper()
	cs, err := kubernetes.NewForConfig(saCfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		attrs authorizationv1.ResourceAttributes
		want  bool
	}{
		{authorizationv1.ResourceAttributes{Group: clusterv1.GroupVersion.Group, Resource: "machines", Verb: "patch"}, true},
		{authorizationv1.ResourceAttributes{Group: lbv1.GroupVersion.Group, Resource: "loadbalancers", Subresource: "status", Verb: "patch"}, true},
		{authorizationv1.ResourceAttributes{Resource: "secrets", Verb: "get"}, true},
		{authorizationv1.ResourceAttributes{Resource: "nodes", Verb: "list"}, false},
		{authorizationv1.ResourceAttributes{Group: clusterv1.GroupVersion.Group, Resource: "machines", Verb: "delete"}, false},
	} {
		r, err := cs.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
			Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &tc.attrs},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("SelfSubjectAccessReview as the ServiceAccount: %v", err)
		}
		if r.Status.Allowed != tc.want {
			t.Errorf("ServiceAccount %s %s %s/%s: allowed=%v, want %v (%s)", serviceAccount, tc.attrs.Verb,
				tc.attrs.Group, tc.attrs.Resource, r.Status.Allowed, tc.want, r.Status.Reason)
		}
	}
}

// runStaticLoadBalancer drives one LoadBalancer through its life: published, a member joins
// (pre-drain hook on its Machine), Ready; then deleted, its hook and finalizer gone.
func runStaticLoadBalancer(ctx context.Context, t *testing.T, env *harness.Env, mgr *managerProcess) {
	t.Helper()
	g := NewWithT(t)
	ns, err := env.CreateNamespace(ctx, "install")
	g.Expect(err).NotTo(HaveOccurred())
	cluster, err := env.CreateCluster(ctx, ns, "c", harness.ClusterOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	ext, err := harness.Listen(0, "127.0.0.1")
	g.Expect(err).NotTo(HaveOccurred())
	defer ext.Close()

	lb := &lbv1.LoadBalancer{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "lb"},
		Spec: lbv1.LoadBalancerSpec{
			ClusterName: cluster.Name,
			Endpoint:    lbv1.APIEndpoint{Host: "127.0.0.1", Port: int32(ext.Port)},
			Backend:     lbv1.Backend{Static: &lbv1.StaticBackend{}},
			HealthCheck: lbv1.HealthCheck{
				Interval: lbv1.Duration{Duration: time.Second}, Timeout: lbv1.Duration{Duration: time.Second},
			},
		},
	}
	g.Expect(env.Client.Create(ctx, lb)).To(Succeed())
	ms, err := env.CreateControlPlane(ctx, cluster, 1, func(int) []clusterv1.MachineAddress { return harness.InternalIP("127.0.0.2") })
	g.Expect(err).NotTo(HaveOccurred())
	member := ms[0].Name

	if _, err := env.WaitLB(ctx, ns, "lb", timeout, "Ready with its member active", func(lb *lbv1.LoadBalancer) bool {
		return harness.ConditionIs(lb, lbv1.ReadyCondition, metav1.ConditionTrue) &&
			harness.TargetState(lb, member) == lbv1.TargetActive
	}); err != nil {
		t.Fatal(err)
	}
	c := &clusterv1.Cluster{}
	g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(cluster), c)).To(Succeed())
	g.Expect(c.Spec.ControlPlaneEndpoint).To(Equal(clusterv1.APIEndpoint{Host: "127.0.0.1", Port: int32(ext.Port)}))
	// The released webhook, called through its Service with cert-manager's certificate and
	// injected CA, refuses a second publisher of the Cluster (the first create went through it too:
	// failurePolicy Fail would have refused it, had the API server not reached the manager).
	second := lb.DeepCopy()
	second.ObjectMeta = metav1.ObjectMeta{Namespace: ns, Name: "second"}
	second.Status = lbv1.LoadBalancerStatus{}
	g.Expect(env.Client.Create(ctx, second)).To(MatchError(And(
		ContainSubstring(`admission webhook "vloadbalancer.loadbalancer.cluster.x-k8s.io" denied the request`),
		ContainSubstring("spec.publishClusterEndpoint: Forbidden: another LoadBalancer of Cluster c already publishes its endpoint"))))
	second.Spec.PublishClusterEndpoint = ptr.To(false)
	g.Expect(env.Client.Create(ctx, second)).To(Succeed(), "an additional endpoint is admitted")
	g.Expect(env.Client.Delete(ctx, second)).To(Succeed())
	g.Expect(env.WaitGone(ctx, second, timeout)).To(Succeed())
	m := &clusterv1.Machine{}
	g.Expect(env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: member}, m)).To(Succeed())
	g.Expect(hookKeys(m)).NotTo(BeEmpty(), "the member's Machine carries caplb's pre-drain hook")
	// The real binary exports what config/monitoring's dashboard and alerts query.
	sel := fmt.Sprintf(`{name="lb",namespace=%q}`, ns)
	g.Eventually(func(g Gomega) {
		lines, err := mgr.metrics(ctx, "caplb_loadbalancer_")
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(lines).To(ContainElements(
			"caplb_loadbalancer_ready"+sel+" 1",
			"caplb_loadbalancer_hooks_held"+sel+" 1",
			fmt.Sprintf(`caplb_loadbalancer_targets{name="lb",namespace=%q,state="active"} 1`, ns),
		))
		g.Expect(lines).To(ContainElement(HavePrefix(`caplb_loadbalancer_reconcile_total{result="success"}`)))
	}, timeout, harness.PollInterval).Should(Succeed(), "the manager's metrics for the LoadBalancer")

	g.Expect(env.Client.Delete(ctx, lb)).To(Succeed())
	g.Expect(env.WaitGone(ctx, lb, timeout)).To(Succeed(), "the finalizer is removed under the manager's RBAC")
	g.Eventually(func(g Gomega) {
		g.Expect(env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: member}, m)).To(Succeed())
		g.Expect(hookKeys(m)).To(BeEmpty())
	}, timeout, harness.PollInterval).Should(Succeed(), "the hook leaves the Machine with the LoadBalancer")
}

func hookKeys(m *clusterv1.Machine) []string {
	var keys []string
	for k := range m.Annotations {
		if strings.HasPrefix(k, clusterv1.PreDrainDeleteHookAnnotationPrefix) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return keys
}
