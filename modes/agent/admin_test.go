package agent

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
)

// TestAdminSplit: the TCP listener is read-only (a hostNetwork pod that
// reaches it cannot hand the VIP over); the control socket is mode 0600 and
// takes quiesce requests.
func TestAdminSplit(t *testing.T) {
	g := NewWithT(t)
	a, _, _, _ := newTestAgent(t, 0)
	step(a, time.Now())
	reg := prometheus.NewRegistry()

	ro := httptest.NewServer(readOnlyHandler(a, reg))
	defer ro.Close()
	for _, m := range []string{http.MethodPost, http.MethodDelete} {
		req, _ := http.NewRequest(m, ro.URL+"/quiesce", nil)
		resp, err := http.DefaultClient.Do(req)
		g.Expect(err).NotTo(HaveOccurred())
		resp.Body.Close()
		g.Expect(resp.StatusCode).To(Equal(http.StatusNotFound), "%s /quiesce on the TCP listener", m)
	}
	for _, p := range []string{"/status", "/metrics", "/healthz"} {
		resp, err := http.Get(ro.URL + p)
		g.Expect(err).NotTo(HaveOccurred())
		resp.Body.Close()
		g.Expect(resp.StatusCode).To(Equal(http.StatusOK), p)
	}
	g.Expect(a.quiesceC).To(BeEmpty())

	sock := filepath.Join(t.TempDir(), "run", "agent.sock")
	stop, err := serveControl(sock, controlHandler(a, reg))
	g.Expect(err).NotTo(HaveOccurred())
	defer stop()
	fi, err := os.Stat(sock)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(fi.Mode().Perm()).To(Equal(os.FileMode(0o600)))
	di, err := os.Stat(filepath.Dir(sock))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(di.Mode().Perm()).To(Equal(os.FileMode(0o700)))
	c := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	req, _ := http.NewRequest(http.MethodPost, "http://agent/quiesce", nil)
	resp, err := c.Do(req)
	g.Expect(err).NotTo(HaveOccurred())
	resp.Body.Close()
	g.Expect(resp.StatusCode).To(Equal(http.StatusAccepted))
	g.Expect(<-a.quiesceC).To(Equal(quiesceRequest{source: "admin", reason: "admin request"}))

	// A restart replaces the stale socket file.
	stop()
	stop2, err := serveControl(sock, controlHandler(a, reg))
	g.Expect(err).NotTo(HaveOccurred())
	stop2()
}
