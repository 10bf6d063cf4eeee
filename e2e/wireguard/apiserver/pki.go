// Package apiserver is the WireGuard lab's stand-in API server: a cluster CA issuing
// kubeadm-shaped serving certificates, and the HTTP surface the stand-in serves. Portable (the
// loopback tests in modes/wireguard use it without root).
package apiserver

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

// CA is a cluster CA that issues API server certificates shaped like kubeadm's.
type CA struct {
	File string // PEM of the CA certificate
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

// NewCA writes a fresh CA certificate into dir/ca.crt.
func NewCA(dir string) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "kubernetes"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("CA: %w", err)
	}
	cert, _ := x509.ParseCertificate(der)
	ca := &CA{File: filepath.Join(dir, "ca.crt"), cert: cert, key: key}
	if err := os.WriteFile(ca.File, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		return nil, err
	}
	return ca, nil
}

// APIServerCert writes dir/<node>.crt and dir/<node>.key: the SANs kubeadm v1.36's
// `init phase certs apiserver` puts there (node name, kubernetes, kubernetes.default,
// kubernetes.default.svc, kubernetes.default.svc.cluster.local, the service VIP 10.96.0.1 and the
// node's IP), and, like kubeadm's, no 127.0.0.1 and no tunnel address: whoever dials through a
// tunnel or loopback must verify the name "kubernetes".
func (ca *CA) APIServerCert(dir, node string, nodeIP net.IP) (certFile, keyFile string, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", err
	}
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: "kube-apiserver"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:    []string{node, "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"},
		IPAddresses: []net.IP{net.ParseIP("10.96.0.1"), nodeIP},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return "", "", fmt.Errorf("apiserver cert for %s: %w", node, err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return "", "", err
	}
	certFile, keyFile = filepath.Join(dir, node+".crt"), filepath.Join(dir, node+".key")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		return "", "", err
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		return "", "", err
	}
	return certFile, keyFile, nil
}
