package install

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lbv1 "github.com/caplb/caplb/api/v1alpha1"
	"github.com/caplb/caplb/e2e/harness"
)

// A fleet larger than one manager is sharded as CAPI shards its own controllers: one manager per
// value of cluster.x-k8s.io/watch-filter. Two real manager binaries, --watch-filter=a and =b,
// each reconcile their own LoadBalancer only, and an unlabelled one is left to nobody.
func TestShardedManagers(t *testing.T) {
	if testing.Short() {
		t.Skip("sharding test: needs the test control plane (make testbin); skipped with -short")
	}
	g := NewWithT(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	bin := buildManager(t)
	env, err := harness.Start(harness.Options{})
	if err != nil {
		t.Fatalf("starting test control plane: %v", err)
	}
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
	ns, err := env.CreateNamespace(ctx, "shards")
	g.Expect(err).NotTo(HaveOccurred())
	ext, err := harness.Listen(0, "127.0.0.1")
	g.Expect(err).NotTo(HaveOccurred())
	defer ext.Close()

	lbIn := func(shard string) string {
		name := "lb-" + shard
		cluster, err := env.CreateCluster(ctx, ns, "c-"+shard, harness.ClusterOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		lb := &lbv1.LoadBalancer{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: lbv1.LoadBalancerSpec{
				ClusterName: cluster.Name,
				Endpoint:    lbv1.APIEndpoint{Host: "127.0.0.1", Port: int32(ext.Port)},
				Backend:     lbv1.Backend{Static: &lbv1.StaticBackend{}},
			},
		}
		if shard != "none" {
			lb.Labels = map[string]string{clusterv1.WatchLabel: shard}
		}
		g.Expect(env.Client.Create(ctx, lb)).To(Succeed())
		return name
	}
	a, b, none := lbIn("a"), lbIn("b"), lbIn("none")

	kubeconfig := filepath.Join(t.TempDir(), "admin.kubeconfig")
	g.Expect(os.WriteFile(kubeconfig, env.ControlPlane.Environment.KubeConfig, 0o600)).To(Succeed())
	managers := map[string]*managerProcess{}
	for _, shard := range []string{"a", "b"} {
		// --webhook-port=0: two managers on one host would share the port, and no webhook is
		// registered here (TestInstallWithClusterctl runs the released one).
		m := startManager(t, bin, []string{"manager", "--insecure-diagnostics", "--watch-filter=" + shard, "--webhook-port=0"}, kubeconfig)
		g.Expect(harness.Poll(ctx, timeout, "manager "+shard+" ready", m.ready)).To(Succeed())
		managers[shard] = m
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, n := range []string{a, b, none} {
				if lb, err := env.GetLB(context.Background(), ns, n); err == nil {
					t.Logf("%s: %s", n, harness.DescribeLB(lb))
				}
			}
			for s, m := range managers {
				t.Logf("manager %s log:\n%s", s, m.log())
			}
		}
	})

	for _, name := range []string{a, b} {
		// No Machines: reconciled means the endpoint published, not Ready (no targets).
		_, err := env.WaitLB(ctx, ns, name, timeout, "reconciled: endpoint published", func(lb *lbv1.LoadBalancer) bool {
			return harness.ConditionIs(lb, lbv1.ClusterEndpointCondition, metav1.ConditionTrue)
		})
		g.Expect(err).NotTo(HaveOccurred())
	}
	// Each manager reports its own shard's LoadBalancer, never the other's.
	for shard, other := range map[string]string{"a": b, "b": a} {
		own := fmt.Sprintf(`caplb_loadbalancer_ready{name="lb-%s",namespace=%q} `, shard, ns)
		g.Eventually(func(g Gomega) {
			lines, err := managers[shard].metrics(ctx, "caplb_loadbalancer_ready")
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(lines).To(ContainElement(HavePrefix(own)))
			g.Expect(lines).NotTo(ContainElement(ContainSubstring(`name="` + other + `"`)))
			g.Expect(lines).NotTo(ContainElement(ContainSubstring(`name="` + none + `"`)))
		}, timeout, harness.PollInterval).Should(Succeed(), "manager %s's metrics", shard)
	}
	// The unlabelled LoadBalancer belongs to no shard: untouched (no finalizer, no status).
	g.Consistently(func(g Gomega) {
		lb := &lbv1.LoadBalancer{}
		g.Expect(env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: none}, lb)).To(Succeed())
		g.Expect(lb.Finalizers).To(BeEmpty())
		g.Expect(lb.Status.Conditions).To(BeEmpty())
	}, 3*time.Second, harness.PollInterval).Should(Succeed())
}
