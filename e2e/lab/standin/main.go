// Command standin is a stand-in API server for the network lab: a TLS
// /readyz that fails while a file exists (so tests fail the health check on
// demand), and a plain TCP service on the API port that answers every
// connection with the node's name (so a client sees which node the VIP led
// it to).
//
// With -api-listen it is instead one HTTPS server shaped like an apiserver
// for a real HTTP client on the VIP (the lifecycle lab): /readyz, /version
// (JSON naming the node), /stream (a watch-like chunked response), /name and
// /bytes (see package server), every response carrying the header X-Caplb-Lab-Node; SIGTERM shuts it down
// gracefully, ending streams cleanly, as a real apiserver ends its watches.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"time"

	"github.com/caplb/caplb/e2e/lab/standin/server"
)

func main() {
	name := flag.String("name", "", "node name to answer with")
	service := flag.String("service-listen", ":6443", "plain TCP service that writes the node name (\"\": none; not started by default when -api-listen is given)")
	echo := flag.String("echo-listen", "", "optional long-lived TCP service: writes the node name, then answers each line with \"<name>: <line>\"")
	readyz := flag.String("readyz-listen", "127.0.0.1:6444", "HTTPS /readyz listener (\"\": none; not started by default when -api-listen is given, which serves /readyz itself)")
	api := flag.String("api-listen", "", "optional HTTPS API server with /readyz, /version and /stream, e.g. :6443")
	grace := flag.Duration("shutdown-grace", time.Second, "with -api-listen: how long SIGTERM waits for in-flight requests before closing connections")
	cert := flag.String("cert", "", "TLS certificate (PEM)")
	key := flag.String("key", "", "TLS key (PEM)")
	failFile := flag.String("fail-file", "", "while this file exists /readyz answers 500")
	goaway := flag.Float64("goaway-chance", 0, "with -api-listen: the chance that an HTTP/2 request's answer asks the client to move (GOAWAY), as kube-apiserver's --goaway-chance (0 to 0.02)")
	flag.Parse()
	if *name == "" || *cert == "" || *key == "" {
		log.Fatal("standin: -name, -cert and -key are required")
	}
	if *goaway < 0 || *goaway > 0.02 {
		log.Fatalf("standin: -goaway-chance %v: want 0 to 0.02, as kube-apiserver", *goaway)
	}
	if *api != "" {
		// The API server takes the API port and serves /readyz: the other
		// listeners run only when asked for explicitly.
		set := map[string]bool{}
		flag.Visit(func(f *flag.Flag) { set[f.Name] = true })
		if !set["service-listen"] {
			*service = ""
		}
		if !set["readyz-listen"] {
			*readyz = ""
		}
	}

	if *service != "" {
		ln, err := net.Listen("tcp", *service)
		if err != nil {
			log.Fatalf("standin: service: %v", err)
		}
		go serveName(ln, *name)
	}

	if *echo != "" {
		eln, err := net.Listen("tcp", *echo)
		if err != nil {
			log.Fatalf("standin: echo: %v", err)
		}
		go serveEcho(eln, *name)
	}

	readyzHandler := server.Readyz(*failFile)
	if *readyz != "" {
		mux := http.NewServeMux()
		mux.HandleFunc("/readyz", readyzHandler)
		srv := &http.Server{Addr: *readyz, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		log.Printf("standin %s: service %q, readyz https://%s/readyz", *name, *service, *readyz)
		if *api == "" {
			log.Fatal(srv.ListenAndServeTLS(*cert, *key))
		}
		go func() { log.Fatal(srv.ListenAndServeTLS(*cert, *key)) }()
	}
	if err := serveAPI(*api, *name, *cert, *key, *grace, *goaway, readyzHandler); err != nil {
		log.Fatalf("standin: api: %v", err)
	}
}

// serveName answers every connection with the node's name and closes it.
func serveName(ln net.Listener, name string) {
	reply := []byte(name + "\n")
	for {
		c, err := ln.Accept()
		if err != nil {
			log.Fatalf("standin: accept: %v", err)
		}
		go func() {
			_ = c.SetWriteDeadline(time.Now().Add(2 * time.Second))
			_, _ = c.Write(reply)
			_ = c.Close()
		}()
	}
}

// serveEcho keeps each connection open and answers its lines, so that a test
// can tell which node holds an established connection.
func serveEcho(ln net.Listener, name string) {
	for {
		c, err := ln.Accept()
		if err != nil {
			log.Fatalf("standin: echo accept: %v", err)
		}
		go func() {
			defer c.Close()
			if _, err := fmt.Fprintln(c, name); err != nil {
				return
			}
			sc := bufio.NewScanner(c)
			for sc.Scan() {
				if _, err := fmt.Fprintf(c, "%s: %s\n", name, sc.Text()); err != nil {
					return
				}
			}
		}()
	}
}
