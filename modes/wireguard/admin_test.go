package wireguard

import (
	"strings"
	"testing"

	wgapi "github.com/caplb/caplb/api/wireguard/v1alpha1"
	"github.com/caplb/caplb/internal/buildinfo"
)

// The gateway's hand-written /metrics starts with the same caplb_build_info the registries
// export, then the members.
func TestGatewayMetricsText(t *testing.T) {
	build := buildinfo.Labels{Version: "v9.8.7", Revision: "abcdef012345", GoVersion: "go1.26.1"}
	st := wgapi.Status{Members: []wgapi.MemberStatus{{Node: "cp-0", PublicKey: "k0", State: "active", Connections: 2, Healthy: true, Served: 5}}}
	got := metricsText(st, build)
	if !strings.HasPrefix(got, buildinfo.Text(build)) {
		t.Fatalf("metrics do not start with the build:\n%s", got)
	}
	for _, want := range []string{
		`caplb_build_info{goversion="go1.26.1",revision="abcdef012345",version="v9.8.7"} 1` + "\n",
		`caplb_wireguard_member_connections{node="cp-0",public_key="k0",state="active"} 2` + "\n",
		`caplb_wireguard_member_healthy{node="cp-0",public_key="k0"} 1` + "\n",
		`caplb_wireguard_member_connections_total{node="cp-0",public_key="k0"} 5` + "\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("metrics lack %q:\n%s", want, got)
		}
	}
	if strings.Contains(metricsText(st, buildinfo.Labels{}), "caplb_build_info") {
		t.Error("an unknown build is exported")
	}
}
