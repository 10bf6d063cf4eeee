//go:build linux

package lifecycle

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/caplb/caplb/e2e/lab/kubeadm"
)

// A real control-plane machine's API server as the machine's kubelet sees it: its readiness,
// the Node its credential registers, its restart.

// waitAPIReady polls the machine's own /readyz (from the machine, verified with the cluster CA
// for the machine's address, a SAN of kubeadm's serving certificate).
func (n *Node) waitAPIReady(ctx context.Context, timeout time.Duration) error {
	ca, err := os.ReadFile(n.cp.Path(filepath.Join(kubeadm.PKIDir, "ca.crt")))
	if err != nil {
		return err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	hc := &http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{DialContext: n.NS.DialContext,
		DisableKeepAlives: true, TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	url := "https://" + netip.AddrPortFrom(n.Addr, apiPort).String() + "/readyz"
	deadline := time.Now().Add(timeout)
	var last error
	for time.Now().Before(deadline) {
		if last = getOK(ctx, hc, url); last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
	return fmt.Errorf("%s: kube-apiserver not ready within %v: %w", n.Name, timeout, last)
}

func getOK(ctx context.Context, hc *http.Client, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: HTTP %d: %s", url, resp.StatusCode, strings.TrimSpace(string(b)))
	}
	return nil
}

// registerAsKubelet creates the machine's Node with kubeadm's kubelet.conf (system:node:<name>,
// under the Node authorizer and NodeRestriction), as the kubelet's first start does: its
// providerID, hostname label and addresses, and a Ready status.
func (n *Node) registerAsKubelet(ctx context.Context) error {
	c, err := n.kubeletClient()
	if err != nil {
		return err
	}
	var last error
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		if last = registerNode(ctx, c, n.Name, n.providerID, n.Addr, map[string]string{corev1.LabelHostname: n.Name}); last == nil {
			return nil
		}
		if strings.Contains(last.Error(), "forbidden") {
			return last
		}
		time.Sleep(250 * time.Millisecond)
	}
	return fmt.Errorf("%s: registering its Node: %w", n.Name, last)
}

// kubeletClient is a client with the machine's kubelet credential (kubeadm's kubelet.conf:
// system:node:<name>), dialling from the machine.
func (n *Node) kubeletClient() (client.Client, error) {
	b, err := os.ReadFile(n.cp.Path("/etc/kubernetes/kubelet.conf"))
	if err != nil {
		return nil, err
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig(b)
	if err != nil {
		return nil, fmt.Errorf("%s: kubelet.conf: %w", n.Name, err)
	}
	cfg.Dial, cfg.Timeout = n.NS.DialContext, 5*time.Second
	return client.New(cfg, client.Options{Scheme: n.deps.scheme})
}

// setAPIHealthy stops (as a restart of the static pod would) or starts the machine's
// kube-apiserver.
func (n *Node) setAPIHealthy(ok bool) error {
	if ok {
		if n.cp.apiserver != nil {
			return nil
		}
		return n.startControlPlane()
	}
	if n.cp.apiserver == nil {
		return nil
	}
	// The kubelet's grace for a static pod without terminationGracePeriodSeconds (kubeadm's):
	// 30 s, then SIGKILL. A kill is what the kubelet does, not the scenario's failure.
	if err := n.cp.apiserver.Stop(30 * time.Second); err != nil {
		n.deps.lab.Logf("kubelet", "%s: kube-apiserver: %v", n.Name, err)
	}
	n.cp.apiserver = nil
	return nil
}
