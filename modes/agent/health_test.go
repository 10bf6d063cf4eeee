package agent

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	agentv1 "github.com/caplb/caplb/api/agent/v1alpha1"

	"github.com/go-logr/logr"
	. "github.com/onsi/gomega"
)

func TestHealthThresholds(t *testing.T) {
	g := NewWithT(t)
	var fail atomic.Bool
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if fail.Load() {
			http.Error(w, "[-]etcd failed", http.StatusInternalServerError)
			return
		}
		_, _ = w.Write([]byte("ok"))
	}))
	defer srv.Close()
	h, err := newHealthChecker(agentv1.HealthConfig{URL: srv.URL + "/readyz", InsecureSkipVerify: true,
		Timeout: agentv1.Duration{Duration: 1e9}, Rise: 2, Fall: 3}, logr.Discard())
	g.Expect(err).NotTo(HaveOccurred())
	step := func() bool {
		ok, detail := h.check(context.Background())
		return h.record(ok, detail)
	}
	healthy := func() bool { ok, _ := h.state(); return ok }

	g.Expect(step()).To(BeFalse())
	g.Expect(healthy()).To(BeFalse(), "one success is below rise")
	g.Expect(step()).To(BeTrue(), "the second success flips the state")
	g.Expect(healthy()).To(BeTrue())
	fail.Store(true)
	g.Expect(step()).To(BeFalse())
	g.Expect(step()).To(BeFalse())
	g.Expect(healthy()).To(BeTrue(), "two failures are below fall")
	g.Expect(step()).To(BeTrue())
	g.Expect(healthy()).To(BeFalse())
	_, detail := h.state()
	g.Expect(detail).To(ContainSubstring("answered 500"))
}

func TestHealthVerifiesTLS(t *testing.T) {
	g := NewWithT(t)
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
	defer srv.Close()
	// Not insecure and no CA: the self-signed server is refused.
	h, err := newHealthChecker(agentv1.HealthConfig{URL: srv.URL, Timeout: agentv1.Duration{Duration: 1e9}, Rise: 1, Fall: 1}, logr.Discard())
	g.Expect(err).NotTo(HaveOccurred())
	ok, detail := h.check(context.Background())
	g.Expect(ok).To(BeFalse())
	g.Expect(detail).To(ContainSubstring("certificate"))
}
