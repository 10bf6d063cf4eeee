package agent

import (
	"context"
	"net"
	"strconv"
	"syscall"
	"testing"
	"time"

	agentv1 "github.com/caplb/caplb/api/agent/v1alpha1"

	"github.com/go-logr/logr"
	. "github.com/onsi/gomega"
)

// stalledListener returns the address of a local listener whose accept queue is full (backlog
// 0, one connection queued, nothing accepting): Linux drops further SYNs, so a connect hangs
// until its timeout, like a wedged ingress controller.
func stalledListener(t *testing.T) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(sa.(*syscall.SockaddrInet4).Port))
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		t.Fatalf("filling the accept queue: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return addr
}

// TestHealthTimeouts: a check that gets no answer fails after health.timeout, for tcp (connect
// never completes) and http (connected, no response) alike.
func TestHealthTimeouts(t *testing.T) {
	stalled := stalledListener(t)
	for _, tc := range []struct {
		name string
		cfg  agentv1.HealthConfig
	}{
		{"tcp", agentv1.HealthConfig{Type: "tcp", Address: stalled}},
		{"http", agentv1.HealthConfig{Type: "http", URL: "http://" + stalled + "/healthz"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			tc.cfg.Timeout.Duration, tc.cfg.Rise, tc.cfg.Fall = 200*time.Millisecond, 1, 1
			h, err := newHealthChecker(tc.cfg, logr.Discard())
			g.Expect(err).NotTo(HaveOccurred())
			start := time.Now()
			ok, detail := h.check(context.Background())
			g.Expect(ok).To(BeFalse(), detail)
			g.Expect(detail).To(MatchRegexp("(?i)timeout"))
			g.Expect(time.Since(start)).To(And(BeNumerically(">=", 150*time.Millisecond), BeNumerically("<", time.Second)))
		})
	}
}
