package agent

import (
	"testing"

	agentv1 "github.com/caplb/caplb/api/agent/v1alpha1"
)

// The node-address placeholder the manager renders becomes this node's own address; anything
// else is bound as written.
func TestAdminListen(t *testing.T) {
	members := agentv1.Membership{Version: 3, Members: []agentv1.MemberConfig{
		{Name: "n0", Address: "10.0.0.10"}, {Name: "n1", Address: "fd00::11"}}}
	for _, tc := range []struct {
		name, listen, node, bind string
		m                        agentv1.Membership
		want                     string
	}{
		{"as written", "127.0.0.1:7473", "n0", "", members, "127.0.0.1:7473"},
		{"every address", "0.0.0.0:9473", "n0", "", members, "0.0.0.0:9473"},
		{"own member address", "node-address:9473", "n0", "", members, "10.0.0.10:9473"},
		{"own IPv6 member address", "node-address:7473", "n1", "", members, "[fd00::11]:7473"},
		{"not a member yet: election.bindAddress", "node-address:7473", "n9", "10.0.0.19", members, "10.0.0.19:7473"},
		{"bootstrap (no members): election.bindAddress", "node-address:7473", "n0", "10.0.0.10", agentv1.Membership{}, "10.0.0.10:7473"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := &agentv1.AgentConfiguration{NodeName: tc.node, Admin: agentv1.AdminConfig{Listen: tc.listen},
				Election: agentv1.ElectionConfig{BindAddress: tc.bind}, VIPs: []string{"192.0.2.10"}}
			got, err := adminListen(cfg, tc.m)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Fatalf("adminListen(%q) = %q, want %q", tc.listen, got, tc.want)
			}
		})
	}
}
