package server

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"testing"

	. "github.com/onsi/gomega"
)

// TestGoaway: as kube-apiserver's --goaway-chance, an HTTP/2 client asked to move sends its
// next request on a new connection; chance 0 keeps it on one.
func TestGoaway(t *testing.T) {
	for _, c := range []struct {
		name       string
		chance     float64
		wantReused bool
	}{
		{"every answer asks the client to move", 1, false},
		{"chance 0 never does", 0, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := NewWithT(t)
			srv := httptest.NewUnstartedServer(Goaway(Handler("n1", Readyz(""), context.Background()), c.chance))
			srv.EnableHTTP2 = true
			srv.StartTLS()
			defer srv.Close()
			client := srv.Client()
			get := func() (reused bool) {
				trace := &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) { reused = i.Reused }}
				req, err := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), trace), http.MethodGet, srv.URL+"/version", nil)
				g.Expect(err).NotTo(HaveOccurred())
				resp, err := client.Do(req)
				g.Expect(err).NotTo(HaveOccurred())
				defer resp.Body.Close()
				g.Expect(resp.ProtoMajor).To(Equal(2), "the client speaks HTTP/2")
				g.Expect(resp.StatusCode).To(Equal(http.StatusOK))
				return reused
			}
			get()
			for range 3 {
				g.Expect(get()).To(Equal(c.wantReused))
			}
		})
	}
}
