package lab

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
	dns := append([]string(nil), KubeadmServingDNSNames...)
	ips := []net.IP{net.ParseIP("10.96.0.1")}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			if ip.IsLoopback() {
				return PKI{}, fmt.Errorf("lab pki: %s: kubeadm's certificates carry no loopback address; neither do the lab's", h)
			}
			ips = append(ips, ip)
		} else {
			dns = append(dns, h)
		}
	}
	p := PKI{CAFile: filepath.Join(dir, "ca.crt"), CertFile: filepath.Join(dir, "server.crt"), KeyFile: filepath.Join(dir, "server.key")}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return p, err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "caplb-lab-ca"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return p, fmt.Errorf("lab pki: CA: %w", err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return p, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "kube-apiserver"},
		// kubeadm's key usages for the apiserver serving certificate.
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: ips, DNSNames: dns,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		return p, fmt.Errorf("lab pki: server: %w", err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return p, err
	}
	for path, block := range map[string]*pem.Block{
		p.CAFile:   {Type: "CERTIFICATE", Bytes: caDER},
		p.CertFile: {Type: "CERTIFICATE", Bytes: der},
		p.KeyFile:  {Type: "EC PRIVATE KEY", Bytes: keyDER},
	} {
		if err := os.WriteFile(path, pem.EncodeToMemory(block), 0o600); err != nil {
			return p, err
		}
	}
	return p, nil
}
