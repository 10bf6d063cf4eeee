package agent

import (
	"context"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	agentv1 "github.com/caplb/caplb/api/agent/v1alpha1"

	"github.com/go-logr/logr"
	. "github.com/onsi/gomega"
)

// closedAddr returns a local address nothing listens on (a listener opened and closed).
func closedAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	return addr
}

// acceptAndClose accepts and closes every connection to l until it closes, reporting each.
func acceptAndClose(l net.Listener) <-chan struct{} {
	accepted := make(chan struct{}, 16)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
			select {
			case accepted <- struct{}{}:
			default:
			}
		}
	}()
	return accepted
}

// TestHealthProbeKinds runs each kind of check against real local listeners.
func TestHealthProbeKinds(t *testing.T) {
	status := func(code int) string {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(code) }))
		t.Cleanup(srv.Close)
		return srv.URL + "/healthz"
	}
	// slow answers after the check's timeout.
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-time.After(2 * time.Second):
		}
	}))
	t.Cleanup(slow.Close)
	// tlsSrv is an https server answering 204: a plain http check of it must fail, and an
	// https check wants 200 exactly (the API server's /readyz), as before.
	tlsSrv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(204) }))
	tlsSrv.Config.ErrorLog = log.New(io.Discard, "", 0)
	tlsSrv.StartTLS()
	t.Cleanup(tlsSrv.Close)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	acceptAndClose(l)

	cases := []struct {
		name   string
		cfg    agentv1.HealthConfig
		ok     bool
		detail string
	}{
		{"http 200", agentv1.HealthConfig{Type: "http", URL: status(200)}, true, "answered 200"},
		{"http 204 is 2xx", agentv1.HealthConfig{Type: "http", URL: status(204)}, true, "answered 204"},
		{"http 500", agentv1.HealthConfig{Type: "http", URL: status(500)}, false, "answered 500"},
		{"http 3xx is not 2xx", agentv1.HealthConfig{Type: "http", URL: status(304)}, false, "answered 304"},
		{"http refused", agentv1.HealthConfig{Type: "http", URL: "http://" + closedAddr(t) + "/healthz"}, false, "refused"},
		{"http timeout", agentv1.HealthConfig{Type: "http", URL: slow.URL, Timeout: agentv1.Duration{Duration: 100 * time.Millisecond}}, false, "Timeout"},
		{"http against a TLS server", agentv1.HealthConfig{Type: "http", URL: strings.Replace(tlsSrv.URL, "https", "http", 1)}, false, "answered 400"},
		{"https 204 is not 200", agentv1.HealthConfig{Type: "https", URL: tlsSrv.URL, InsecureSkipVerify: true}, false, "answered 204"},
		{"tcp accepts", agentv1.HealthConfig{Type: "tcp", Address: l.Addr().String()}, true, "accepted a connection"},
		{"tcp refused", agentv1.HealthConfig{Type: "tcp", Address: closedAddr(t)}, false, "refused"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			if tc.cfg.Timeout.Duration == 0 {
				tc.cfg.Timeout.Duration = time.Second
			}
			tc.cfg.Rise, tc.cfg.Fall = 1, 1
			h, err := newHealthChecker(tc.cfg, logr.Discard())
			g.Expect(err).NotTo(HaveOccurred())
			start := time.Now()
			ok, detail := h.check(context.Background())
			g.Expect(ok).To(Equal(tc.ok), detail)
			g.Expect(detail).To(ContainSubstring(tc.detail))
			g.Expect(time.Since(start)).To(BeNumerically("<", 1500*time.Millisecond), "the timeout bounds one check")
		})
	}
}

// TestHealthTCPFreshConnection: every tcp check opens a connection of its own, and rise/fall
// debounce it like the https check.
func TestHealthTCPFreshConnection(t *testing.T) {
	g := NewWithT(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	g.Expect(err).NotTo(HaveOccurred())
	addr := l.Addr().String()
	accepted := acceptAndClose(l)
	h, err := newHealthChecker(agentv1.HealthConfig{Type: "tcp", Address: addr,
		Timeout: agentv1.Duration{Duration: time.Second}, Rise: 2, Fall: 2}, logr.Discard())
	g.Expect(err).NotTo(HaveOccurred())
	step := func() bool {
		ok, detail := h.check(context.Background())
		return h.record(ok, detail)
	}
	healthy := func() bool { ok, _ := h.state(); return ok }

	g.Expect(step()).To(BeFalse(), "one success is below rise")
	g.Expect(step()).To(BeTrue())
	g.Expect(healthy()).To(BeTrue())
	g.Eventually(accepted).Should(HaveLen(2), "two checks, two connections")
	g.Expect(l.Close()).To(Succeed())
	g.Expect(step()).To(BeFalse(), "one failure is below fall")
	g.Expect(step()).To(BeTrue())
	g.Expect(healthy()).To(BeFalse())
	_, detail := h.state()
	g.Expect(detail).To(ContainSubstring("refused"))
}
