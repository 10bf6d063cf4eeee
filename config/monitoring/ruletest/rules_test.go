package ruletest

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

// alertsFile is the rule file the repository ships.
var alertsFile = filepath.Join("..", "alerts.yaml")

// A healthy world, 30 minutes of it: one manager LoadBalancer with three active members, three
// ARP/BGP agents of job "agents" (n1 owns the VIP), a BGP and BFD session, and a WireGuard gateway
// with two healthy active members whose tunnels re-key (handshake timestamps advance with time).
func healthy() []string {
	lb := `{namespace="default",name="lb"}`
	out := []string{
		`caplb_loadbalancer_ready` + lb + ` 1x30`,
		`caplb_loadbalancer_invalid_spec` + lb + ` 0x30`,
		`caplb_loadbalancer_targets{namespace="default",name="lb",state="active"} 3x30`,
		`caplb_loadbalancer_hooks_held` + lb + ` 0x30`,
		`caplb_loadbalancer_quiesce_timeouts_total` + lb + ` 0x30`,
		`caplb_loadbalancer_reconcile_total{result="success"} 0+5x30`,
		`caplb_loadbalancer_reconcile_total{result="error"} 0x30`,
		`up{job="gw",instance="gw-a:7475"} 1x30`,
		`caplb_wireguard_gateway_info{job="gw",instance="gw-a:7475",gateway="gw-a",public_key="G",tunnel_address="fd00::1"} 1x30`,
	}
	for _, n := range []string{"n1", "n2", "n3"} {
		owner := "0x30"
		if n == "n1" {
			owner = "1x30"
		}
		a := `{job="agents",instance="` + n + `:7473"}`
		out = append(out,
			`up`+a+` 1x30`,
			`caplb_agent_owner`+a+` `+owner,
			`caplb_agent_transitions_total{job="agents",instance="`+n+`:7473",to="owner"} 0x30`,
			`caplb_agent_duplicate_owners`+a+` 0x30`,
			`caplb_agent_apiserver_healthy`+a+` 1x30`,
			`caplb_agent_quorum`+a+` 1x30`,
			`caplb_agent_members_seen`+a+` 3x30`,
			`caplb_agent_members_configured`+a+` 3x30`,
			`caplb_agent_config_mismatch_members`+a+` 0x30`,
			`caplb_bgp_session_up{job="agents",instance="`+n+`:7473",peer="r1"} 1x30`,
			`caplb_bgp_bfd_session_up{job="agents",instance="`+n+`:7473",peer="r1"} 1x30`,
		)
	}
	for _, m := range []string{"m1", "m2"} {
		out = append(out, gatewayMember(m, "active", "1x30", "0+60x30")...)
	}
	return out
}

// gatewayMember is one member of gateway gw-a: its state, health and handshake time series.
func gatewayMember(node, state, healthy, handshake string) []string {
	l := `job="gw",instance="gw-a:7475",node="` + node + `",public_key="K` + node + `"`
	return []string{
		`caplb_wireguard_member_connections{` + l + `,state="` + state + `"} 2x30`,
		`caplb_wireguard_member_healthy{` + l + `} ` + healthy,
		`caplb_wireguard_member_last_handshake_timestamp_seconds{` + l + `} ` + handshake,
	}
}

// agents is the owner and up series of n1..n3 (job "agents"): owners[i] and ups[i] in
// promqltest notation.
func agents(owners, ups [3]string) []string {
	var out []string
	for i, n := range []string{"n1", "n2", "n3"} {
		a := `{job="agents",instance="` + n + `:7473"}`
		out = append(out, `up`+a+` `+ups[i], `caplb_agent_owner`+a+` `+owners[i])
	}
	return out
}

// withVIP adds agents of which n1 owns the VIP: with the caplb-agent group loaded, a world
// without agent series fires CaplbVIPNoOwner{} (by design; alerts.yaml says to drop the group
// where no LoadBalancer uses an agent), so the gateway cases keep a VIP owned.
func withVIP(series ...string) []string {
	allUp := [3]string{"1x30", "1x30", "1x30"}
	return append(agents([3]string{"1x30", "0x30", "0x30"}, allUp), series...)
}

// twoLoadBalancers is the owner, up and info series of two LoadBalancers' agents scraped by one
// job: a1, a2 serve prod/a and b1, b2 serve prod/b; ownerA and ownerB are a1's and b1's owner
// series (the others own nothing).
func twoLoadBalancers(ownerA, ownerB string) []string {
	var out []string
	for _, a := range []struct{ node, lb, owner string }{{"a1", "a", ownerA}, {"a2", "a", "0x30"}, {"b1", "b", ownerB}, {"b2", "b", "0x30"}} {
		l := `job="agents",instance="` + a.node + `:7473"`
		out = append(out,
			`up{`+l+`} 1x30`,
			`caplb_agent_owner{`+l+`} `+a.owner,
			`caplb_agent_info{`+l+`,namespace="prod",loadbalancer="`+a.lb+`",cluster="`+a.lb+`",mode="arp",vips="10.0.0.1",node="`+a.node+`"} 1x30`,
		)
	}
	return out
}

func TestAlertRules(t *testing.T) {
	allUp := [3]string{"1x30", "1x30", "1x30"}
	for _, tc := range []struct {
		name   string
		series []string
		at     time.Duration
		want   []string
	}{
		{"a healthy world fires nothing", healthy(), 30 * time.Minute, nil},
		{"no VIP owner: every agent reports not owner",
			agents([3]string{"1x10 0x20", "0x30", "0x30"}, allUp), 20 * time.Minute,
			[]string{`CaplbVIPNoOwner{job="agents"}`}},
		// One job scrapes two LoadBalancers' agents: the one that lost its owner is named, the
		// other's owner does not hide it.
		{"no VIP owner for one of two LoadBalancers in one job",
			twoLoadBalancers("1x10 0x20", "1x30"), 20 * time.Minute,
			[]string{`CaplbVIPNoOwner{job="agents",namespace="prod",loadbalancer="a"}`}},
		{"two LoadBalancers in one job, each owned",
			twoLoadBalancers("1x30", "1x30"), 20 * time.Minute, nil},
		{"an owner again resolves it",
			agents([3]string{"1x10 0x5 1x15", "0x30", "0x30"}, allUp), 20 * time.Minute, nil},
		// The case `sum(caplb_agent_owner) == 0` alone missed: no agent series anywhere.
		{"no VIP owner: no agent series at all",
			[]string{`up{job="other",instance="x"} 1x30`}, 20 * time.Minute,
			[]string{`CaplbVIPNoOwner{}`}},
		// Every agent target fails its scrape: up drops to 0, the owner series go stale. The
		// job's up says which job lost its VIP; absent() adds its own label-less alert.
		{"no VIP owner and agents down: every agent target down",
			agents([3]string{"1x10 stale", "0x10 stale", "0x10 stale"}, [3]string{"1x10 0x20", "1x10 0x20", "1x10 0x20"}), 20 * time.Minute,
			[]string{
				`CaplbAgentDown{job="agents",instance="n1:7473"}`,
				`CaplbAgentDown{job="agents",instance="n2:7473"}`,
				`CaplbAgentDown{job="agents",instance="n3:7473"}`,
				`CaplbVIPNoOwner{job="agents"}`,
				`CaplbVIPNoOwner{}`,
			}},
		{"one agent down while another owns the VIP",
			agents([3]string{"1x30", "0x10 stale", "0x30"}, [3]string{"1x30", "1x10 0x20", "1x30"}), 20 * time.Minute,
			[]string{`CaplbAgentDown{job="agents",instance="n2:7473"}`}},
		{"an agent down for less than 5 minutes is not yet an alert",
			agents([3]string{"1x30", "0x16 stale", "0x30"}, [3]string{"1x30", "1x16 0x13", "1x30"}), 20 * time.Minute, nil},
		{"gateway down",
			withVIP(
				`up{job="gw",instance="gw-a:7475"} 1x10 0x20`,
				`caplb_wireguard_gateway_info{job="gw",instance="gw-a:7475",gateway="gw-a",public_key="G",tunnel_address="fd00::1"} 1x10 stale`,
			), 20 * time.Minute,
			[]string{`CaplbGatewayDown{job="gw",instance="gw-a:7475"}`}},
		// m1's tunnel dies at 5m: no handshake since (its timestamp stays), its health fails.
		// m2 still serves, so the gateway has a healthy member.
		{"gateway: one member's tunnel dead",
			withVIP(append(append([]string{
				`up{job="gw",instance="gw-a:7475"} 1x30`,
				`caplb_wireguard_gateway_info{job="gw",instance="gw-a:7475",gateway="gw-a",public_key="G",tunnel_address="fd00::1"} 1x30`,
			}, gatewayMember("m1", "active", "1x5 0x25", "0+60x5 300x25")...), gatewayMember("m2", "active", "1x30", "0+60x30")...)...),
			15 * time.Minute,
			[]string{
				`CaplbGatewayHandshakeStale{job="gw",instance="gw-a:7475",node="m1"}`,
				`CaplbGatewayMemberUnhealthy{job="gw",instance="gw-a:7475",node="m1"}`,
			}},
		// The healthy member is quiesced and the active one fails: nothing healthy in rotation.
		// A quiesced member's health is no alert of its own.
		{"gateway: no healthy member in rotation",
			withVIP(append(append([]string{
				`up{job="gw",instance="gw-a:7475"} 1x30`,
				`caplb_wireguard_gateway_info{job="gw",instance="gw-a:7475",gateway="gw-a",public_key="G",tunnel_address="fd00::1"} 1x30`,
			}, gatewayMember("m1", "quiesced", "1x30", "0+60x30")...), gatewayMember("m2", "active", "1x5 0x25", "0+60x30")...)...),
			15 * time.Minute,
			[]string{
				`CaplbGatewayMemberUnhealthy{job="gw",instance="gw-a:7475",node="m2"}`,
				`CaplbGatewayNoHealthyMember{job="gw",instance="gw-a:7475"}`,
			}},
		{"gateway: no member has registered",
			withVIP(
				`up{job="gw",instance="gw-a:7475"} 1x30`,
				`caplb_wireguard_gateway_info{job="gw",instance="gw-a:7475",gateway="gw-a",public_key="G",tunnel_address="fd00::1"} 1x30`,
			), 10 * time.Minute,
			[]string{`CaplbGatewayNoHealthyMember{job="gw",instance="gw-a:7475"}`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			got, err := firing(seriesText(tc.series...), tc.at, alertsFile)
			g.Expect(err).NotTo(HaveOccurred())
			if tc.want == nil {
				g.Expect(got).To(BeEmpty())
				return
			}
			g.Expect(got).To(ConsistOf(tc.want))
		})
	}
}

// The cases can fail: the expression CaplbVIPNoOwner had before (issue 35) stays silent when
// every agent is down, where the shipped one fires.
func TestOldNoOwnerRuleMissesAllAgentsDown(t *testing.T) {
	g := NewWithT(t)
	old := filepath.Join(t.TempDir(), "old.yaml")
	g.Expect(os.WriteFile(old, []byte(`groups:
- name: old
  rules:
  - alert: CaplbVIPNoOwner
    expr: sum(caplb_agent_owner) == 0
    for: 1m
`), 0o600)).To(Succeed())
	down := seriesText(agents([3]string{"1x10 stale", "0x10 stale", "0x10 stale"}, [3]string{"1x10 0x20", "1x10 0x20", "1x10 0x20"})...)
	got, err := firing(down, 20*time.Minute, old)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got).To(BeEmpty())
	got, err = firing(down, 20*time.Minute, alertsFile)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got).To(ContainElement(`CaplbVIPNoOwner{job="agents"}`))
}

// The case can fail: grouped by job alone (the expression before caplb_agent_info), the owner of
// one LoadBalancer hides another's loss when one job scrapes both.
func TestNoOwnerByJobMissesOneOfTwoLoadBalancers(t *testing.T) {
	g := NewWithT(t)
	byJob := filepath.Join(t.TempDir(), "by-job.yaml")
	g.Expect(os.WriteFile(byJob, []byte(`groups:
- name: by-job
  rules:
  - alert: CaplbVIPNoOwner
    expr: sum by (job) (caplb_agent_owner) == 0
    for: 1m
`), 0o600)).To(Succeed())
	lost := seriesText(twoLoadBalancers("1x10 0x20", "1x30")...)
	got, err := firing(lost, 20*time.Minute, byJob)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got).To(BeEmpty())
	got, err = firing(lost, 20*time.Minute, alertsFile)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got).To(ConsistOf(`CaplbVIPNoOwner{job="agents",namespace="prod",loadbalancer="a"}`))
}
