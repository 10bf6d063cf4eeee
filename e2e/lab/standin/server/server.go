// Package server is the HTTP surface of the labs' one stand-in API server (the command
// e2e/lab/standin runs it; in-process tests serve it themselves). Portable: no root, no Linux.
//
//	GET /readyz     "ok", or 500 while the fail file exists (health failing on demand)
//	GET /livez      "ok"
//	GET /version    JSON shaped like the API server's, with "node": the node's name
//	GET /stream     a watch-like chunked response, a line "<node> <seq>" every 50 ms, ended cleanly
//	                when the server stops
//	GET /name       the node's name: a client sees which member answered
//	GET /bytes?n=N  N bytes of zeros (throughput)
//
// Every response carries the header NodeHeader.
package server

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"strconv"
	"time"
)

// NodeHeader names the node that answered, on every response.
const NodeHeader = "X-Caplb-Lab-Node"

// streamEvery is the watch-like stream's line interval.
const streamEvery = 50 * time.Millisecond

// Readyz answers "ok", or 500 while failFile exists ("" = never fails).
func Readyz(failFile string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		if failFile != "" {
			if _, err := os.Stat(failFile); err == nil {
				http.Error(w, "[-]stand-in failing on demand", http.StatusInternalServerError)
				return
			}
		}
		fmt.Fprintln(w, "ok")
	}
}

// Handler serves the stand-in's API for node. Streams end when stopping is done (Shutdown does
// not interrupt running handlers, so they watch it).
func Handler(node string, readyz http.HandlerFunc, stopping context.Context) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /readyz", readyz)
	mux.HandleFunc("GET /livez", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	version, _ := json.Marshal(map[string]string{
		"major": "1", "minor": "36", "gitVersion": "v1.36.3-caplb-lab", "platform": "linux/amd64", "node": node,
	})
	mux.HandleFunc("GET /version", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(version)
	})
	mux.HandleFunc("GET /stream", func(w http.ResponseWriter, r *http.Request) { stream(w, r, node, stopping) })
	mux.HandleFunc("GET /name", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, node) })
	mux.HandleFunc("GET /bytes", zeros)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(NodeHeader, node)
		mux.ServeHTTP(w, r)
	})
}

func stream(w http.ResponseWriter, r *http.Request, node string, stopping context.Context) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	rc := http.NewResponseController(w)
	t := time.NewTicker(streamEvery)
	defer t.Stop()
	for seq := 1; ; seq++ {
		if _, err := fmt.Fprintf(w, "%s %d\n", node, seq); err != nil {
			return
		}
		if err := rc.Flush(); err != nil {
			return
		}
		select {
		case <-r.Context().Done():
			return
		case <-stopping.Done():
			return
		case <-t.C:
		}
	}
}

func zeros(w http.ResponseWriter, r *http.Request) {
	n, err := strconv.ParseInt(r.URL.Query().Get("n"), 10, 64)
	if err != nil || n < 0 || n > 1<<34 {
		http.Error(w, "n: want a byte count", http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Length", strconv.FormatInt(n, 10))
	buf := make([]byte, 64<<10)
	for n > 0 {
		k := min(n, int64(len(buf)))
		if _, err := w.Write(buf[:k]); err != nil {
			return
		}
		n -= k
	}
}

// Goaway answers an HTTP/2 request, with probability chance, with "Connection: close", which
// makes net/http's HTTP/2 server send a GOAWAY once the connection's streams end: the client's
// next requests go out on a new connection. This is kube-apiserver's --goaway-chance
// (WithProbabilisticGoaway), which the samples set so that the clients of a drained member
// move off it before its connections are reset. Like kube-apiserver it leaves out HTTP/1 and
// long-running requests (the stream). chance 0 returns h.
func Goaway(h http.Handler, chance float64) http.Handler {
	if chance <= 0 {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor == 2 && r.URL.Path != "/stream" && rand.Float64() < chance {
			w.Header().Set("Connection", "close")
		}
		h.ServeHTTP(w, r)
	})
}
