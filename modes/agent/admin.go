package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	agentv1 "github.com/caplb/caplb/api/agent/v1alpha1"
)

// readOnlyHandler serves the admin listener (admin.listen), which has no
// authentication and so changes nothing:
//
//	GET    /metrics  Prometheus metrics
//	GET    /healthz  200 while the agent loop runs
//	GET    /status   the agent's state as JSON (Status)
func readOnlyHandler(a *Agent, gatherer prometheus.Gatherer) http.Handler {
	mux := http.NewServeMux()
	readOnly(mux, a, gatherer)
	return mux
}

// controlHandler serves the control socket (admin.controlSocket, root
// only): the read-only endpoints and
//
//	POST   /quiesce  hand the VIP over (make-before-break) and stay out of the election
//	DELETE /quiesce  take part in the election again
func controlHandler(a *Agent, gatherer prometheus.Gatherer) http.Handler {
	mux := http.NewServeMux()
	readOnly(mux, a, gatherer)
	mux.HandleFunc("POST /quiesce", func(w http.ResponseWriter, _ *http.Request) {
		a.Quiesce(true)
		writeJSON(w, http.StatusAccepted, map[string]string{"quiescing": "requested"})
	})
	mux.HandleFunc("DELETE /quiesce", func(w http.ResponseWriter, _ *http.Request) {
		a.Quiesce(false)
		writeJSON(w, http.StatusAccepted, map[string]string{"quiescing": "cancelled"})
	})
	return mux
}

func readOnly(mux *http.ServeMux, a *Agent, gatherer prometheus.Gatherer) {
	mux.Handle("GET /metrics", promhttp.HandlerFor(gatherer, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		s := a.Status()
		if age := time.Since(s.Updated); s.Updated.IsZero() || age > 5*time.Second {
			http.Error(w, fmt.Sprintf("agent loop stalled: last step %v ago", age.Round(time.Millisecond)), http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, a.Status())
	})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// serveAdmin binds addr at once (so a port conflict fails the start) and
// serves until the returned stop function is called.
func serveAdmin(addr string, h http.Handler) (func(), error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("admin.listen %s: %w", addr, err)
	}
	return serve(ln, h), nil
}

// serveControl listens on the unix socket at path, mode 0600 in a 0700
// directory: only root (the agent's user) may connect. A stale socket from
// an earlier run is replaced.
func serveControl(path string, h http.Handler) (func(), error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("admin.controlSocket: %w", err)
	}
	if fi, err := os.Lstat(path); err == nil && fi.Mode()&os.ModeSocket != 0 {
		_ = os.Remove(path)
	}
	old := syscall.Umask(0o177)
	ln, err := net.Listen("unix", path)
	syscall.Umask(old)
	if err != nil {
		return nil, fmt.Errorf("admin.controlSocket %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		_ = ln.Close()
		return nil, fmt.Errorf("admin.controlSocket: %w", err)
	}
	return serve(ln, h), nil
}

func serve(ln net.Listener, h http.Handler) func() {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			_ = err // the listener was closed under us; nothing to do
		}
	}()
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}
}

// adminListen is the address the admin listener binds: admin.listen, with the host
// agentv1.NodeAddressHost replaced by this node's address: its entry in m (the newest membership
// known at start), else ownAddress. The manager renders one file for every member, so only the
// agent can tell which address is its own.
func adminListen(cfg *agentv1.AgentConfiguration, m agentv1.Membership) (string, error) {
	host, port, err := net.SplitHostPort(cfg.Admin.Listen)
	if err != nil || host != agentv1.NodeAddressHost {
		return cfg.Admin.Listen, nil
	}
	for _, mem := range m.Members {
		if mem.Name == cfg.NodeName && mem.Address != "" {
			return net.JoinHostPort(mem.Address, port), nil
		}
	}
	a, err := ownAddress(cfg)
	if err != nil {
		return "", fmt.Errorf("admin.listen %s: finding this node's address: %w", cfg.Admin.Listen, err)
	}
	return net.JoinHostPort(a.String(), port), nil
}
