package wireguard

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/util/validation/field"

	lbv1 "github.com/caplb/caplb/api/v1alpha1"
	wg "github.com/caplb/caplb/api/wireguard/v1alpha1"
)

// +kubebuilder:rbac:groups=loadbalancer.cluster.x-k8s.io,resources=loadbalancers,verbs=get;list;watch

// Validate implements providers.Backend, with no I/O. Besides the CRD's CEL rules (repeated for
// objects that predate them) it checks what CEL cannot: the ports one gateway takes for this
// cluster against the endpoint's port, the tunnel prefix and keys as the data plane parses them,
// and that a member image is known.
func (b *Backend) Validate(lb *lbv1.LoadBalancer) field.ErrorList {
	var errs field.ErrorList
	spec := &lb.Spec
	bp := field.NewPath("spec", "backend", "wireguard")
	w := spec.Backend.WireGuard
	if w == nil {
		return append(errs, field.Required(bp, "the wireguard backend needs spec.backend.wireguard"))
	}
	if spec.ClusterName == "" {
		errs = append(errs, field.Required(field.NewPath("spec", "clusterName"),
			"the join token, bootstrap and gateway Secrets and the health checks' CA belong to a Cluster: set spec.clusterName"))
	}
	if len(w.Gateways) == 0 {
		errs = append(errs, field.Required(bp.Child("gateways"), "list at least one gateway (name, address)"))
	}
	if len(w.Gateways) > 1 && spec.Endpoint.Host == "" {
		errs = append(errs, field.Required(field.NewPath("spec", "endpoint", "host"),
			"required with more than one gateway: a DNS name with one record per gateway (or an address held across the gateway hosts)"))
	}
	if h := spec.Endpoint.Host; h != "" && !lbv1.ValidHost(h) {
		errs = append(errs, field.Invalid(field.NewPath("spec", "endpoint", "host"), h, "must be an IP address or a lower-case DNS name"))
	}
	ep := spec.EffectivePort()
	names, addrs := map[string]bool{}, map[string]bool{}
	for i, g := range w.Gateways {
		gp := bp.Child("gateways").Index(i)
		if g.Name == "" {
			errs = append(errs, field.Required(gp.Child("name"), "a DNS label such as gw-1"))
		} else if names[g.Name] {
			errs = append(errs, field.Duplicate(gp.Child("name"), g.Name))
		}
		names[g.Name] = true
		if !lbv1.ValidHost(g.Address) {
			errs = append(errs, field.Invalid(gp.Child("address"), g.Address, "must be an IP address or a lower-case DNS name, without port"))
		}
		p := g.EffectivePort()
		if p < 1 || p > 65534 {
			errs = append(errs, field.Invalid(gp.Child("port"), p, "must be 1-65534: the gateway also takes TCP port+1 for registration"))
		}
		if k := g.Address + "/" + fmt.Sprint(p); addrs[k] {
			errs = append(errs, field.Duplicate(gp.Child("port"), p))
		} else {
			addrs[k] = true
			// Two gateway processes of this cluster on one address: their TCP pairs must not overlap.
			for _, q := range []int32{p - 1, p + 1} {
				if addrs[g.Address+"/"+fmt.Sprint(q)] {
					errs = append(errs, field.Invalid(gp.Child("port"), p, fmt.Sprintf(
						"another gateway of this LoadBalancer on %s uses port %d: each takes TCP port and port+1, so keep them at least 2 apart",
						g.Address, q)))
				}
			}
		}
		if ep == p || ep == p+1 {
			errs = append(errs, field.Invalid(gp.Child("port"), p, fmt.Sprintf(
				"the gateway takes TCP %d (admin, loopback) and %d (registration) besides the endpoint's TCP port %d: choose ports that do not overlap",
				p, p+1, ep)))
		}
		if g.PublicKey != "" {
			if _, err := wg.ParseKey(g.PublicKey); err != nil {
				errs = append(errs, field.Invalid(gp.Child("publicKey"), g.PublicKey, err.Error()))
			}
		}
	}
	tp := bp.Child("tunnel")
	switch f := w.Tunnel.EffectiveFamily(); f {
	case lbv1.FamilyIPv6, lbv1.FamilyIPv4:
		if pfx, err := wg.ParseTunnelPrefix(w.Tunnel.EffectivePrefix()); err != nil {
			errs = append(errs, field.Invalid(tp.Child("prefix"), w.Tunnel.Prefix, err.Error()))
		} else if pfx.Addr().Is4() != (f == lbv1.FamilyIPv4) {
			errs = append(errs, field.Invalid(tp.Child("prefix"), w.Tunnel.Prefix, "must be a prefix of tunnel.family "+f))
		}
	default:
		errs = append(errs, field.NotSupported(tp.Child("family"), f, []string{lbv1.FamilyIPv6, lbv1.FamilyIPv4}))
	}
	errs = append(errs, w.PersistentKeepalive.ValidateForm(bp.Child("persistentKeepalive"))...)
	if k := w.PersistentKeepalive; k != nil && k.Invalid() == "" {
		if d := k.Duration; d < 1e9 || d%1e9 != 0 || d > 65535e9 {
			errs = append(errs, field.Invalid(bp.Child("persistentKeepalive"), d.String(), "must be whole seconds between 1s and 65535s"))
		}
	}
	hp := bp.Child("health")
	errs = append(errs, w.Health.Interval.ValidateForm(hp.Child("interval"))...)
	errs = append(errs, w.Health.Timeout.ValidateForm(hp.Child("timeout"))...)
	for _, x := range []struct {
		name string
		v    int32
	}{{"rise", w.Health.Rise}, {"fall", w.Health.Fall}} {
		if x.v < 0 || x.v > 10 {
			errs = append(errs, field.Invalid(hp.Child(x.name), x.v, "must be 1-10 (0 for the default)"))
		}
	}
	if spec.Quiesce.EffectiveDrainPeriod() <= 0 {
		errs = append(errs, field.Invalid(field.NewPath("spec", "quiesce", "drainPeriod"), "0s",
			"must be positive with the wireguard backend: the gateways close a quiesced member's open connections when it ends"))
	}
	if w.Agent.Image == "" && b.opts.AgentImage == "" {
		errs = append(errs, field.Required(bp.Child("agent", "image"),
			"this manager has no default agent image: set it here, or start the manager with --agent-image"))
	}
	return errs
}

// claims are the ports a LoadBalancer takes on each gateway address: TCP (the endpoint's port,
// the admin port, the registration port) and UDP (WireGuard).
func claims(lb *lbv1.LoadBalancer) map[string][]string {
	out := map[string][]string{}
	ep := lb.Spec.EffectivePort()
	for _, g := range lb.Spec.Backend.WireGuard.Gateways {
		p := g.EffectivePort()
		out[g.Address] = append(out[g.Address], fmt.Sprintf("TCP %d", ep), fmt.Sprintf("TCP %d", p),
			fmt.Sprintf("TCP %d", p+1), fmt.Sprintf("UDP %d", p))
	}
	return out
}

// older orders LoadBalancers by age, then namespace/name: the older keeps a contested port.
func older(a, b *lbv1.LoadBalancer) bool {
	if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
		return a.CreationTimestamp.Before(&b.CreationTimestamp)
	}
	return a.Namespace+"/"+a.Name < b.Namespace+"/"+b.Name
}

// portConflict returns a message when an older wireguard LoadBalancer takes a port this one
// needs on the same gateway address (gateways shared by several clusters: one process, and so
// one set of ports, per cluster). Gateways are compared by address as written.
func (b *Backend) portConflict(ctx context.Context, lb *lbv1.LoadBalancer) (string, error) {
	var all lbv1.LoadBalancerList
	if err := b.opts.Client.List(ctx, &all); err != nil {
		return "", fmt.Errorf("listing LoadBalancers to check gateway ports: %w", err)
	}
	mine := claims(lb)
	for i := range all.Items {
		o := &all.Items[i]
		if o.UID == lb.UID || o.Spec.Backend.WireGuard == nil || !o.DeletionTimestamp.IsZero() || !older(o, lb) {
			continue
		}
		theirs := claims(o)
		// In spec order, so that the message names the same port every time.
		for _, gw := range lb.Spec.Backend.WireGuard.Gateways {
			addr := gw.Address
			for _, c := range mine[addr] {
				for _, t := range theirs[addr] {
					if c == t {
						return fmt.Sprintf("gateway address %s: %s is taken by LoadBalancer %s/%s (created earlier); give this LoadBalancer's "+
							"gateways other ports (spec.backend.wireguard.gateways[].port takes UDP port, TCP port and port+1) or another spec.endpoint.port",
							addr, c, o.Namespace, o.Name), nil
					}
				}
			}
		}
	}
	return "", nil
}
