// Package static is the backend without a data plane: it publishes either a fixed endpoint (an
// externally managed load balancer or a DNS name, spec.endpoint.host) or the address of one ready
// member.
//
// The second mode exists for small or pre-addressed clusters: KubeadmControlPlane creates its
// first Machine only once the Cluster has an endpoint, so with spec.endpoint.host empty the
// endpoint can only be published once some member exists and is ready (a Machine created by
// other means, or a Node). It is also not highly available: the Cluster's endpoint is written
// once and never overwritten, so when the published member leaves, clients that use the
// Cluster's endpoint lose it. Use a fixed host (a DNS name or an external load balancer) or a VIP
// backend for anything that must survive the loss of a member.
package static

import (
	"context"
	"fmt"
	"net"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/log"

	lbv1 "github.com/caplb/caplb/api/v1alpha1"
	"github.com/caplb/caplb/providers"
)

// Kind is the name of the backend under spec.backend.
const Kind = "static"

// DefaultAddressTypes is the member address preference when spec.backend.static.addressTypes is
// empty.
var DefaultAddressTypes = []string{"InternalIP", "ExternalIP"}

// quiescePoll is how soon to look again at a member that still carries the endpoint because no
// other member could take it over.
const quiescePoll = 5 * time.Second

// Dialer opens the TCP connection of an endpoint probe. *net.Dialer satisfies it.
type Dialer interface {
	DialContext(ctx context.Context, network, address string) (net.Conn, error)
}

// Backend is the static backend. The zero value is ready to use; it is safe for concurrent use
// by reconciles of different LoadBalancers.
type Backend struct {
	// Dialer probes fixed endpoints; nil means a plain net.Dialer.
	Dialer Dialer
	// Now is the clock; nil reads the wall clock.
	Now providers.Clock
	// Notify, when set, is called with a LoadBalancer whose endpoint probe result changed; the
	// backend then re-probes endpoints by itself and never asks for a periodic requeue (the
	// controller reconciles on Notify). Nil: the reconcile is requeued every healthCheck.interval.
	Notify func(namespace, name string)

	// probes holds the last probe per LoadBalancer and runs new ones in the background (see
	// prober). It is a cache, not state: losing it (a restart) costs one extra probe.
	once   sync.Once
	probes *prober
}

var _ providers.Backend = &Backend{}

// New returns a static backend that dials with a net.Dialer.
func New() *Backend { return &Backend{} }

// Kind implements providers.Backend.
func (b *Backend) Kind() string { return Kind }

// Validate implements providers.Backend.
func (b *Backend) Validate(lb *lbv1.LoadBalancer) field.ErrorList {
	var errs field.ErrorList
	spec := &lb.Spec
	path := field.NewPath("spec", "backend", "static")
	if spec.Backend.Static == nil {
		return append(errs, field.Required(path, "the static backend needs spec.backend.static (it may be empty: {})"))
	}
	seen := map[string]bool{}
	for i, t := range spec.Backend.Static.AddressTypes {
		if seen[t] {
			errs = append(errs, field.Duplicate(path.Child("addressTypes").Index(i), t))
		}
		seen[t] = true
	}
	if spec.Endpoint.Host != "" && spec.Backend.Static.OnPublishedMemberLeave == lbv1.MemberLeaveMoveEndpoint {
		errs = append(errs, field.Invalid(path.Child("onPublishedMemberLeave"), spec.Backend.Static.OnPublishedMemberLeave,
			"MoveEndpoint moves the Cluster off a leaving member's address, and spec.endpoint.host is set (a fixed endpoint, no member's): "+
				"remove spec.backend.static.onPublishedMemberLeave or spec.endpoint.host"))
	}
	if spec.Endpoint.Host == "" && spec.Endpoint.Port != 0 && spec.Endpoint.Port != spec.EffectiveTargetPort() {
		errs = append(errs, field.Invalid(field.NewPath("spec", "endpoint", "port"), spec.Endpoint.Port,
			fmt.Sprintf("with spec.endpoint.host empty the static backend publishes a member's own address, "+
				"so the port must be the members' port: remove spec.endpoint.port or set it to spec.targetPort (%d)",
				spec.EffectiveTargetPort())))
	}
	return errs
}

// Ensure implements providers.Backend.
func (b *Backend) Ensure(ctx context.Context, lb *lbv1.LoadBalancer, members []providers.Member) (providers.EndpointStatus, error) {
	if lb.Spec.Endpoint.Host != "" {
		return b.ensureFixed(ctx, lb, members), nil
	}
	return b.ensureMember(lb, members), nil
}

// ensureFixed publishes spec.endpoint: an externally managed load balancer. Every ready member
// whose state is in rotation is in rotation at once: the external load balancer does its own
// health checks, and caplb cannot see inside it.
func (b *Backend) ensureFixed(ctx context.Context, lb *lbv1.LoadBalancer, members []providers.Member) providers.EndpointStatus {
	st := providers.EndpointStatus{
		Endpoint:   lbv1.APIEndpoint{Host: lb.Spec.Endpoint.Host, Port: lb.Spec.EffectivePort()},
		InRotation: map[string]bool{},
	}
	for _, m := range members {
		// A member that is not ready yet (a Machine still provisioning) is not counted as
		// active even though the external load balancer may already list it.
		if m.State.InRotation() && m.Ready {
			st.InRotation[m.Name] = true
		}
	}
	if lb.Spec.HealthCheck.Disabled {
		st.Available, st.Reason, st.Message = true, lbv1.EndpointAvailableReason, "health check disabled: endpoint assumed available"
		return st
	}
	target := net.JoinHostPort(st.Endpoint.Host, strconv.Itoa(int(st.Endpoint.Port)))
	res, known, next := b.prober().last(probeKey(lb), target, lb.Spec.HealthCheck.EffectiveInterval(), lb.Spec.HealthCheck.EffectiveTimeout())
	st.RequeueAfter = next
	// The condition says reachable or not, never the dial error: a tenant who may point
	// spec.endpoint anywhere must not learn more about the manager's network from it (refused vs
	// filtered, resolver errors). The error goes to the manager's log for the operator.
	switch {
	case !known:
		st.Reason, st.Message = lbv1.WaitingForEndpointReason, fmt.Sprintf("probing %s (TCP connect)", target)
	case res.err != nil:
		log.FromContext(ctx).V(1).Info("Endpoint probe failed", "target", target, "error", res.err.Error())
		st.Reason = lbv1.EndpointUnreachableReason
		st.Message = fmt.Sprintf("TCP connect to %s did not succeed within %s", target, lb.Spec.HealthCheck.EffectiveTimeout())
	default:
		st.Available, st.Reason, st.Message = true, lbv1.EndpointAvailableReason, fmt.Sprintf("TCP connect to %s succeeded", target)
	}
	return st
}

func (b *Backend) prober() *prober {
	b.once.Do(func() {
		d := b.Dialer
		if d == nil {
			d = &net.Dialer{}
		}
		var notify func(string)
		if b.Notify != nil {
			notify = func(key string) {
				// probeKey: <uid>/<namespace>/<name>
				if parts := strings.SplitN(key, "/", 3); len(parts) == 3 {
					b.Notify(parts[1], parts[2])
				}
			}
		}
		b.probes = newProber(d, b.Now.Now, notify)
	})
	return b.probes
}

func probeKey(lb *lbv1.LoadBalancer) string {
	return string(lb.UID) + "/" + lb.Namespace + "/" + lb.Name
}

// candidate is a member that may carry the endpoint.
type candidate struct {
	name, address string
}

// ensureMember publishes the address of one ready member in rotation. The choice is sticky: the
// current endpoint stays while a candidate still has that address, so the endpoint moves only
// when it must. Otherwise the first candidate by name wins, so that two reconciles (or two
// managers after a restart) agree.
func (b *Backend) ensureMember(lb *lbv1.LoadBalancer, members []providers.Member) providers.EndpointStatus {
	port := lb.Spec.EffectivePort()
	st := providers.EndpointStatus{InRotation: map[string]bool{}}
	prefs := addressTypes(lb)
	var cands []candidate
	for _, m := range members {
		addr := preferredAddress(m, prefs)
		if !m.State.InRotation() || !m.Ready || addr == "" {
			continue
		}
		// Every eligible member is "in rotation": static has no data plane, so being in
		// rotation means being ready to carry the endpoint when the current holder leaves.
		st.InRotation[m.Name] = true
		cands = append(cands, candidate{name: m.Name, address: addr})
	}
	sort.Slice(cands, func(i, j int) bool { return cands[i].name < cands[j].name })

	current := lb.Status.Endpoint.Host
	for _, c := range cands {
		if c.address == current {
			st.Endpoint = lbv1.APIEndpoint{Host: c.address, Port: port}
			st.Available, st.Reason = true, lbv1.EndpointAvailableReason
			st.Message = fmt.Sprintf("publishing the address of member %s", c.name)
			return st
		}
	}
	if len(cands) == 0 {
		// Keep what was published: there is nothing better, and a Cluster endpoint that was
		// written from it stays in certificates and kubeconfigs anyway.
		st.Endpoint = lb.Status.Endpoint
		st.Reason = lbv1.WaitingForEndpointReason
		st.Message = "no ready member in rotation with an address of type " + fmt.Sprint(prefs)
		return st
	}
	chosen := cands[0]
	st.Endpoint = lbv1.APIEndpoint{Host: chosen.address, Port: port}
	st.Available, st.Reason = true, lbv1.EndpointAvailableReason
	st.Message = fmt.Sprintf("publishing the address of member %s", chosen.name)
	if current != "" {
		from := holder(members, current, prefs)
		st.Events = append(st.Events, providers.Event{
			Warning: true,
			Reason:  lbv1.EventEndpointMoved,
			Message: fmt.Sprintf("endpoint moved from %s (%s) to %s (member %s): the previous member left rotation; "+
				"clients that use the old address (e.g. the Cluster's controlPlaneEndpoint) must be updated",
				current, from, chosen.address, chosen.name),
		})
	}
	return st
}

// holder names the member whose preferred address is addr, for messages.
func holder(members []providers.Member, addr string, prefs []string) string {
	for _, m := range members {
		if preferredAddress(m, prefs) == addr {
			return fmt.Sprintf("member %s, %s", m.Name, m.State)
		}
	}
	return "member gone"
}

func addressTypes(lb *lbv1.LoadBalancer) []string {
	if s := lb.Spec.Backend.Static; s != nil && len(s.AddressTypes) > 0 {
		return s.AddressTypes
	}
	return DefaultAddressTypes
}

// preferredAddress returns the member's address of the first preferred type it has.
func preferredAddress(m providers.Member, prefs []string) string {
	for _, t := range prefs {
		if a := m.Addresses[t]; a != "" {
			return a
		}
	}
	return ""
}

// Quiesce implements providers.Backend: done once the member no longer carries the endpoint
// (Ensure moved it, which it does as soon as the member's state leaves rotation and another
// member can take over) and spec.quiesce.drainPeriod has passed since the member left rotation.
func (b *Backend) Quiesce(_ context.Context, lb *lbv1.LoadBalancer, m providers.Member) (providers.QuiesceStatus, error) {
	if lb.Spec.Endpoint.Host == "" && lb.Status.Endpoint.Host != "" &&
		preferredAddress(m, addressTypes(lb)) == lb.Status.Endpoint.Host {
		return providers.QuiesceStatus{RequeueAfter: quiescePoll}, nil
	}
	left := lb.Spec.Quiesce.EffectiveDrainPeriod() - b.Now.Now().Sub(m.Since)
	if left > 0 {
		return providers.QuiesceStatus{RequeueAfter: left}, nil
	}
	return providers.QuiesceStatus{Done: true}, nil
}

// Restore implements providers.Backend: nothing to undo, Ensure takes the member back.
func (b *Backend) Restore(context.Context, *lbv1.LoadBalancer, providers.Member) (providers.QuiesceStatus, error) {
	return providers.QuiesceStatus{Done: true}, nil
}

// Release implements providers.Backend: forgets the cached probe.
func (b *Backend) Release(_ context.Context, lb *lbv1.LoadBalancer) error {
	b.prober().forget(probeKey(lb))
	return nil
}
