package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// adminHandler serves the local admin endpoints:
//
//	GET    /metrics  Prometheus metrics
//	GET    /healthz  200 while the agent loop runs
//	GET    /status   the agent's state as JSON (Status)
//	POST   /quiesce  hand the VIP over (make-before-break) and stay out of the election
//	DELETE /quiesce  take part in the election again
//
// It has no authentication; the listener belongs on loopback.
func adminHandler(a *Agent, gatherer prometheus.Gatherer) http.Handler {
	mux := http.NewServeMux()
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
	}, nil
}
