//go:build linux

package kubeadm

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/cri-streaming/pkg/streaming/portforward"

	"github.com/caplb/caplb/e2e/lab"
)

// KubeletPort is the kubelet's HTTPS port, where the API server reaches a node for logs, exec
// and port-forward (Node.status.daemonEndpoints.kubeletEndpoint).
const KubeletPort = 10250

// KubeletAPI is the kubelet's HTTPS API on a lab machine, as far as a control plane's clients
// use it: POST /portForward/{namespace}/{pod}, which the API server proxies `pods/portforward`
// to. KubeadmControlPlane reaches every etcd member that way (its etcd client dials
// kube-system/etcd-<node>:2379 through the workload API server, i.e. through the endpoint).
//
// It authenticates and authorizes as a kubeadm node's kubelet does (kubeadm's KubeletConfiguration:
// anonymous off, x509 client certificates from the cluster CA, webhook authorization): a client
// certificate the CA did not sign gets 401, and each request is a SubjectAccessReview for
// nodes/proxy on this node, sent with the kubelet's own credential — what a node's credential may
// do. Only the static pods whose manifests the machine has are forwarded to, on the machine's
// loopback (they use the host network).
type KubeletAPI struct {
	ns      *lab.Netns
	machine Machine
	node    kubernetes.Interface
	ln      net.Listener
	srv     *http.Server

	mu    sync.Mutex
	authz map[string]authzDecision
}

type authzDecision struct {
	allowed bool
	reason  string
	until   time.Time
}

// The kubelet's webhook authorization cache (KubeletConfiguration's defaults).
const (
	authorizedTTL   = 5 * time.Minute
	unauthorizedTTL = 30 * time.Second
)

// StartKubeletAPI serves the kubelet's API on m's address in ns. node is the kubelet's client
// (kubelet.conf: system:node:<name>), for its SubjectAccessReviews.
func StartKubeletAPI(ns *lab.Netns, m Machine, node kubernetes.Interface) (*KubeletAPI, error) {
	ca, err := os.ReadFile(m.Path(PKIDir + "/ca.crt"))
	if err != nil {
		return nil, fmt.Errorf("kubelet API of %s: the client CA: %w", m.Name, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return nil, fmt.Errorf("kubelet API of %s: no certificate in %s", m.Name, PKIDir+"/ca.crt")
	}
	serving, err := selfSignedServing(m)
	if err != nil {
		return nil, fmt.Errorf("kubelet API of %s: %w", m.Name, err)
	}
	k := &KubeletAPI{ns: ns, machine: m, node: node, authz: map[string]authzDecision{}}
	if err := ns.Do(func() error {
		ln, err := net.Listen("tcp", netip.AddrPortFrom(m.Addr, KubeletPort).String())
		k.ln = ln
		return err
	}); err != nil {
		return nil, fmt.Errorf("kubelet API of %s: %w", m.Name, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/portForward/{namespace}/{pod}", k.portForward)
	mux.HandleFunc("/portForward/{namespace}/{pod}/{uid}", k.portForward)
	k.srv = &http.Server{Handler: k.authenticated(mux), ReadHeaderTimeout: 10 * time.Second,
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{serving}, ClientAuth: tls.VerifyClientCertIfGiven,
			ClientCAs: pool, MinVersion: tls.VersionTLS12}}
	go func() { _ = k.srv.ServeTLS(k.ln, "", "") }()
	return k, nil
}

// Addr is where the API listens (the machine's address, KubeletPort).
func (k *KubeletAPI) Addr() string { return k.ln.Addr().String() }

// Close stops the API and ends the forwarded streams (the kubelet stopped).
func (k *KubeletAPI) Close() error {
	err := k.srv.Close()
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

// authenticated lets through only requests whose client certificate the cluster CA signed and
// that the cluster authorizes, as the kubelet's authn/authz filter does.
func (k *KubeletAPI) authenticated(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS == nil || len(r.TLS.VerifiedChains) == 0 {
			http.Error(w, "Unauthorized", http.StatusUnauthorized)
			return
		}
		cert := r.TLS.VerifiedChains[0][0]
		user, groups := cert.Subject.CommonName, cert.Subject.Organization
		verb := kubeletVerb(r.Method)
		ok, reason, err := k.authorize(r.Context(), user, groups, verb)
		if err != nil {
			http.Error(w, "Authorization error (user="+user+", verb="+verb+", resource=nodes, subresource=proxy): "+err.Error(),
				http.StatusInternalServerError)
			return
		}
		if !ok {
			http.Error(w, fmt.Sprintf("Forbidden (user=%s, verb=%s, resource=nodes, subresource=proxy): %s", user, verb, reason),
				http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// kubeletVerb is the verb the kubelet authorizes an HTTP method as.
func kubeletVerb(method string) string {
	switch method {
	case http.MethodPost:
		return "create"
	case http.MethodPut:
		return "update"
	case http.MethodPatch:
		return "patch"
	case http.MethodDelete:
		return "delete"
	default:
		return "get"
	}
}

// authorize asks the cluster whether user may verb nodes/proxy on this node, caching the answer
// as the kubelet's webhook authorizer does.
func (k *KubeletAPI) authorize(ctx context.Context, user string, groups []string, verb string) (bool, string, error) {
	key := user + "\x00" + strings.Join(groups, ",") + "\x00" + verb
	k.mu.Lock()
	d, ok := k.authz[key]
	k.mu.Unlock()
	if ok && time.Now().Before(d.until) {
		return d.allowed, d.reason, nil
	}
	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User: user, Groups: groups,
		ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: verb, Resource: "nodes", Subresource: "proxy", Name: k.machine.Name},
	}}
	got, err := k.node.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
	if err != nil {
		return false, "", fmt.Errorf("subject access review: %w", err)
	}
	d = authzDecision{allowed: got.Status.Allowed, reason: got.Status.Reason, until: time.Now().Add(unauthorizedTTL)}
	if d.allowed {
		d.until = time.Now().Add(authorizedTTL)
	}
	k.mu.Lock()
	k.authz[key] = d
	k.mu.Unlock()
	return d.allowed, d.reason, nil
}

// portForward serves a port-forward into one of the machine's static pods.
func (k *KubeletAPI) portForward(w http.ResponseWriter, r *http.Request) {
	ns, pod := r.PathValue("namespace"), r.PathValue("pod")
	if _, err := k.staticPod(ns, pod); err != nil {
		http.Error(w, err.Error(), http.StatusNotFound)
		return
	}
	opts, err := portforward.NewV4Options(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	portforward.ServePortForward(w, r, k, pod, r.PathValue("uid"), opts, 4*time.Hour, 30*time.Second, portforward.SupportedProtocols)
}

// staticPod finds the static pod a mirror Pod's name (<pod>-<node>) stands for on this machine.
func (k *KubeletAPI) staticPod(namespace, name string) (string, error) {
	component, ok := strings.CutSuffix(name, "-"+k.machine.Name)
	if !ok || namespace != "kube-system" {
		return "", fmt.Errorf("pod %q in namespace %q not found on node %s", name, namespace, k.machine.Name)
	}
	manifest := ManifestsDir + "/" + component + ".yaml"
	if _, err := os.Stat(k.machine.Path(manifest)); err != nil {
		return "", fmt.Errorf("pod %q in namespace %q not found on node %s", name, namespace, k.machine.Name)
	}
	return manifest, nil
}

// PortForward copies between stream and port on the machine's loopback (the static pods use the
// host network), until either side ends.
func (k *KubeletAPI) PortForward(ctx context.Context, pod, _ string, port int32, stream io.ReadWriteCloser) error {
	defer stream.Close()
	conn, err := k.ns.DialContext(ctx, "tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(int(port))))
	if err != nil {
		return fmt.Errorf("port-forward to %s port %d: %w", pod, port, err)
	}
	defer conn.Close()
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(conn, stream); done <- struct{}{} }()
	go func() { _, _ = io.Copy(stream, conn); done <- struct{}{} }()
	select {
	case <-done:
	case <-ctx.Done():
	}
	return nil
}

// selfSignedServing is the serving certificate a kubelet makes itself when none is configured
// (kubeadm's default): self-signed, for the node's name and address. The API server does not
// verify it (kubeadm sets no --kubelet-certificate-authority).
func selfSignedServing(m Machine) (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(now.UnixNano()),
		Subject:   pkix.Name{CommonName: fmt.Sprintf("%s@%d", m.Name, now.Unix())},
		NotBefore: now.Add(-time.Minute), NotAfter: now.Add(365 * 24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames: []string{m.Name}, IPAddresses: []net.IP{m.Addr.AsSlice()}, IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}
