package agent

import (
	"io"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/caplb/caplb/internal/buildinfo"
)

// The admin listener's /metrics carries caplb_build_info with the build Run was given, next to
// the Go collectors.
func TestAdminMetricsBuildInfo(t *testing.T) {
	build := buildinfo.Labels{Version: "v9.8.7", Revision: "abcdef012345", GoVersion: "go1.26.1"}
	reg, err := newRegistry(options{build: build})
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	readOnlyHandler(nil, reg).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	want := `caplb_build_info{goversion="go1.26.1",revision="abcdef012345",version="v9.8.7"} 1`
	if !strings.Contains(string(body), want+"\n") {
		t.Fatalf("/metrics lacks %s:\n%s", want, body)
	}
	if !strings.Contains(string(body), "go_goroutines") {
		t.Fatalf("/metrics lacks the Go collector:\n%s", body)
	}
}
