package envtest_test

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/caplb/caplb/e2e/envtest"
)

// TestControlPlane starts the real control plane and checks the CAPI CRDs are
// usable. It fails (rather than skips) without binaries: `make test` builds
// them first, so their absence is a setup bug worth seeing.
func TestControlPlane(t *testing.T) {
	g := NewWithT(t)

	started := time.Now()
	env, err := envtest.Start(envtest.Options{})
	g.Expect(err).NotTo(HaveOccurred(), "starting control plane")
	t.Cleanup(func() { g.Expect(env.Stop()).To(Succeed()) })
	t.Logf("control plane started in %s", time.Since(started).Round(time.Millisecond))

	scheme := runtime.NewScheme()
	g.Expect(apiextensionsv1.AddToScheme(scheme)).To(Succeed())
	g.Expect(clusterv1.AddToScheme(scheme)).To(Succeed())
	c, err := client.New(env.Config, client.Options{Scheme: scheme})
	g.Expect(err).NotTo(HaveOccurred())

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	for _, name := range []string{"clusters.cluster.x-k8s.io", "machines.cluster.x-k8s.io"} {
		g.Eventually(func(g Gomega) {
			crd := &apiextensionsv1.CustomResourceDefinition{}
			g.Expect(c.Get(ctx, client.ObjectKey{Name: name}, crd)).To(Succeed())
			g.Expect(crd.Status.Conditions).To(ContainElement(And(
				HaveField("Type", apiextensionsv1.Established),
				HaveField("Status", apiextensionsv1.ConditionTrue),
			)))
		}).WithContext(ctx).WithTimeout(30*time.Second).WithPolling(50*time.Millisecond).Should(Succeed(), "CRD %s not established", name)
	}

	cluster := &clusterv1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Name: "envtest-smoke", Namespace: metav1.NamespaceDefault},
		Spec: clusterv1.ClusterSpec{
			// The v1beta2 schema requires a non-empty spec.
			ControlPlaneEndpoint: clusterv1.APIEndpoint{Host: "192.0.2.10", Port: 6443},
		},
	}
	g.Expect(c.Create(ctx, cluster)).To(Succeed())

	got := &clusterv1.Cluster{}
	g.Expect(c.Get(ctx, client.ObjectKeyFromObject(cluster), got)).To(Succeed())
	g.Expect(got.UID).NotTo(BeEmpty())
	g.Expect(got.Spec.ControlPlaneEndpoint).To(Equal(cluster.Spec.ControlPlaneEndpoint))
}

// TestVersionsInSync keeps the versions compiled into this package, the build
// script and the testbin module in agreement; a mismatch would make
// BinaryDir look in a directory `make testbin` never fills.
func TestVersionsInSync(t *testing.T) {
	g := NewWithT(t)
	root, err := envtest.RepoRoot()
	g.Expect(err).NotTo(HaveOccurred())

	script, err := os.ReadFile(filepath.Join(root, "hack", "testbin.sh"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(script)).To(MatchRegexp(`(?m)^K8S_VERSION=` + regexp.QuoteMeta(envtest.K8sVersion) + `$`))
	g.Expect(string(script)).To(MatchRegexp(`(?m)^ETCD_VERSION=` + regexp.QuoteMeta(envtest.EtcdVersion) + `$`))

	g.Expect(string(script)).To(MatchRegexp(`(?m)^KUBE_VIP_VERSIONS=\(` + regexp.QuoteMeta(envtest.KubeVIPOldVersion+" "+envtest.KubeVIPNewVersion) + `\)$`))

	gomod, err := os.ReadFile(filepath.Join(root, "e2e", "testbin", "go.mod"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(gomod)).To(MatchRegexp(`(?m)^\s*k8s\.io/kubernetes ` + regexp.QuoteMeta(envtest.K8sVersion) + `\s*$`))
	g.Expect(string(gomod)).To(MatchRegexp(`(?m)^\s*go\.etcd\.io/etcd/server/v3 ` + regexp.QuoteMeta(envtest.EtcdVersion) + `\s*$`))
}

// TestBinaryDirMissing checks the error points the user at `make testbin`.
func TestBinaryDirMissing(t *testing.T) {
	g := NewWithT(t)
	t.Setenv("KUBEBUILDER_ASSETS", "")
	t.Setenv("CAPLB_CACHE", t.TempDir())
	_, err := envtest.BinaryDir()
	g.Expect(err).To(MatchError(ContainSubstring("make testbin")))
}

func TestCAPICRDPaths(t *testing.T) {
	g := NewWithT(t)
	paths, err := envtest.CAPICRDPaths()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(paths).To(HaveLen(3))
	g.Expect(filepath.Join(paths[0], "cluster.x-k8s.io_clusters.yaml")).To(BeAnExistingFile())
	g.Expect(filepath.Join(paths[1], "controlplane.cluster.x-k8s.io_kubeadmcontrolplanes.yaml")).To(BeAnExistingFile())
	g.Expect(filepath.Join(paths[2], "bootstrap.cluster.x-k8s.io_kubeadmconfigtemplates.yaml")).To(BeAnExistingFile())
}
