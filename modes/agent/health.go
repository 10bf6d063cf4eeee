package agent

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync"
	"time"

	agentv1 "github.com/caplb/caplb/api/agent/v1alpha1"

	"github.com/go-logr/logr"
)

// healthChecker polls the local API server and turns its answers into a
// debounced healthy/unhealthy state (rise/fall thresholds).
type healthChecker struct {
	cfg    agentv1.HealthConfig
	client *http.Client
	log    logr.Logger
	// lastLog rate-limits the log of a failing check (logEvery).
	lastLog time.Time

	mu      sync.Mutex
	healthy bool
	detail  string
	streak  int // >0 consecutive successes, <0 consecutive failures
}

// logEvery bounds how often a failing health check is logged.
const logEvery = 10 * time.Second

func newHealthChecker(cfg agentv1.HealthConfig, log logr.Logger) (*healthChecker, error) {
	// ServerName: kubeadm's, k3s's and RKE2's serving certificates carry
	// "kubernetes" but not 127.0.0.1; verifying against the URL's IP would
	// fail every check on a real node.
	tlsCfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: cfg.ServerName}
	if cfg.CAFile != "" {
		pem, err := os.ReadFile(cfg.CAFile)
		if err != nil {
			return nil, fmt.Errorf("health.caFile: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("health.caFile: %s holds no PEM certificate", cfg.CAFile)
		}
		tlsCfg.RootCAs = pool
	} else {
		tlsCfg.InsecureSkipVerify = cfg.InsecureSkipVerify //nolint:gosec // explicit opt-in, validated
	}
	return &healthChecker{
		cfg: cfg, log: log,
		// A fresh connection per check: a reused one could hide a server
		// that no longer accepts connections.
		client: &http.Client{Timeout: cfg.Timeout.Duration, Transport: &http.Transport{
			TLSClientConfig: tlsCfg, DisableKeepAlives: true, Proxy: nil,
		}},
		detail: "no check yet",
	}, nil
}

// run checks every interval until ctx ends, calling changed after each state
// change.
func (h *healthChecker) run(ctx context.Context, changed func()) {
	t := time.NewTicker(h.cfg.Interval.Duration)
	defer t.Stop()
	for {
		ok, detail := h.check(ctx)
		if h.record(ok, detail) {
			changed()
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (h *healthChecker) check(ctx context.Context) (bool, string) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, h.cfg.URL, nil)
	if err != nil {
		return false, err.Error()
	}
	resp, err := h.client.Do(req)
	if err != nil {
		return false, err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 256))
	if resp.StatusCode != http.StatusOK {
		return false, fmt.Sprintf("%s answered %d: %s", h.cfg.URL, resp.StatusCode, body)
	}
	return true, fmt.Sprintf("%s answered 200", h.cfg.URL)
}

// record applies the thresholds; it reports whether the state flipped.
func (h *healthChecker) record(ok bool, detail string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.detail = detail
	if !ok && (h.streak >= 0 || time.Since(h.lastLog) >= logEvery) {
		// The first failure after a success, then at most every logEvery:
		// a check that fails from the start must show in the log, not only
		// in /status.
		h.lastLog = time.Now()
		h.log.Info("health check failed", "url", h.cfg.URL, "serverName", h.cfg.ServerName, "error", detail)
	}
	switch {
	case ok && h.streak >= 0:
		h.streak++
	case ok:
		h.streak = 1
	case h.streak <= 0:
		h.streak--
	default:
		h.streak = -1
	}
	was := h.healthy
	if !h.healthy && h.streak >= h.cfg.Rise {
		h.healthy = true
	}
	if h.healthy && -h.streak >= h.cfg.Fall {
		h.healthy = false
	}
	return was != h.healthy
}

func (h *healthChecker) state() (bool, string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.healthy, h.detail
}
