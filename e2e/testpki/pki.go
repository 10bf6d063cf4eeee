// Package testpki is the one test PKI of the e2e suites: a cluster CA and API server serving
// certificates shaped like kubeadm's (its DNS names, the service IP, the node's name and
// addresses, and no loopback address), and webhook serving certificates laid out as
// cert-manager's Secret is mounted. Portable: unit tests without root use it too.
package testpki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// PKI is a CA and an API server serving certificate shaped like kubeadm's:
// DNS names kubernetes, kubernetes.default, kubernetes.default.svc,
// kubernetes.default.svc.cluster.local, the service IP 10.96.0.1 and the
// hosts given (node names, node addresses, the VIP) — and, as on a real
// node, no 127.0.0.1, ::1 or localhost. Clients that reach the server on
// loopback verify the name "kubernetes" (health.serverName's default).
type PKI struct {
	CAFile, CertFile, KeyFile string
}

// KubeadmServingDNSNames are the DNS SANs kubeadm puts on every API server certificate.
var KubeadmServingDNSNames = []string{"kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"}

// WriteTestPKI writes a fresh CA and server certificate into dir; hosts are
// further SANs (IP addresses or DNS names).
func WriteTestPKI(dir string, hosts ...string) (PKI, error) {
	ca, err := NewCA(dir)
	if err != nil {
		return PKI{}, err
	}
	p := PKI{CAFile: ca.CertFile}
	p.CertFile, p.KeyFile, err = ca.IssueServing(dir, "server", hosts...)
	return p, err
}

// CA is a lab certificate authority (a cluster CA: kubeadm's /etc/kubernetes/pki/ca.crt).
type CA struct {
	// CertFile is the CA certificate (PEM); PEM is its content.
	CertFile string
	PEM      []byte
	cert     *x509.Certificate
	key      *ecdsa.PrivateKey
}

// NewCA writes a fresh CA certificate to dir/ca.crt.
func NewCA(dir string) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "caplb-lab-ca"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("testpki: CA: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	ca := &CA{CertFile: filepath.Join(dir, "ca.crt"), PEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		cert: cert, key: key}
	// Modes as kubeadm writes them: certificates 0644, keys 0600.
	if err := os.WriteFile(ca.CertFile, ca.PEM, 0o644); err != nil {
		return nil, err
	}
	return ca, nil
}

// IssueServing writes an API server serving certificate and key shaped like kubeadm's (see
// PKI) to dir/<name>.crt and dir/<name>.key; hosts are further SANs: kubeadm's own are the
// node's name and its advertise address (and the controlPlaneEndpoint's host, when set).
func (ca *CA) IssueServing(dir, name string, hosts ...string) (certFile, keyFile string, err error) {
	dns := append([]string(nil), KubeadmServingDNSNames...)
	ips := []net.IP{net.ParseIP("10.96.0.1")}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			if ip.IsLoopback() {
				return "", "", fmt.Errorf("testpki: %s: kubeadm's certificates carry no loopback address; neither do the lab's", h)
			}
			ips = append(ips, ip)
		} else {
			dns = append(dns, h)
		}
	}
	certPEM, keyPEM, err := ca.issue("kube-apiserver", dns, ips)
	if err != nil {
		return "", "", fmt.Errorf("testpki: %s: %w", name, err)
	}
	certFile, keyFile = filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	if err := os.WriteFile(certFile, certPEM, 0o644); err != nil {
		return "", "", err
	}
	if err := os.WriteFile(keyFile, keyPEM, 0o600); err != nil {
		return "", "", err
	}
	return certFile, keyFile, nil
}

// TLS is a serving certificate as a kubernetes.io/tls Secret holds it (cert-manager adds ca.crt).
type TLS struct {
	Cert, Key, CA []byte
}

// IssueWebhookServing issues a serving certificate for exactly hosts (DNS names or IP addresses,
// loopback allowed: a webhook server in the test process) and, when dir is not empty, writes it
// as a pod mounts cert-manager's Secret: dir/tls.crt, dir/tls.key, dir/ca.crt.
func (ca *CA) IssueWebhookServing(dir string, hosts ...string) (TLS, error) {
	var dns []string
	var ips []net.IP
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			ips = append(ips, ip)
		} else {
			dns = append(dns, h)
		}
	}
	certPEM, keyPEM, err := ca.issue("caplb-webhook", dns, ips)
	if err != nil {
		return TLS{}, fmt.Errorf("testpki: webhook serving certificate: %w", err)
	}
	t := TLS{Cert: certPEM, Key: keyPEM, CA: ca.PEM}
	if dir == "" {
		return t, nil
	}
	for name, data := range map[string][]byte{"tls.crt": t.Cert, "tls.key": t.Key, "ca.crt": t.CA} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			return TLS{}, err
		}
	}
	return t, nil
}

// issue signs a serving certificate (kubeadm's key usages for the apiserver's) and returns it
// and its key in PEM.
func (ca *CA) issue(cn string, dns []string, ips []net.IP) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	now := time.Now()
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: cn},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: ips, DNSNames: dns,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return nil, nil, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), nil
}
