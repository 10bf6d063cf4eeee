package wireguard

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	wgapi "github.com/caplb/caplb/api/wireguard/v1alpha1"
	"github.com/caplb/caplb/internal/buildinfo"
)

// adminHandler serves the gateway's local admin endpoints (no authentication: keep it on
// loopback):
//
//	GET    /status                      members, health, state, open connections (JSON)
//	GET    /healthz                     200 while serving
//	GET    /metrics                     Prometheus text: the build, per-member connections and health
//	POST   /v1/nodes/{node}/quiesce     no new connections; open ones close at drainTimeout
//	DELETE /v1/nodes/{node}/quiesce     back into rotation
//
// The per-member connection count is what a pre-drain hook waits on: release at zero or at the
// drain timeout.
func (g *Gateway) adminHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, http.StatusOK, g.Status()) })
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		_, _ = w.Write([]byte(metricsText(g.Status(), g.build)))
	})
	quiesce := func(on bool) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			node := r.PathValue("node")
			found := g.Quiesce(node, on)
			writeJSON(w, http.StatusOK, map[string]any{"node": node, "quiesced": on, "known": found})
		}
	}
	mux.HandleFunc("POST /v1/nodes/{node}/quiesce", quiesce(true))
	mux.HandleFunc("DELETE /v1/nodes/{node}/quiesce", quiesce(false))
	return mux
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// metricsText is the gateway's /metrics in the Prometheus text format, written by hand (the
// gateway links no client_golang registry): the build, then per-member connections and health.
func metricsText(st wgapi.Status, build buildinfo.Labels) string {
	var b strings.Builder
	b.WriteString(buildinfo.Text(build))
	b.WriteString("# HELP caplb_wireguard_member_connections Open client connections per member key.\n# TYPE caplb_wireguard_member_connections gauge\n")
	for _, m := range st.Members {
		fmt.Fprintf(&b, "caplb_wireguard_member_connections{node=%q,public_key=%q,state=%q} %d\n", m.Node, m.PublicKey, m.State, m.Connections)
	}
	b.WriteString("# HELP caplb_wireguard_member_healthy 1 while the member's /readyz passes through the tunnel.\n# TYPE caplb_wireguard_member_healthy gauge\n")
	for _, m := range st.Members {
		v := 0
		if m.Healthy {
			v = 1
		}
		fmt.Fprintf(&b, "caplb_wireguard_member_healthy{node=%q,public_key=%q} %d\n", m.Node, m.PublicKey, v)
	}
	b.WriteString("# HELP caplb_wireguard_member_connections_total Client connections served per member key.\n# TYPE caplb_wireguard_member_connections_total counter\n")
	for _, m := range st.Members {
		fmt.Fprintf(&b, "caplb_wireguard_member_connections_total{node=%q,public_key=%q} %d\n", m.Node, m.PublicKey, m.Served)
	}
	return b.String()
}
