package apiserver

import (
	"fmt"
	"net/http"
	"os"
	"strconv"
)

// StandinHandler is the stand-in API server's HTTP surface:
//
//	GET /readyz     "ok", or 500 while failFile exists (health failing on demand)
//	GET /name       the node's name: the client sees which member answered
//	GET /bytes?n=N  N bytes of zeros (throughput)
func StandinHandler(node, failFile string) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if failFile != "" {
			if _, err := os.Stat(failFile); err == nil {
				http.Error(w, "[-]stand-in failing on demand", http.StatusInternalServerError)
				return
			}
		}
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /name", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, node) })
	mux.HandleFunc("GET /bytes", func(w http.ResponseWriter, r *http.Request) {
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
	})
	return mux
}
