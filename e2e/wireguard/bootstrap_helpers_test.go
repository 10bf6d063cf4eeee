//go:build linux

package wireguard_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	wgapi "github.com/caplb/caplb/api/wireguard/v1alpha1"

	authv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"

	lbv1 "github.com/caplb/caplb/api/v1alpha1"
	"github.com/caplb/caplb/config/samples"
	"github.com/caplb/caplb/e2e/harness"
	"github.com/caplb/caplb/e2e/lab"
	"github.com/caplb/caplb/e2e/lifecycle"
	"github.com/caplb/caplb/e2e/testpki"
)

// wgSampleFile is the shipped sample the bootstrap test follows to the letter.
const wgSampleFile = "cluster_kubeadm_wireguard.yaml"

// mgmtAPIListen is where a gateway reaches the management cluster's API server, on its own
// loopback (lab.ProxyInto to the test API server).
const mgmtAPIListen = "127.0.0.1:16443"

// wgSample is what the test takes from the sample: its Cluster's name, the LoadBalancer, the
// gateways' ServiceAccount and RBAC, and the KubeadmControlPlane's files.
type wgSample struct {
	cluster   string
	lb        *lbv1.LoadBalancer
	gatewaySA string
	rbac      []*unstructured.Unstructured
	files     []lab.BootFile
}

func readWGSample() (wgSample, error) {
	var s wgSample
	cluster, files, err := lab.SampleBootFiles(wgSampleFile)
	if err != nil {
		return s, err
	}
	s.cluster, s.files = cluster, files
	data, err := samples.FS.ReadFile(wgSampleFile)
	if err != nil {
		return s, err
	}
	objs, err := harness.Decode(data)
	if err != nil {
		return s, fmt.Errorf("%s: %w", wgSampleFile, err)
	}
	for _, o := range objs {
		switch o.GetKind() {
		case "LoadBalancer":
			s.lb = &lbv1.LoadBalancer{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, s.lb); err != nil {
				return s, fmt.Errorf("%s: LoadBalancer: %w", wgSampleFile, err)
			}
		case "ServiceAccount":
			s.gatewaySA = o.GetName()
			s.rbac = append(s.rbac, o)
		case "Role", "RoleBinding":
			s.rbac = append(s.rbac, o)
		}
	}
	if s.lb == nil || s.lb.Spec.Backend.WireGuard == nil || s.gatewaySA == "" || len(s.rbac) != 3 {
		return s, fmt.Errorf("%s: want a wireguard LoadBalancer and the gateways' ServiceAccount, Role and RoleBinding", wgSampleFile)
	}
	return s, nil
}

// manifestFile is the sample's static pod file: the one the bootstrap writes into kubeadm's
// static pod directory.
func (s wgSample) manifestFile() (string, error) {
	for _, f := range s.files {
		if filepath.Dir(f.Path) == "/etc/kubernetes/manifests" {
			return f.Path, nil
		}
	}
	return "", fmt.Errorf("%s: no file in /etc/kubernetes/manifests", wgSampleFile)
}

// writeGatewayKubeconfig writes the kubeconfig the sample tells gateway hosts to use: the
// gateways' ServiceAccount (a token from the TokenRequest API, nothing more), pointing at
// mgmtAPIListen.
func writeGatewayKubeconfig(ctx context.Context, cs kubernetes.Interface, caData []byte, ns, sa, path string) error {
	tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa, &authv1.TokenRequest{
		Spec: authv1.TokenRequestSpec{ExpirationSeconds: ptr.To(int64(3600))}}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("token for ServiceAccount %s/%s: %w", ns, sa, err)
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["management"] = &clientcmdapi.Cluster{Server: "https://" + mgmtAPIListen, CertificateAuthorityData: caData}
	kc.AuthInfos[sa] = &clientcmdapi.AuthInfo{Token: tr.Status.Token}
	kc.Contexts["management"] = &clientcmdapi.Context{Cluster: "management", AuthInfo: sa, Namespace: ns}
	kc.CurrentContext = "management"
	return clientcmd.WriteToFile(*kc, path)
}

// gatewayHost is one gateway host of the lab running `caplb gateway --from-secret`.
type gatewayHost struct {
	name string // the gateway's name in spec.backend.wireguard.gateways
	addr netip.Addr
	ns   *lab.Netns
	argv []string
	proc *lab.Process
}

func (h *gatewayHost) start() error {
	p, err := h.ns.Start(h.name, h.argv, nil)
	h.proc = p
	return err
}

// machine is one control-plane machine behind the NAT: booted from the bootstrap Secret.
type machine struct {
	node string // its Node's name (and hostname)
	ns   *lab.Netns
	addr netip.Addr
	root string
}

// bootMember does on a machine what cloud-init, kubeadm and the kubelet would: writes the
// bootstrap files (the sample's files[] from the bootstrap Secret), the API server's
// kubeadm-shaped serving certificate, starts the stand-in API server on the API port and the
// agent's static pod through the lab's kubelet (podrun) exactly as the rendered manifest says.
func bootMember(l *lab.Lab, bins lifecycle.Binaries, ca *testpki.CA, s wgSample, m *machine, boot *corev1.Secret,
	endpointHost string) error {
	dir := filepath.Join(l.Dir(), "machines", m.node)
	m.root = filepath.Join(dir, "root")
	rootfs := filepath.Join(dir, "rootfs") // where podrun builds the container's root
	if err := os.MkdirAll(rootfs, 0o755); err != nil {
		return err
	}
	if err := lab.WriteBootFiles(m.root, s.files, boot); err != nil {
		return fmt.Errorf("%s: %w", m.node, err)
	}
	crt, key, err := ca.IssueServing(dir, "apiserver", m.node, m.addr.String(), endpointHost)
	if err != nil {
		return err
	}
	if _, err := m.ns.Start(m.node+"-apiserver", []string{bins.Standin, "-name", m.node, "-api-listen", ":6443",
		"-cert", crt, "-key", key}, nil); err != nil {
		return err
	}
	manifest, err := s.manifestFile()
	if err != nil {
		return err
	}
	_, err = m.ns.Start(m.node+"-agent", []string{"unshare", "--mount", "--uts", "--propagation", "private",
		bins.Podrun, "-root", m.root, "-rootfs", rootfs, "-manifest", manifest,
		"-hostname", m.node, "-image", harness.AgentImage + "=" + bins.Agent}, nil)
	return err
}

// publicClient is a client on the public side: HTTPS to https://<endpoint host>:<port>, the
// name resolved to the gateway addresses given (tried in order, as a client tries DNS records),
// verifying the cluster CA and the endpoint's name as kubeadm's clients do.
type publicClient struct {
	ns    *lab.Netns
	roots *x509.CertPool
	url   string
}

func newPublicClient(ns *lab.Netns, caPEM []byte, ep lbv1.APIEndpoint) publicClient {
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(caPEM)
	return publicClient{ns: ns, roots: roots,
		url: "https://" + net.JoinHostPort(ep.Host, strconv.Itoa(int(ep.Port))) + "/version"}
}

// via returns an HTTP client whose connections go to the gateways at addrs (host:port).
func (c publicClient) via(keepAlive bool, addrs ...string) *http.Client {
	dial := func(ctx context.Context, _, _ string) (net.Conn, error) {
		var errs []error
		for _, a := range addrs {
			dctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
			conn, err := c.ns.DialContext(dctx, "tcp", a)
			cancel()
			if err == nil {
				return conn, nil
			}
			errs = append(errs, err)
		}
		return nil, errors.Join(errs...)
	}
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		DialContext: dial, DisableKeepAlives: !keepAlive, MaxIdleConnsPerHost: 1,
		TLSClientConfig: &tls.Config{RootCAs: c.roots},
	}}
}

// node does one request and returns the node that answered.
func (c publicClient) node(hc *http.Client) (string, error) {
	resp, err := hc.Get(c.url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	// Read to the end: only then may a kept-alive connection be reused (and stay open).
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: %s", c.url, resp.Status)
	}
	n := resp.Header.Get("X-Caplb-Lab-Node")
	if n == "" {
		return "", fmt.Errorf("GET %s: no node header", c.url)
	}
	return n, nil
}

// reportOf reads gateway gw's report ConfigMap (<secret>-<gw>).
func reportOf(ctx context.Context, cs kubernetes.Interface, ns, secret, gw string) (wgapi.Report, error) {
	cm, err := cs.CoreV1().ConfigMaps(ns).Get(ctx, secret+"-"+gw, metav1.GetOptions{})
	if err != nil {
		return wgapi.Report{}, err
	}
	return wgapi.ParseReport([]byte(cm.Data[wgapi.ReportKey]))
}

// memberOf is node's entry in a report (zero when the gateway does not know it).
func memberOf(r wgapi.Report, node string) (wgapi.MemberStatus, bool) {
	for _, m := range r.Status.Members {
		if m.Node == node {
			return m, true
		}
	}
	return wgapi.MemberStatus{}, false
}

func apiHostPort(host string) (string, error) {
	u, err := url.Parse(host)
	if err != nil {
		return "", err
	}
	if !strings.Contains(u.Host, ":") {
		return "", fmt.Errorf("API server URL %s has no port", host)
	}
	return u.Host, nil
}
