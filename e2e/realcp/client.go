//go:build linux

package realcp

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/caplb/caplb/e2e/lab"
	"github.com/caplb/caplb/e2e/lab/kubeadm"
)

// readyz is GET /readyz on m's own address, from inside m, verified with the cluster CA.
func readyz(ctx context.Context, m *machine) error {
	_, err := get(ctx, m.ns, m, m.Addr, "/readyz")
	return err
}

// get is an HTTPS GET of path at addr:6443 dialled from ns, trusting the cluster CA read from
// m's disk and verifying the server's certificate for addr.
func get(ctx context.Context, ns *lab.Netns, m *machine, addr netip.Addr, path string) (string, error) {
	c, err := httpsClient(ns, m, 3*time.Second)
	if err != nil {
		return "", err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+netip.AddrPortFrom(addr, kubeadm.APIPort).String()+path, nil)
	if err != nil {
		return "", err
	}
	resp, err := c.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return string(b), fmt.Errorf("%s %s: HTTP %d: %s", addr, path, resp.StatusCode, strings.TrimSpace(lastLines(string(b), 3)))
	}
	return string(b), nil
}

func httpsClient(ns *lab.Netns, m *machine, timeout time.Duration) (*http.Client, error) {
	ca, err := os.ReadFile(m.Path(filepath.Join(kubeadm.PKIDir, "ca.crt")))
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	return &http.Client{Timeout: timeout, Transport: &http.Transport{DialContext: ns.DialContext, DisableKeepAlives: true,
		TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}, nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

// adminClient is client-go with kubeadm's admin.conf (server: the endpoint), dialling from the
// client namespace: a kubectl user's view of the cluster.
func (c *cpLab) adminClient(timeout time.Duration) (*kubernetes.Clientset, error) {
	cfg, err := c.adminConfig(timeout)
	if err != nil {
		return nil, err
	}
	return kubernetes.NewForConfig(cfg)
}

// superAdmin is client-go with kubeadm's super-admin.conf (system:masters), the break-glass
// credential, dialling from the client namespace.
func (c *cpLab) superAdmin(timeout time.Duration) (*kubernetes.Clientset, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", c.machines[0].Path("/etc/kubernetes/super-admin.conf"))
	if err != nil {
		return nil, err
	}
	cfg.Dial = c.client.DialContext
	cfg.Timeout = timeout
	return kubernetes.NewForConfig(cfg)
}

// adminConfig is kubeadm's admin.conf (server: the endpoint) dialling from the client namespace.
func (c *cpLab) adminConfig(timeout time.Duration) (*rest.Config, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", c.machines[0].Path(kubeadm.AdminConfPath))
	if err != nil {
		return nil, err
	}
	cfg.Dial = c.client.DialContext
	cfg.Timeout = timeout
	return cfg, nil
}

// eligibleAgents lists the machines whose agent reports itself eligible (its /status on the
// admin listener, read from inside the machine).
func (c *cpLab) eligibleAgents() []string {
	var out []string
	for _, m := range c.machines {
		if m.nl == nil {
			continue
		}
		resp, err := m.ns.HTTPClient(time.Second).Get("http://127.0.0.1:7473/status")
		if err != nil {
			out = append(out, m.Name+" (no status: "+err.Error()+")")
			continue
		}
		var st struct {
			Eligible bool `json:"eligible"`
		}
		err = json.NewDecoder(resp.Body).Decode(&st)
		resp.Body.Close()
		if err != nil || st.Eligible {
			out = append(out, m.Name)
		}
	}
	return out
}
