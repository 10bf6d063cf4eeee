package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/caplb/caplb/cmd/internal/version"
	"github.com/caplb/caplb/controllers"
	"github.com/caplb/caplb/e2e/envtest"
	"github.com/caplb/caplb/e2e/testpki"
)

// TestManagerCommand runs `caplb manager` against a real API server: it serves /readyz,
// /metrics and, by default, the validating webhook (with a serving certificate in
// --webhook-cert-dir, as cert-manager's Secret is mounted), and stops cleanly on SIGTERM.
func TestManagerCommand(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a kube-apiserver")
	}
	if _, err := envtest.BinaryDir(); err != nil {
		t.Skipf("needs the test control plane: %v", err)
	}
	g := NewWithT(t)
	env, err := envtest.Start(envtest.Options{})
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = env.Stop() })

	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	cfg := env.Config
	kc := clientcmdapi.NewConfig()
	kc.Clusters["envtest"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["admin"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData}
	kc.Contexts["envtest"] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: "admin"}
	kc.CurrentContext = "envtest"
	g.Expect(clientcmd.WriteToFile(*kc, kubeconfig)).To(Succeed())

	metricsAddr, probeAddr, webhookAddr := freeAddr(t), freeAddr(t), freeAddr(t)
	certDir := t.TempDir()
	ca, err := testpki.NewCA(t.TempDir())
	g.Expect(err).NotTo(HaveOccurred())
	_, err = ca.IssueWebhookServing(certDir, "127.0.0.1")
	g.Expect(err).NotTo(HaveOccurred())
	_, webhookPort, _ := net.SplitHostPort(webhookAddr)
	cmd := newManagerCommand()
	// No --webhook-port=0: the webhook is on by default.
	cmd.SetArgs([]string{"--kubeconfig", kubeconfig, "--diagnostics-address", metricsAddr, "--insecure-diagnostics",
		"--health-probe-bind-address", probeAddr, "--concurrency", "2", "--leader-elect",
		"--leader-election-namespace", "default", "--zap-log-level", "error",
		"--agent-image", "registry.example/caplb:v0", "--webhook-port", webhookPort, "--webhook-cert-dir", certDir})
	done := make(chan error, 1)
	go func() { done <- cmd.ExecuteContext(context.Background()) }()

	g.Eventually(func() (int, error) { return get(probeAddr, "/readyz") }, 60*time.Second, 100*time.Millisecond).Should(Equal(http.StatusOK))
	g.Expect(get(probeAddr, "/healthz")).To(Equal(http.StatusOK))
	g.Eventually(func() (string, error) { return body(metricsAddr, "/metrics") }, 30*time.Second, 100*time.Millisecond).
		Should(ContainSubstring(`controller_runtime_active_workers{controller="loadbalancer"}`))
	// Every binary that serves metrics says which build it is.
	info := version.Get()
	g.Expect(body(metricsAddr, "/metrics")).To(ContainSubstring(fmt.Sprintf("caplb_build_info{goversion=%q,revision=%q,version=%q} 1",
		info.GoVersion, info.Commit, info.Version)))
	// The ClusterCache the VIP backends reach workload clusters through runs as a controller.
	g.Expect(body(metricsAddr, "/metrics")).To(ContainSubstring(`controller_runtime_active_workers{controller="clustercache"}`))
	// The webhook answers an AdmissionReview over TLS verified with the certificate's CA.
	review, err := admissionReview(webhookAddr, ca.PEM)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(review.Response).NotTo(BeNil())
	g.Expect(review.Response.UID).To(BeEquivalentTo("review-1"))
	g.Expect(review.Response.Allowed).To(BeTrue(), "a LoadBalancer that publishes nothing is admitted: %+v", review.Response.Result)

	g.Expect(syscall.Kill(os.Getpid(), syscall.SIGTERM)).To(Succeed())
	select {
	case err := <-done:
		g.Expect(err).NotTo(HaveOccurred())
	case <-time.After(60 * time.Second):
		t.Fatal("manager did not stop on SIGTERM")
	}
}

func TestManagerFlagsRejectBadConcurrency(t *testing.T) {
	g := NewWithT(t)
	cmd := newManagerCommand()
	cmd.SetArgs([]string{"--concurrency", "0"})
	cmd.SetOut(io.Discard)
	cmd.SetErr(io.Discard)
	g.Expect(cmd.Execute()).To(MatchError(ContainSubstring("--concurrency must be at least 1")))
}

func TestManagerFlagsRejectBadWorkloadRetry(t *testing.T) {
	for _, v := range []string{"0s", "-1s"} {
		g := NewWithT(t)
		cmd := newManagerCommand()
		cmd.SetArgs([]string{"--workload-connect-retry", v})
		cmd.SetOut(io.Discard)
		cmd.SetErr(io.Discard)
		g.Expect(cmd.Execute()).To(MatchError(ContainSubstring("--workload-connect-retry must be a positive duration (default 5s)")), v)
	}
}

func TestManagerFlagsWebhook(t *testing.T) {
	g := NewWithT(t)
	cmd := newManagerCommand()
	fs := cmd.Flags()
	g.Expect(fs.Lookup("webhook-port").DefValue).To(Equal("9443"), "the webhook is on unless --webhook-port=0")
	g.Expect(fs.Lookup("webhook-cert-dir").DefValue).To(Equal("/tmp/k8s-webhook-server/serving-certs"), "where config/manager mounts the certificate")
	cmd.SetArgs([]string{"--webhook-port", "-1"})
	cmd.SetOut(io.Discard)
	cmd.SetErr(io.Discard)
	g.Expect(cmd.Execute()).To(MatchError(ContainSubstring("--webhook-port must be 0 (off) or a TCP port")))
}

// admissionReview posts a review of a LoadBalancer create to the manager's webhook.
func admissionReview(addr string, caPEM []byte) (*admissionv1.AdmissionReview, error) {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	obj := `{"apiVersion":"loadbalancer.cluster.x-k8s.io/v1alpha1","kind":"LoadBalancer","metadata":{"name":"ext","namespace":"default"},` +
		`"spec":{"clusterName":"c","publishClusterEndpoint":false,"backend":{"static":{}}}}`
	in := fmt.Sprintf(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"review-1",`+
		`"kind":{"group":"loadbalancer.cluster.x-k8s.io","version":"v1alpha1","kind":"LoadBalancer"},`+
		`"resource":{"group":"loadbalancer.cluster.x-k8s.io","version":"v1alpha1","resource":"loadbalancers"},`+
		`"namespace":"default","name":"ext","operation":"CREATE","userInfo":{},"object":%s}}`, obj)
	resp, err := c.Post("https://"+addr+controllers.ValidatingWebhookPath, "application/json", strings.NewReader(in))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out := &admissionv1.AdmissionReview{}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return nil, fmt.Errorf("decoding the webhook's answer (HTTP %s): %w", resp.Status, err)
	}
	return out, nil
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func get(addr, path string) (int, error) {
	resp, err := http.Get(fmt.Sprintf("http://%s%s", addr, path))
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	return resp.StatusCode, nil
}

func body(addr, path string) (string, error) {
	resp, err := http.Get(fmt.Sprintf("http://%s%s", addr, path))
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return strings.TrimSpace(string(b)), err
}
