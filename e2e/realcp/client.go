//go:build linux

package realcp

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/caplb/caplb/e2e/lab"
	"github.com/caplb/caplb/e2e/lab/kubeadm"
	"github.com/caplb/caplb/e2e/lifecycle/observe/clients"
)

// readyz is GET /readyz on m's own address, from inside m, verified with the cluster CA.
func (c *Lab) readyz(ctx context.Context, m *machine) error {
	_, err := c.get(ctx, m.ns, m.Addr, "/readyz", 3*time.Second)
	return err
}

// get is an HTTPS GET of path at addr:6443 on a new connection dialled from ns, verifying the
// server's certificate for addr with the cluster CA.
func (c *Lab) get(ctx context.Context, ns *lab.Netns, addr netip.Addr, path string, timeout time.Duration) (string, error) {
	hc := &http.Client{Timeout: timeout, Transport: &http.Transport{DialContext: ns.DialContext, DisableKeepAlives: true,
		TLSClientConfig: &tls.Config{RootCAs: c.ca, MinVersion: tls.VersionTLS12}}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+netip.AddrPortFrom(addr, kubeadm.APIPort).String()+path, nil)
	if err != nil {
		return "", err
	}
	resp, err := hc.Do(req)
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

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

// AdminClient is client-go with kubeadm's admin.conf (server: the endpoint), dialling from the
// client namespace: a kubectl user's view of the cluster. It keeps one HTTP/2 connection.
func (c *Lab) AdminClient(timeout time.Duration) (*kubernetes.Clientset, error) {
	cfg, err := c.adminConfig(timeout)
	if err != nil {
		return nil, err
	}
	return kubernetes.NewForConfig(cfg)
}

// superAdmin is client-go with kubeadm's super-admin.conf (system:masters), the break-glass
// credential, dialling from the client namespace.
func (c *Lab) superAdmin(timeout time.Duration) (*kubernetes.Clientset, error) {
	cfg, err := c.kubeconfig(c.superAdminConf, timeout)
	if err != nil {
		return nil, err
	}
	return kubernetes.NewForConfig(cfg)
}

// adminConfig is kubeadm's admin.conf (server: the endpoint) dialling from the client namespace.
func (c *Lab) adminConfig(timeout time.Duration) (*rest.Config, error) {
	return c.kubeconfig(c.adminConf, timeout)
}

func (c *Lab) kubeconfig(path string, timeout time.Duration) (*rest.Config, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", path, err)
	}
	cfg.Dial = c.client.DialContext
	cfg.Timeout = timeout
	return cfg, nil
}

// StartClients runs the real clients through the VIP (a writer and an informer on ConfigMaps of
// their own namespace "clients-<name>", a leader-elected loop with kube-controller-manager's
// timings) and waits until the loop leads.
func (c *Lab) StartClients(ctx context.Context, name string) (*clients.Run, error) {
	cfg, err := c.adminConfig(5 * time.Second)
	if err != nil {
		return nil, err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	ns, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "clients-" + name}}, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("the clients' namespace: %w", err)
	}
	r, err := clients.Start(ctx, clients.Config{REST: cfg, Namespace: ns.Name})
	if err != nil {
		return nil, err
	}
	if err := poll(ctx, 30*time.Second, 100*time.Millisecond, func() error {
		if !r.Leading() {
			return errors.New("not leading")
		}
		return nil
	}); err != nil {
		r.Stop(0)
		return nil, fmt.Errorf("the leader-elected loop never led: %w", err)
	}
	return r, nil
}

// Write creates a ConfigMap through the VIP: it commits only with an etcd quorum.
func Write(ctx context.Context, cs *kubernetes.Clientset, what string) error {
	_, err := cs.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "realcp-" + what + "-"}}, metav1.CreateOptions{})
	return err
}

// eligibleAgents lists the machines whose agent reports itself eligible (its /status on the
// admin listener, read from inside the machine).
func (c *Lab) eligibleAgents() []string {
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

// AgentMetrics is each machine's agent's /metrics (Prometheus text), read from inside the
// machine on the admin listener; a machine whose agent does not answer maps to the error.
func (c *Lab) AgentMetrics() map[string]string {
	out := map[string]string{}
	for _, m := range c.machines {
		if m.nl == nil {
			continue
		}
		resp, err := m.ns.HTTPClient(time.Second).Get("http://127.0.0.1:7473/metrics")
		if err != nil {
			out[m.Name] = err.Error()
			continue
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			out[m.Name] = err.Error()
			continue
		}
		out[m.Name] = string(body)
	}
	return out
}

// ReadyMachines lists the machines whose API server answers /readyz with 200.
func (c *Lab) ReadyMachines(ctx context.Context) []string {
	var out []string
	for _, m := range c.machines {
		if m.nl == nil {
			continue
		}
		if err := c.readyz(ctx, m); err == nil {
			out = append(out, m.Name)
		}
	}
	slices.Sort(out)
	return out
}

// poll calls cond every interval until it returns nil, ctx ends or timeout passes; the error
// says what cond said last.
func poll(ctx context.Context, timeout, interval time.Duration, cond func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("after %v: %w", timeout, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(interval):
		}
	}
}
