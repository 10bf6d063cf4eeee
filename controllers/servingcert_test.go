package controllers

import (
	"context"
	"crypto/x509"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

// TestTLSCertChecker: the handshake verifies the serving certificate for the name asked, against
// the roots given (httptest's certificate is for 127.0.0.1, ::1 and example.com).
func TestTLSCertChecker(t *testing.T) {
	srv := httptest.NewTLSServer(http.NotFoundHandler())
	defer srv.Close()
	roots := x509.NewCertPool()
	roots.AddCert(srv.Certificate())
	addr := srv.Listener.Addr().String()
	c := tlsCertChecker{timeout: 5 * time.Second}
	ctx := context.Background()
	tests := []struct {
		name, serverName string
		roots            *x509.CertPool
		wantErr          string
	}{
		{"a DNS SAN", "example.com", roots, ""},
		{"an IP SAN", "127.0.0.1", roots, ""},
		{"a name the certificate lacks", "api.prod.example.com", roots, "certificate is valid for"},
		{"an address the certificate lacks", "10.0.0.50", roots, "10.0.0.50"},
		{"another CA", "example.com", x509.NewCertPool(), "certificate signed by unknown authority"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			err := c.Verify(ctx, addr, tt.serverName, tt.roots)
			if tt.wantErr == "" {
				g.Expect(err).NotTo(HaveOccurred())
				return
			}
			g.Expect(err).To(MatchError(ContainSubstring(tt.wantErr)))
		})
	}
}
