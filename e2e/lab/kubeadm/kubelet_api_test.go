//go:build linux

package kubeadm

import (
	"context"
	"crypto/tls"
	"io"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	kcpetcd "sigs.k8s.io/cluster-api/controlplane/kubeadm/pkg/etcd"

	"github.com/caplb/caplb/e2e/lab"
)

// kubeletOf starts m's kubelet API and its reporting (Node, Lease, mirror Pods); stop ends both
// and waits for them.
func kubeletOf(g Gomega, tp *topology, m Machine, version string, logf func(string, ...any)) (stop func()) {
	kc, err := KubeletClient(m, tp.ns[m.Name])
	g.Expect(err).NotTo(HaveOccurred())
	api, err := StartKubeletAPI(tp.ns[m.Name], m, kc)
	g.Expect(err).NotTo(HaveOccurred())
	r := &NodeReporter{Machine: m, NS: tp.ns[m.Name], Client: kc, KubeletVersion: version, Logf: logf}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); r.Run(ctx) }()
	var once sync.Once
	return func() {
		once.Do(func() {
			cancel()
			<-done
			_ = api.Close()
		})
	}
}

// expectMirrorsReady waits until each named mirror Pod is Ready as its kubelet reported it: bound
// to and owned by its Node, written by the kubelet's own credential.
func expectMirrorsReady(ctx context.Context, g Gomega, cs kubernetes.Interface, names ...string) {
	for _, name := range names {
		g.Eventually(func(g Gomega) {
			p, err := cs.CoreV1().Pods("kube-system").Get(ctx, name, metav1.GetOptions{})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(p.Annotations).To(HaveKey(ConfigMirrorAnnotation))
			g.Expect(p.OwnerReferences).To(ContainElement(HaveField("Kind", "Node")))
			g.Expect(p.Status.Phase).To(Equal(corev1.PodRunning))
			g.Expect(p.Status.Conditions).To(ContainElement(And(HaveField("Type", corev1.PodReady), HaveField("Status", corev1.ConditionTrue))))
			managers := []string{}
			for _, f := range p.ManagedFields {
				managers = append(managers, f.Manager)
			}
			g.Expect(managers).To(ContainElement("kubelet"), "created and reported with the node's credential")
		}, 90*time.Second, time.Second).Should(Succeed(), "mirror Pod %s is Ready", name)
	}
}

// expectNodeReported checks the Node and Lease the kubelet keeps.
func expectNodeReported(ctx context.Context, g Gomega, cs kubernetes.Interface, name string) {
	node, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(node.Status.DaemonEndpoints.KubeletEndpoint.Port).To(BeEquivalentTo(KubeletPort))
	g.Expect(node.Status.Conditions).To(ContainElement(And(HaveField("Type", corev1.NodeReady), HaveField("Status", corev1.ConditionTrue))))
	lease, err := cs.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, name, metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(lease.Spec.RenewTime.Time).To(BeTemporally(">", time.Now().Add(-30*time.Second)), "the Lease is renewed")
}

// managementConfig is admin.conf as a management cluster holds it (its kubeconfig Secret): the
// endpoint reached from the test's own namespace through a proxy into the client's, the
// endpoint's address still the name TLS verifies.
func managementConfig(t *testing.T, g Gomega, tp *topology, m Machine) *rest.Config {
	p, err := lab.ProxyOut(tp.client, "127.0.0.1:0", netip.AddrPortFrom(vip, APIPort).String())
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = p.Close() })
	cfg, err := clientcmd.BuildConfigFromFlags("", m.Path(AdminConfPath))
	g.Expect(err).NotTo(HaveOccurred())
	cfg.Host = "https://" + p.Addr()
	cfg.TLSClientConfig.ServerName = vip.String()
	return cfg
}

// kcpEtcdClient is KCPEtcdClient for node with the etcd CA on m, retried until the port-forward
// path (the endpoint, the API server, node's kubelet) carries it.
func kcpEtcdClient(ctx context.Context, g Gomega, cfg *rest.Config, m Machine, node string) *kcpetcd.Client {
	caPEM, err := os.ReadFile(m.Path(filepath.Join(PKIDir, "etcd/ca.crt")))
	g.Expect(err).NotTo(HaveOccurred())
	keyPEM, err := os.ReadFile(m.Path(filepath.Join(PKIDir, "etcd/ca.key")))
	g.Expect(err).NotTo(HaveOccurred())
	var c *kcpetcd.Client
	g.Eventually(func() error {
		c, err = KCPEtcdClient(ctx, cfg, caPEM, keyPEM, node)
		return err
	}, 60*time.Second, time.Second).Should(Succeed(), "KCP's etcd client reaches etcd-%s through the endpoint", node)
	return c
}

// kubeletAnswer is the status and body the kubelet API at m answers a port-forward POST for pod
// with, presenting cert (none when nil), from the client namespace.
func kubeletAnswer(g Gomega, tp *topology, m Machine, pod string, cert *tls.Certificate) (int, string) {
	tc := &tls.Config{InsecureSkipVerify: true} //nolint:gosec // the kubelet's self-signed certificate, as the API server dials it
	if cert != nil {
		tc.Certificates = []tls.Certificate{*cert}
	}
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DialContext: tp.client.DialContext, TLSClientConfig: tc, DisableKeepAlives: true}}
	resp, err := hc.Post("https://"+netip.AddrPortFrom(m.Addr, KubeletPort).String()+"/portForward/kube-system/"+pod, "", nil)
	g.Expect(err).NotTo(HaveOccurred())
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(b))
}
