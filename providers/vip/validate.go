package vip

import (
	"fmt"
	"net/netip"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	agentv1 "github.com/caplb/caplb/api/agent/v1alpha1"
	lbv1 "github.com/caplb/caplb/api/v1alpha1"
)

// Validate implements providers.Backend, with no I/O. Besides the CRD's CEL rules (repeated for
// objects that predate them) it checks what CEL cannot: timer relations with the agent's
// defaults applied, BGP timers and communities as the agent parses them, and that an agent image
// is known.
func (b *Backend) Validate(lb *lbv1.LoadBalancer) field.ErrorList {
	var errs field.ErrorList
	spec := &lb.Spec
	bp := field.NewPath("spec", "backend", b.kind)
	v := spec.Backend.VIP()
	if spec.Backend.Kind() != b.kind || v == nil {
		return append(errs, field.Required(bp, fmt.Sprintf("the %s backend needs spec.backend.%s", b.kind, b.kind)))
	}
	host := field.NewPath("spec", "endpoint", "host")
	switch {
	case v.AddressFrom == nil && spec.Endpoint.Host == "":
		errs = append(errs, field.Required(host, fmt.Sprintf(
			"the VIP needs a source: set spec.endpoint.host to an IP address, or %s to an IPAM pool", bp.Child("addressFrom", "poolRef"))))
	case v.AddressFrom != nil && spec.Endpoint.Host != "":
		errs = append(errs, field.Invalid(host, spec.Endpoint.Host, fmt.Sprintf(
			"set either spec.endpoint.host or %s, not both", bp.Child("addressFrom"))))
	case spec.Endpoint.Host != "":
		if ip, err := netip.ParseAddr(spec.Endpoint.Host); err != nil || ip.IsUnspecified() || ip.IsLoopback() || ip.IsMulticast() || ip.IsLinkLocalUnicast() {
			errs = append(errs, field.Invalid(host, spec.Endpoint.Host,
				"must be a unicast IP address of the members' segment (it is the VIP); use spec.backend.static for a DNS name"))
		}
	}
	if v.AddressFrom != nil {
		pr := bp.Child("addressFrom", "poolRef")
		ref := v.AddressFrom.PoolRef
		if ref.APIGroup == "" {
			errs = append(errs, field.Required(pr.Child("apiGroup"), "the pool's API group, e.g. ipam.cluster.x-k8s.io"))
		}
		if ref.Kind == "" {
			errs = append(errs, field.Required(pr.Child("kind"), "the pool's kind, e.g. InClusterIPPool or GlobalInClusterIPPool"))
		}
		if ref.Name == "" {
			errs = append(errs, field.Required(pr.Child("name"), "the pool's name"))
		}
		if spec.ClusterName == "" {
			errs = append(errs, field.Required(field.NewPath("spec", "clusterName"),
				"an IPAddressClaim belongs to a Cluster: set spec.clusterName, or use spec.endpoint.host"))
		}
	}
	if p := spec.Endpoint.Port; p != 0 && p != spec.EffectiveTargetPort() {
		errs = append(errs, field.Invalid(field.NewPath("spec", "endpoint", "port"), p, fmt.Sprintf(
			"the VIP is served by the members' own API servers, so it has their port: remove spec.endpoint.port or set it to spec.targetPort (%d)",
			spec.EffectiveTargetPort())))
	}
	seen := map[int32]bool{spec.EffectiveTargetPort(): true}
	for i, p := range v.ExtraPorts {
		if seen[p] {
			errs = append(errs, field.Duplicate(bp.Child("extraPorts").Index(i), p))
		}
		seen[p] = true
	}

	ap := bp.Child("agent")
	if f := v.Agent.Flavor; f != "" {
		if _, ok := Flavors[f]; !ok {
			errs = append(errs, field.NotSupported(ap.Child("flavor"), f, []string{FlavorKubeadm, FlavorK3s, FlavorRKE2}))
		}
	}
	if v.Agent.Image == "" && b.opts.AgentImage == "" {
		errs = append(errs, field.Required(ap.Child("image"),
			"this manager has no default agent image: set it here, or start the manager with --agent-image"))
	}
	errs = append(errs, validateTimers(ap.Child("timers"), v.Agent.Timers)...)
	if t := v.Agent.Timers; t != nil && t.BusyDrain != nil && t.BusyDrain.Duration > 0 {
		// The manager stops waiting for a quiescing member at spec.quiesce.timeout: a holder
		// still draining then would have its hook released under it.
		hold := dur(t.Drain, 500*time.Millisecond) + t.BusyDrain.Duration
		if timeout := spec.Quiesce.EffectiveTimeout(); hold >= timeout {
			errs = append(errs, field.Invalid(ap.Child("timers", "busyDrain"), t.BusyDrain.Duration.String(), fmt.Sprintf(
				"drain + busyDrain (%s) must be shorter than spec.quiesce.timeout (%s): shorten busyDrain or raise the timeout", hold, timeout)))
		}
	}
	if a := spec.Backend.ARP; a != nil && a.LoadBalancing == lbv1.ARPLoadBalancingSpread &&
		a.Agent.Timers != nil && a.Agent.Timers.BusyDrain != nil && a.Agent.Timers.BusyDrain.Duration > 0 {
		// The agent counts busy connections on the sockets bound to the VIP; spread connections
		// reach the API servers at node addresses, so busyDrain would hold for none of them.
		errs = append(errs, field.Invalid(ap.Child("timers", "busyDrain"), a.Agent.Timers.BusyDrain.Duration.String(),
			"cannot be used with spec.backend.arp.loadBalancing spread: spread connections reach the API servers at node addresses, "+
				"not the VIP, so the holder counts none of them as busy; remove busyDrain (or set it to 0s), or use loadBalancing single"))
	}
	errs = append(errs, validateHealth(ap, v.Agent)...)
	if t := spec.Backend.TakeOver(); t != nil {
		errs = append(errs, validateTakeOver(spec, bp.Child("takeOver"), t)...)
	}
	errs = append(errs, validateMetrics(bp, spec, v)...)
	if bg := spec.Backend.BGP; bg != nil {
		errs = append(errs, validateBGP(bp, bg)...)
	}
	return errs
}

func dur(d *lbv1.Duration, def time.Duration) time.Duration {
	if d == nil || d.Duration == 0 {
		return def
	}
	return d.Duration
}

func validateTimers(p *field.Path, t *lbv1.AgentTimers) field.ErrorList {
	if t == nil {
		return nil
	}
	var errs field.ErrorList
	for _, x := range []struct {
		name string
		d    *lbv1.Duration
	}{{"probeInterval", t.ProbeInterval}, {"probeTimeout", t.ProbeTimeout}, {"contactTimeout", t.ContactTimeout},
		{"settle", t.Settle}, {"drain", t.Drain}, {"busyDrain", t.BusyDrain}} {
		errs = append(errs, x.d.ValidateForm(p.Child(x.name))...)
		if x.d != nil && x.d.Duration < 0 {
			errs = append(errs, field.Invalid(p.Child(x.name), x.d.Duration.String(), "must not be negative"))
		}
	}
	interval := dur(t.ProbeInterval, 100*time.Millisecond)
	if timeout := dur(t.ProbeTimeout, 50*time.Millisecond); timeout >= interval {
		errs = append(errs, field.Invalid(p.Child("probeTimeout"), timeout.String(),
			fmt.Sprintf("must be shorter than probeInterval (%s)", interval)))
	}
	if contact := dur(t.ContactTimeout, 500*time.Millisecond); contact < 2*interval {
		errs = append(errs, field.Invalid(p.Child("contactTimeout"), contact.String(),
			fmt.Sprintf("must be at least 2 x probeInterval (%s): one late ping round would drop the VIP", 2*interval)))
	}
	return errs
}

func validateBGP(bp *field.Path, bg *lbv1.BGPBackend) field.ErrorList {
	var errs field.ErrorList
	if bg.ASN < 1 || bg.ASN > 4294967295 {
		errs = append(errs, field.Invalid(bp.Child("asn"), bg.ASN, "must be an AS number, 1-4294967295"))
	}
	if len(bg.Peers) == 0 {
		errs = append(errs, field.Required(bp.Child("peers"), "list at least one router (address and asn)"))
	}
	seen := map[netip.Addr]bool{}
	for i, p := range bg.Peers {
		pp := bp.Child("peers").Index(i)
		a, err := netip.ParseAddr(p.Address)
		switch {
		case err != nil:
			errs = append(errs, field.Invalid(pp.Child("address"), p.Address, "must be an IP address"))
		case seen[a.Unmap()]:
			errs = append(errs, field.Duplicate(pp.Child("address"), p.Address))
		default:
			seen[a.Unmap()] = true
		}
		if p.ASN < 1 || p.ASN > 4294967295 {
			errs = append(errs, field.Invalid(pp.Child("asn"), p.ASN, "must be an AS number, 1-4294967295"))
		}
		if p.EBGPMultihop != 0 && p.ASN == bg.ASN {
			errs = append(errs, field.Invalid(pp.Child("ebgpMultihop"), p.EBGPMultihop,
				"only applies to eBGP; this peer has the same ASN as spec.backend.bgp.asn (iBGP): remove it"))
		}
		errs = append(errs, p.HoldTime.ValidateForm(pp.Child("holdTime"))...)
		errs = append(errs, p.KeepaliveTime.ValidateForm(pp.Child("keepaliveTime"))...)
		errs = append(errs, p.ConnectRetry.ValidateForm(pp.Child("connectRetry"))...)
		hold := dur(p.HoldTime, agentv1.DefaultHoldTime)
		if hold != hold.Truncate(time.Second) || hold < 3*time.Second {
			errs = append(errs, field.Invalid(pp.Child("holdTime"), hold.String(), "must be whole seconds, at least 3s (RFC 4271)"))
		}
		if p.KeepaliveTime != nil {
			k := p.KeepaliveTime.Duration
			if k != k.Truncate(time.Second) || k < time.Second || k >= hold {
				errs = append(errs, field.Invalid(pp.Child("keepaliveTime"), k.String(),
					fmt.Sprintf("must be whole seconds, at least 1s and shorter than holdTime (%s)", hold)))
			}
		}
		if r := dur(p.ConnectRetry, agentv1.DefaultConnectRetry); r != r.Truncate(time.Second) || r < time.Second {
			errs = append(errs, field.Invalid(pp.Child("connectRetry"), r.String(), "must be whole seconds, at least 1s"))
		}
		if f := p.BFD; f != nil {
			bp := pp.Child("bfd")
			if err == nil && !a.Unmap().Is4() {
				errs = append(errs, field.Forbidden(bp, "BFD runs to IPv4 routers only; remove bfd from this IPv6 peer"))
			}
			for _, x := range []struct {
				name string
				d    *lbv1.Duration
			}{{"minRx", f.MinRx}, {"minTx", f.MinTx}} {
				errs = append(errs, x.d.ValidateForm(bp.Child(x.name))...)
				if d := dur(x.d, agentv1.DefaultBFDInterval); d < 10*time.Millisecond || d > time.Minute {
					errs = append(errs, field.Invalid(bp.Child(x.name), d.String(), "must be between 10ms and 60s (300ms is usual)"))
				}
			}
			if f.Multiplier != 0 && (f.Multiplier < 2 || f.Multiplier > 255) {
				errs = append(errs, field.Invalid(bp.Child("multiplier"), f.Multiplier, "must be 2-255 (3 is usual)"))
			}
		}
	}
	for i, c := range bg.Communities {
		if _, err := agentv1.ParseCommunity(c); err != nil {
			errs = append(errs, field.Invalid(bp.Child("communities").Index(i), c, err.Error()))
		}
	}
	return errs
}

// validateHealth repeats the CRD's rules on agent.health for objects that predate them: the
// rendered check must be one the agent accepts.
func validateHealth(ap *field.Path, a lbv1.AgentSpec) field.ErrorList {
	h := a.Health
	if h == nil {
		return nil
	}
	var errs field.ErrorList
	hp := ap.Child("health")
	switch h.Type {
	case "", lbv1.AgentHealthHTTPS, lbv1.AgentHealthHTTP:
	case lbv1.AgentHealthTCP:
		if h.Path != "" {
			errs = append(errs, field.Invalid(hp.Child("path"), h.Path, "applies only to type http or https: remove it for type tcp"))
		}
	default:
		errs = append(errs, field.NotSupported(hp.Child("type"), h.Type,
			[]string{lbv1.AgentHealthHTTPS, lbv1.AgentHealthHTTP, lbv1.AgentHealthTCP}))
	}
	if h.Port < 0 || h.Port > 65535 {
		errs = append(errs, field.Invalid(hp.Child("port"), h.Port, "must be a port, 1-65535 (or unset: spec.targetPort)"))
	}
	if h.Path != "" && (!strings.HasPrefix(h.Path, "/") || strings.ContainsAny(h.Path, " \t\r\n")) {
		errs = append(errs, field.Invalid(hp.Child("path"), h.Path, "must start with '/' and hold no spaces, like /healthz"))
	}
	if a.CAFile != "" && h.Type != "" && h.Type != lbv1.AgentHealthHTTPS {
		errs = append(errs, field.Invalid(ap.Child("caFile"), a.CAFile, "verifies the https health check only: remove it for health type "+h.Type))
	}
	return errs
}

// validateTakeOver repeats the CRD's rules on spec.backend.<arp|bgp>.takeOver: the VIP taken
// over is the Cluster's existing endpoint, so it must be spec.endpoint.host, and kube-vip's Pods
// are read in spec.clusterName's workload cluster.
func validateTakeOver(spec *lbv1.LoadBalancerSpec, tp *field.Path, t *lbv1.TakeOver) field.ErrorList {
	var errs field.ErrorList
	if t.KubeVIP == nil {
		return append(errs, field.Required(tp.Child("kubeVIP"),
			"name the VIP manager the address is taken over from: kubeVIP is the only one supported"))
	}
	if _, err := netip.ParseAddr(spec.Endpoint.Host); err != nil {
		errs = append(errs, field.Required(field.NewPath("spec", "endpoint", "host"), fmt.Sprintf(
			"must be set to the VIP with %s: the address taken over is the Cluster's existing endpoint; "+
				"set spec.endpoint.host to that IP address (the host of the Cluster's spec.controlPlaneEndpoint)", tp)))
	}
	if spec.ClusterName == "" {
		errs = append(errs, field.Required(field.NewPath("spec", "clusterName"), fmt.Sprintf(
			"required with %s: the VIP manager's Pods are read in that Cluster's workload cluster; set it to the Cluster whose endpoint is taken over", tp)))
	}
	kp := tp.Child("kubeVIP")
	if ns := t.KubeVIP.LeaseNamespace; ns != "" {
		for _, msg := range validation.IsDNS1123Label(ns) {
			errs = append(errs, field.Invalid(kp.Child("leaseNamespace"), ns, "must be a namespace name, like kube-system: "+msg))
		}
	}
	if n := t.KubeVIP.LeaseName; n != "" {
		for _, msg := range validation.IsDNS1123Subdomain(n) {
			errs = append(errs, field.Invalid(kp.Child("leaseName"), n, "must be a Lease name, like plndr-cp-lock: "+msg))
		}
	}
	return errs
}
