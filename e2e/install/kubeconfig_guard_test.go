package install

import (
	"context"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/kubeconfig"
	"sigs.k8s.io/cluster-api/util/secret"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lbv1 "github.com/caplb/caplb/api/v1alpha1"
	"github.com/caplb/caplb/e2e/harness"
)

// headerRecorder is a tenant's "API server": it records the Authorization header of every
// request and answers 401.
type headerRecorder struct {
	mu    sync.Mutex
	auths []string
}

func (h *headerRecorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	h.auths = append(h.auths, r.Header.Get("Authorization"))
	h.mu.Unlock()
	w.WriteHeader(http.StatusUnauthorized)
}

func (h *headerRecorder) seen() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string{}, h.auths...)
}

// tenantKubeconfig is a kubeconfig for srv (its CA inline) whose user is user.
func tenantKubeconfig(t *testing.T, srv *httptest.Server, user *clientcmdapi.AuthInfo) []byte {
	t.Helper()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["tenant"] = &clientcmdapi.Cluster{Server: srv.URL,
		CertificateAuthorityData: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})}
	kc.AuthInfos["tenant"] = user
	kc.Contexts["tenant"] = &clientcmdapi.Context{Cluster: "tenant", AuthInfo: "tenant"}
	kc.CurrentContext = "tenant"
	data, err := clientcmd.Write(*kc)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// The attack of issue 32: a tenant who may create Clusters and Secrets in its namespace makes
// a Cluster without infrastructureRef (provisioned at once) and a <name>-kubeconfig Secret whose
// user has tokenFile naming the manager's ServiceAccount token and whose server is the tenant's.
// client-go would read that file in the manager's process and send it as a Bearer token. The
// real manager binary must refuse the kubeconfig before dialing (the tenant's server sees no
// request at all) and say why on the LoadBalancer; once the Secret carries its token inline the
// manager does connect, so the server and the Cluster were reachable all along.
//
// CAPI's own reconcilers do not run here: their ClusterCache, in this test process, would read
// the same file and send it (CAPI's exposure, not caplb's). The test marks the Cluster
// provisioned itself, as CAPI does at once for a Cluster without infrastructureRef.
func TestManagerRefusesKubeconfigFileReferences(t *testing.T) {
	if testing.Short() {
		t.Skip("kubeconfig guard test: needs the test control plane (make testbin); skipped with -short")
	}
	g := NewWithT(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)

	// The "ServiceAccount token" the manager's pod would have, at a path of the test's.
	const stolen = "manager-serviceaccount-token-must-stay-home"
	tokenFile := filepath.Join(t.TempDir(), "token")
	g.Expect(os.WriteFile(tokenFile, []byte(stolen), 0o600)).To(Succeed())
	rec := &headerRecorder{}
	srv := httptest.NewTLSServer(rec)
	t.Cleanup(srv.Close)

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
	admin := filepath.Join(t.TempDir(), "admin.kubeconfig")
	g.Expect(os.WriteFile(admin, env.ControlPlane.Environment.KubeConfig, 0o600)).To(Succeed())
	mgr := startManager(t, bin, []string{"manager", "--webhook-port=0"}, admin)
	g.Expect(harness.Poll(ctx, timeout, "manager ready", mgr.ready)).To(Succeed())

	ns, err := env.CreateNamespace(ctx, "tenant")
	g.Expect(err).NotTo(HaveOccurred())
	cluster := &clusterv1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "evil"},
		Spec: clusterv1.ClusterSpec{ClusterNetwork: clusterv1.ClusterNetwork{
			Pods: clusterv1.NetworkRanges{CIDRBlocks: []string{"192.168.0.0/16"}}}},
	}
	g.Expect(env.Client.Create(ctx, cluster)).To(Succeed())
	provisioned := cluster.DeepCopy()
	provisioned.Status.Initialization.InfrastructureProvisioned = ptr.To(true)
	g.Expect(env.Client.Status().Patch(ctx, provisioned, client.MergeFrom(cluster))).To(Succeed())
	kcSecret := kubeconfig.GenerateSecret(cluster, tenantKubeconfig(t, srv, &clientcmdapi.AuthInfo{TokenFile: tokenFile}))
	g.Expect(env.Client.Create(ctx, kcSecret)).To(Succeed())

	ext, err := harness.Listen(0, "127.0.0.1")
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { ext.Close() })
	lb := &lbv1.LoadBalancer{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "lb"},
		Spec: lbv1.LoadBalancerSpec{
			ClusterName: cluster.Name,
			TargetKind:  lbv1.TargetKind{APIGroup: "", Kind: lbv1.NodeKind},
			Endpoint:    lbv1.APIEndpoint{Host: "127.0.0.1", Port: int32(ext.Port)},
			Backend:     lbv1.Backend{Static: &lbv1.StaticBackend{}},
		},
	}
	g.Expect(env.Client.Create(ctx, lb)).To(Succeed())
	t.Cleanup(func() {
		if t.Failed() {
			if lb, err := env.GetLB(context.Background(), ns, "lb"); err == nil {
				t.Logf("lb: %s", harness.DescribeLB(lb))
			}
		}
	})

	// The manager has reconciled the LoadBalancer (and its ClusterCache the provisioned Cluster).
	_, err = env.WaitLB(ctx, ns, "lb", timeout, "WorkloadClusterReachable reported", func(lb *lbv1.LoadBalancer) bool {
		return harness.Condition(lb, lbv1.WorkloadClusterReachableCondition) != nil
	})
	g.Expect(err).NotTo(HaveOccurred())
	g.Consistently(func(g Gomega) {
		auths := rec.seen()
		g.Expect(auths).NotTo(ContainElement(ContainSubstring(stolen)), "the manager sent the token of its tokenFile to the tenant's server")
		g.Expect(auths).To(BeEmpty(), "the manager dialed the tenant's server")
	}, 5*time.Second, harness.PollInterval).Should(Succeed())

	got, err := env.WaitLB(ctx, ns, "lb", timeout, "WorkloadClusterReachable False, reason KubeconfigTokenFile", func(lb *lbv1.LoadBalancer) bool {
		c := harness.Condition(lb, lbv1.WorkloadClusterReachableCondition)
		return c != nil && c.Status == metav1.ConditionFalse && c.Reason == lbv1.KubeconfigTokenFileReason
	})
	g.Expect(err).NotTo(HaveOccurred())
	msg := harness.Condition(got, lbv1.WorkloadClusterReachableCondition).Message
	g.Expect(msg).To(ContainSubstring(`users["tenant"].user.tokenFile`))
	g.Expect(msg).NotTo(ContainSubstring(tokenFile), "the message names the field, not the Secret's values")

	// The same Secret with the tenant's own token inline: the manager connects. The server saw
	// nothing before because the guard refused, not because it was out of reach.
	const inline = "tenant-inline-token"
	g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(kcSecret), kcSecret)).To(Succeed())
	kcSecret.Data[secret.KubeconfigDataName] = tenantKubeconfig(t, srv, &clientcmdapi.AuthInfo{Token: inline})
	g.Expect(env.Client.Update(ctx, kcSecret)).To(Succeed())
	g.Eventually(rec.seen, timeout, harness.PollInterval).Should(ContainElement("Bearer "+inline),
		"the manager reaches the tenant's server with the inline token")
	g.Expect(rec.seen()).NotTo(ContainElement(ContainSubstring(stolen)))
}
