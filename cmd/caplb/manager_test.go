package main

import (
	"context"
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
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/caplb/caplb/e2e/envtest"
)

// TestManagerCommand runs `caplb manager` against a real API server: it serves /readyz and
// /metrics, and stops cleanly on SIGTERM.
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

	metricsAddr, probeAddr := freeAddr(t), freeAddr(t)
	cmd := newManagerCommand()
	cmd.SetArgs([]string{"--kubeconfig", kubeconfig, "--metrics-bind-address", metricsAddr,
		"--health-probe-bind-address", probeAddr, "--concurrency", "2", "--leader-elect",
		"--leader-election-namespace", "default", "--zap-log-level", "error",
		"--agent-image", "registry.example/caplb:v0"})
	done := make(chan error, 1)
	go func() { done <- cmd.ExecuteContext(context.Background()) }()

	g.Eventually(func() (int, error) { return get(probeAddr, "/readyz") }, 60*time.Second, 100*time.Millisecond).Should(Equal(http.StatusOK))
	g.Expect(get(probeAddr, "/healthz")).To(Equal(http.StatusOK))
	g.Eventually(func() (string, error) { return body(metricsAddr, "/metrics") }, 30*time.Second, 100*time.Millisecond).
		Should(ContainSubstring(`controller_runtime_active_workers{controller="loadbalancer"}`))
	// The ClusterCache the VIP backends reach workload clusters through runs as a controller.
	g.Expect(body(metricsAddr, "/metrics")).To(ContainSubstring(`controller_runtime_active_workers{controller="clustercache"}`))

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
