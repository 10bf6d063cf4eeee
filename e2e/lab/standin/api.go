package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"
)

// NodeHeader names the node that answered, on every API response.
const NodeHeader = "X-Caplb-Lab-Node"

// streamEvery is the watch-like stream's line interval.
const streamEvery = 50 * time.Millisecond

// serveAPI runs the HTTPS API server on addr until SIGTERM or SIGINT, then
// shuts it down gracefully within grace. Without addr it just waits for the
// signal (the other listeners keep the process busy).
func serveAPI(addr, name, cert, key string, grace time.Duration, readyz http.HandlerFunc) error {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	if addr == "" {
		<-sig
		return nil
	}
	// Streams end when the server shuts down: Shutdown does not interrupt
	// running handlers, so they watch this context.
	stopping, stop := context.WithCancel(context.Background())
	defer stop()
	srv := &http.Server{Addr: addr, Handler: apiHandler(name, readyz, stopping), ReadHeaderTimeout: 5 * time.Second}
	srv.RegisterOnShutdown(stop)
	errc := make(chan error, 1)
	go func() { errc <- srv.ListenAndServeTLS(cert, key) }()
	log.Printf("standin %s: api https://%s (/readyz, /version, /stream)", name, addr)
	select {
	case err := <-errc:
		return err
	case s := <-sig:
		log.Printf("standin %s: %v: shutting down (grace %v)", name, s, grace)
	}
	ctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		_ = srv.Close()
		return fmt.Errorf("graceful shutdown: %w", err)
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

func apiHandler(name string, readyz http.HandlerFunc, stopping context.Context) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/readyz", readyz)
	mux.HandleFunc("/livez", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	version, _ := json.Marshal(map[string]string{
		"major": "1", "minor": "36", "gitVersion": "v1.36.3-caplb-lab", "platform": "linux/amd64", "node": name,
	})
	mux.HandleFunc("/version", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(version)
	})
	mux.HandleFunc("/stream", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		rc := http.NewResponseController(w)
		t := time.NewTicker(streamEvery)
		defer t.Stop()
		for seq := 1; ; seq++ {
			if _, err := fmt.Fprintf(w, "%s %d\n", name, seq); err != nil {
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
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(NodeHeader, name)
		mux.ServeHTTP(w, r)
	})
}
