// Command standin is the WireGuard lab's stand-in API server: HTTPS with a kubeadm-shaped
// certificate (no 127.0.0.1 SAN) serving /readyz, /name and /bytes (apiserver.StandinHandler).
package main

import (
	"flag"
	"log"
	"net/http"
	"time"

	"github.com/caplb/caplb/e2e/wireguard/apiserver"
)

func main() {
	name := flag.String("name", "", "node name to answer /name with")
	listen := flag.String("listen", "127.0.0.1:6443", "HTTPS listen address")
	cert := flag.String("cert", "", "TLS certificate (PEM)")
	key := flag.String("key", "", "TLS key (PEM)")
	failFile := flag.String("fail-file", "", "while this file exists /readyz answers 500")
	flag.Parse()
	if *name == "" || *cert == "" || *key == "" {
		log.Fatal("standin: -name, -cert and -key are required")
	}
	srv := &http.Server{Addr: *listen, Handler: apiserver.StandinHandler(*name, *failFile), ReadHeaderTimeout: 5 * time.Second}
	log.Printf("standin %s: https://%s", *name, *listen)
	log.Fatal(srv.ListenAndServeTLS(*cert, *key))
}
