package buildinfo

import (
	"io"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

var build = Labels{Version: "v1.2.3", Revision: "1a2b3c4d5e6f", GoVersion: "go1.26.0"}

// scrape returns what a Prometheus scrape of g reads (the text format).
func scrape(t *testing.T, g prometheus.Gatherer) string {
	t.Helper()
	rec := httptest.NewRecorder()
	req := httptest.NewRequest("GET", "/metrics", nil)
	req.Header.Set("Accept", "text/plain")
	promhttp.HandlerFor(g, promhttp.HandlerOpts{}).ServeHTTP(rec, req)
	b, err := io.ReadAll(rec.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// The registered series, scraped, is exactly one gauge with the build's labels.
func TestRegister(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	if err := Register(reg, build); err != nil {
		t.Fatal(err)
	}
	if err := Register(reg, build); err != nil {
		t.Fatalf("registering the same build again: %v", err)
	}
	want := "# HELP caplb_build_info " + help + "\n# TYPE caplb_build_info gauge\n" +
		`caplb_build_info{goversion="go1.26.0",revision="1a2b3c4d5e6f",version="v1.2.3"} 1` + "\n"
	if got := scrape(t, reg); got != want {
		t.Errorf("scrape:\n%s\nwant:\n%s", got, want)
	}
}

// An unknown build exports nothing rather than empty labels.
func TestUnknownBuild(t *testing.T) {
	reg := prometheus.NewRegistry()
	if err := Register(reg, Labels{}); err != nil {
		t.Fatal(err)
	}
	if got := scrape(t, reg); got != "" {
		t.Fatalf("scrape of an unknown build: %q", got)
	}
}
