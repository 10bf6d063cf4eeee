package agent

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"sync"
	"time"

	agentv1 "github.com/caplb/caplb/api/agent/v1alpha1"

	"github.com/go-logr/logr"
)

// healthChecker runs the member's health check and turns its answers into a
// debounced healthy/unhealthy state (rise/fall thresholds). The check itself
// is a probe, one per health.type.
type healthChecker struct {
	cfg   agentv1.HealthConfig
	probe probe
	// target names what is checked, for the log (key/value pairs).
	target []any
	log    logr.Logger
	// lastLog rate-limits the log of a failing check (logEvery).
	lastLog time.Time

	mu      sync.Mutex
	healthy bool
	detail  string
	streak  int // >0 consecutive successes, <0 consecutive failures
}

// probe runs one check: whether it passed, and a detail for /status and the log.
type probe func(ctx context.Context) (ok bool, detail string)

// logEvery bounds how often a failing health check is logged.
const logEvery = 10 * time.Second

func newHealthChecker(cfg agentv1.HealthConfig, log logr.Logger) (*healthChecker, error) {
	h := &healthChecker{cfg: cfg, log: log, detail: "no check yet"}
	switch cfg.Type {
	case agentv1.HealthHTTPS, "":
		tlsCfg, err := healthTLS(cfg)
		if err != nil {
			return nil, err
		}
		h.probe = httpProbe(cfg, tlsCfg, func(code int) bool { return code == http.StatusOK })
		h.target = []any{"url", cfg.URL, "serverName", cfg.ServerName}
	case agentv1.HealthHTTP:
		h.probe = httpProbe(cfg, nil, func(code int) bool { return code >= 200 && code < 300 })
		h.target = []any{"url", cfg.URL}
	case agentv1.HealthTCP:
		h.probe = tcpProbe(cfg.Address, cfg.Timeout.Duration)
		h.target = []any{"address", cfg.Address}
	default:
		return nil, fmt.Errorf("health.type: %q is not a health check type", cfg.Type)
	}
	return h, nil
}

// healthTLS builds the https check's TLS configuration.
func healthTLS(cfg agentv1.HealthConfig) (*tls.Config, error) {
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
	return tlsCfg, nil
}

// httpProbe GETs cfg.URL; healthy is the status codes that pass.
func httpProbe(cfg agentv1.HealthConfig, tlsCfg *tls.Config, healthy func(int) bool) probe {
	// A fresh connection per check: a reused one could hide a server
	// that no longer accepts connections.
	client := &http.Client{Timeout: cfg.Timeout.Duration, Transport: &http.Transport{
		TLSClientConfig: tlsCfg, DisableKeepAlives: true, Proxy: nil,
	}}
	return func(ctx context.Context) (bool, string) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, cfg.URL, nil)
		if err != nil {
			return false, err.Error()
		}
		resp, err := client.Do(req)
		if err != nil {
			return false, err.Error()
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 256))
		if !healthy(resp.StatusCode) {
			return false, fmt.Sprintf("%s answered %d: %s", cfg.URL, resp.StatusCode, body)
		}
		return true, fmt.Sprintf("%s answered %d", cfg.URL, resp.StatusCode)
	}
}

// tcpProbe opens (and closes) a fresh TCP connection to address.
func tcpProbe(address string, timeout time.Duration) probe {
	d := net.Dialer{Timeout: timeout}
	return func(ctx context.Context) (bool, string) {
		c, err := d.DialContext(ctx, "tcp", address)
		if err != nil {
			return false, err.Error()
		}
		_ = c.Close()
		return true, fmt.Sprintf("%s accepted a connection", address)
	}
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

func (h *healthChecker) check(ctx context.Context) (bool, string) { return h.probe(ctx) }

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
		h.log.Info("health check failed", slices.Concat(h.target, []any{"error", detail})...)
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
