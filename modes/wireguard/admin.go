package wireguard

import (
	"encoding/json"
	"fmt"
	"net/http"
)

// adminHandler serves the gateway's local admin endpoints (no authentication: keep it on
// loopback):
//
//	GET    /status                      members, health, state, open connections (JSON)
//	GET    /healthz                     200 while serving
//	GET    /metrics                     Prometheus: the build, the gateway, per-member connections, health, handshakes
//	POST   /v1/nodes/{node}/quiesce     no new connections; open ones close at drainTimeout
//	DELETE /v1/nodes/{node}/quiesce     back into rotation
//
// The per-member connection count is what a pre-drain hook waits on: release at zero or at the
// drain timeout.
func (g *Gateway) adminHandler() (http.Handler, error) {
	metrics, err := metricsHandler(g.Status, g.build)
	if err != nil {
		return nil, fmt.Errorf("admin /metrics: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, http.StatusOK, g.Status()) })
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	mux.Handle("GET /metrics", metrics)
	quiesce := func(on bool) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			node := r.PathValue("node")
			found := g.Quiesce(node, on)
			writeJSON(w, http.StatusOK, map[string]any{"node": node, "quiesced": on, "known": found})
		}
	}
	mux.HandleFunc("POST /v1/nodes/{node}/quiesce", quiesce(true))
	mux.HandleFunc("DELETE /v1/nodes/{node}/quiesce", quiesce(false))
	return mux, nil
}

// metricsOnlyHandler is the metrics listener's: what Prometheus needs (/metrics, /healthz), and
// nothing that reads the members' details or changes the rotation, so it may face the network.
func (g *Gateway) metricsOnlyHandler() (http.Handler, error) {
	metrics, err := metricsHandler(g.Status, g.build)
	if err != nil {
		return nil, fmt.Errorf("metrics /metrics: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", metrics)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	return mux, nil
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}
