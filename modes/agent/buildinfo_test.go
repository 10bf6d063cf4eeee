package agent

import (
	"io"
	"net/http/httptest"
	"strings"
	"testing"

	agentv1 "github.com/caplb/caplb/api/agent/v1alpha1"
	"github.com/caplb/caplb/internal/buildinfo"
)

// The admin listener's /metrics carries caplb_build_info with the build Run was given, next to
// the Go collectors.
func TestAdminMetricsBuildInfo(t *testing.T) {
	build := buildinfo.Labels{Version: "v9.8.7", Revision: "abcdef012345", GoVersion: "go1.26.1"}
	reg, err := newRegistry(options{build: build}, &agentv1.AgentConfiguration{})
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

// caplb_agent_info names what the agent serves: the LoadBalancer and cluster the manager rendered
// into its configuration, the mode, every VIP and the node, on one series. An agent configured by
// hand (no loadBalancer) still exports it, with those labels empty.
func TestAdminMetricsAgentInfo(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  agentv1.AgentConfiguration
		want string
	}{{
		name: "rendered by the manager",
		cfg: agentv1.AgentConfiguration{
			NodeName: "cp-1", Mode: agentv1.ModeARP, VIPs: []string{"10.0.0.100", "fd00::100"},
			LoadBalancer: agentv1.LoadBalancerIdentity{Namespace: "prod", Name: "prod-lb", Cluster: "prod"},
		},
		want: `caplb_agent_info{cluster="prod",loadbalancer="prod-lb",mode="arp",namespace="prod",node="cp-1",vips="10.0.0.100,fd00::100"} 1`,
	}, {
		name: "configured by hand",
		cfg:  agentv1.AgentConfiguration{NodeName: "edge-1", Mode: agentv1.ModeBGP, VIPs: []string{"192.0.2.10"}},
		want: `caplb_agent_info{cluster="",loadbalancer="",mode="bgp",namespace="",node="edge-1",vips="192.0.2.10"} 1`,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			reg, err := newRegistry(options{}, &tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			rec := httptest.NewRecorder()
			readOnlyHandler(nil, reg).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
			body, _ := io.ReadAll(rec.Body)
			if !strings.Contains(string(body), tc.want+"\n") {
				t.Fatalf("/metrics lacks %s:\n%s", tc.want, body)
			}
		})
	}
}
