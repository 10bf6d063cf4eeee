package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/caplb/caplb/e2e/lab/standin/server"
)

// serveAPI runs the HTTPS API server on addr until SIGTERM or SIGINT, then
// shuts it down gracefully within grace. Without addr it just waits for the
// signal (the other listeners keep the process busy).
func serveAPI(addr, name, cert, key string, grace time.Duration, goaway float64, readyz http.HandlerFunc) error {
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
	srv := &http.Server{Addr: addr, Handler: server.Goaway(server.Handler(name, readyz, stopping), goaway), ReadHeaderTimeout: 5 * time.Second}
	srv.RegisterOnShutdown(stop)
	errc := make(chan error, 1)
	go func() { errc <- srv.ListenAndServeTLS(cert, key) }()
	log.Printf("standin %s: api https://%s (/readyz, /livez, /version, /stream, /name, /bytes)", name, addr)
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
