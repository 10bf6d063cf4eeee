package vip

import (
	"fmt"
	"net"
	"net/netip"
	"strconv"

	"k8s.io/apimachinery/pkg/util/validation/field"

	agentv1 "github.com/caplb/caplb/api/agent/v1alpha1"
	lbv1 "github.com/caplb/caplb/api/v1alpha1"
)

// gossipPort is the election's port (TCP and UDP): the manager never sets election.port, so the
// agent's default holds on every member.
const gossipPort = 7946

// renderAdminListen is the agent's admin.listen for spec.backend.<kind>.agent.metrics: "" (the
// agent's 127.0.0.1:7473) when unset, else address:port with the node-address placeholder when
// no address is given. The manager renders one file for every member, so only the agent can put
// its own address there.
func renderAdminListen(m *lbv1.AgentMetrics) string {
	if m == nil {
		return ""
	}
	host := m.Address
	if host == "" {
		host = agentv1.NodeAddressHost
	}
	return net.JoinHostPort(host, strconv.Itoa(int(m.EffectivePort())))
}

// validateMetrics (bp: spec.backend.<kind>) repeats the CRD's rules on agent.metrics and checks what CEL cannot see: that
// the port is free on the node (not the API server's, an extra port, the health check's or the
// election's).
func validateMetrics(bp *field.Path, spec *lbv1.LoadBalancerSpec, v *lbv1.VIPBackend) field.ErrorList {
	m := v.Agent.Metrics
	if m == nil {
		return nil
	}
	var errs field.ErrorList
	ap := bp.Child("agent")
	mp := ap.Child("metrics")
	if m.Address != "" {
		a, err := netip.ParseAddr(m.Address)
		switch {
		case err != nil || a.Zone() != "":
			errs = append(errs, field.Invalid(mp.Child("address"), m.Address,
				"must be an IP address (10.0.0.11, fd00::11, 0.0.0.0 for every address); remove it to bind the node's own address"))
		case !a.IsGlobalUnicast() && !a.IsUnspecified():
			errs = append(errs, field.Invalid(mp.Child("address"), m.Address,
				"must be a unicast node address Prometheus can reach, or 0.0.0.0 (::): not loopback (leave agent.metrics unset to keep 127.0.0.1), link-local or multicast"))
		}
	}
	if m.Port < 0 || m.Port > 65535 {
		errs = append(errs, field.Invalid(mp.Child("port"), m.Port, fmt.Sprintf("must be a port, 1-65535 (or unset: %d)", lbv1.DefaultAgentMetricsPort)))
		return errs
	}
	taken := map[int32]string{
		spec.EffectiveTargetPort(): "spec.targetPort (the API server's)",
		gossipPort:                 "the agent's election port",
	}
	for i, p := range v.ExtraPorts {
		taken[p] = bp.Child("extraPorts").Index(i).String()
	}
	if h := v.Agent.Health; h != nil && h.Port != 0 {
		taken[h.Port] = ap.Child("health", "port").String()
	}
	if p := m.EffectivePort(); taken[p] != "" {
		errs = append(errs, field.Invalid(mp.Child("port"), p, fmt.Sprintf(
			"is already used on the node by %s: choose another port (default %d)", taken[p], lbv1.DefaultAgentMetricsPort)))
	}
	return errs
}
