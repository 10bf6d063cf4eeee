package agent

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	agentv1 "github.com/caplb/caplb/api/agent/v1alpha1"

	"context"

	"github.com/go-logr/logr/funcr"
	. "github.com/onsi/gomega"
)

// kubeadmLikeServer serves /readyz on 127.0.0.1 with a certificate shaped
// like kubeadm's: DNS kubernetes.* and the service IP, no loopback SAN. It
// returns the URL and the CA file.
func kubeadmLikeServer(t *testing.T) (string, string) {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "kubernetes"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	der, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{SerialNumber: big.NewInt(2),
		Subject: pkix.Name{CommonName: "kube-apiserver"}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, KeyUsage: x509.KeyUsageDigitalSignature,
		DNSNames:    []string{"cp-1", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"},
		IPAddresses: []net.IP{net.ParseIP("10.96.0.1"), net.ParseIP("192.0.2.11")}}, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) }))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}}
	srv.Config.ErrorLog = nil
	srv.StartTLS()
	t.Cleanup(srv.Close)
	caFile := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	return srv.URL + "/readyz", caFile
}

// TestHealthServerName: on a kubeadm node the check reaches 127.0.0.1, whose
// certificate does not name it; verifying "kubernetes" (the default) passes,
// verifying the URL's host fails, and the failure is logged, rate-limited.
func TestHealthServerName(t *testing.T) {
	url, caFile := kubeadmLikeServer(t)
	for _, tc := range []struct {
		name, serverName string
		ok               bool
	}{
		{"default serverName kubernetes", "kubernetes", true},
		{"the URL's IP (the old behaviour)", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			var lines []string
			log := funcr.New(func(prefix, args string) { lines = append(lines, args) }, funcr.Options{})
			h, err := newHealthChecker(agentv1.HealthConfig{URL: url, CAFile: caFile, ServerName: tc.serverName,
				Timeout: agentv1.Duration{Duration: time.Second}, Rise: 1, Fall: 1}, log)
			g.Expect(err).NotTo(HaveOccurred())
			for i := 0; i < 3; i++ {
				ok, detail := h.check(context.Background())
				h.record(ok, detail)
				g.Expect(ok).To(Equal(tc.ok), detail)
			}
			if tc.ok {
				g.Expect(lines).To(BeEmpty())
			} else {
				g.Expect(lines).To(HaveLen(1), "three failures in a row, logged once (rate-limited)")
				g.Expect(lines[0]).To(ContainSubstring("127.0.0.1"))
				g.Expect(strings.Join(lines, "")).To(ContainSubstring("certificate"))
			}
		})
	}
	g := NewWithT(t)
	c, err := agentv1.Parse([]byte(validYAML))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(c.Health.ServerName).To(Equal("kubernetes"), "the default for an IP URL")
}
