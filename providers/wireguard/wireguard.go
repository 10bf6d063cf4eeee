// Package wireguard is the management side of the wireguard backend. It publishes the endpoint
// (on the gateways) as soon as the LoadBalancer exists, keeps the join token, renders the
// members' bootstrap Secret and the gateways' Secret, and reads back what each gateway reports
// (members healthy in rotation, open connections per member) to move members into rotation and
// to release quiesced ones. The data plane is modes/wireguard; see docs/backends/wireguard.md.
package wireguard

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lbv1 "github.com/caplb/caplb/api/v1alpha1"
	"github.com/caplb/caplb/providers"
)

// Options are the backend's dependencies.
type Options struct {
	// Client reads and writes the management cluster's LoadBalancers and Secrets. It must not
	// serve Secrets from a cache that holds every Secret of the cluster.
	Client client.Client
	// Reader reads the gateways' report ConfigMaps, uncached (the manager's API reader): caplb
	// keeps no informer on every ConfigMap of the cluster.
	Reader client.Reader
	// AgentImage is the member's image when spec.backend.wireguard.agent.image is empty.
	AgentImage string
	// Now is the clock; nil reads the wall clock.
	Now providers.Clock
	// Polling paces the waits on node-side reports; zero fields take providers' defaults.
	providers.Polling
}

// Backend is the wireguard backend.
type Backend struct {
	opts Options
	// ackedAt remembers when every gateway first reported a member quiesced, per LoadBalancer
	// UID and node, to count the drain timeout from there. Losing it (a restart) restarts the
	// count: a quiesce can only take longer, never finish early.
	ackedAt sync.Map
}

var _ providers.Backend = &Backend{}

// New returns the wireguard backend.
func New(o Options) *Backend {
	if o.Reader == nil {
		o.Reader = o.Client
	}
	return &Backend{opts: o}
}

// Kind implements providers.Backend.
func (b *Backend) Kind() string { return lbv1.BackendWireGuard }

func (b *Backend) staleAfter() time.Duration  { return b.opts.StaleAfterOrDefault() }
func (b *Backend) pendingPoll() time.Duration { return b.opts.PendingPollOrDefault() }
func (b *Backend) resync() time.Duration      { return b.opts.ResyncOrDefault() }

// Endpoint is what lb publishes: spec.endpoint.host (a DNS name with one record per gateway, or
// an address held across them), else the only gateway's address; the port is the endpoint's.
func Endpoint(lb *lbv1.LoadBalancer) lbv1.APIEndpoint {
	host := lb.Spec.Endpoint.Host
	if gws := lb.Spec.Backend.WireGuard.Gateways; host == "" && len(gws) > 0 {
		host = gws[0].Address
	}
	return lbv1.APIEndpoint{Host: host, Port: lb.Spec.EffectivePort()}
}

// outOfRotation: the member states the gateways keep out of rotation.
func outOfRotation(s lbv1.TargetState) bool {
	switch s {
	case lbv1.TargetDisabling, lbv1.TargetDisabled, lbv1.TargetRemoving, lbv1.TargetRemoved:
		return true
	}
	return false
}

// Ensure implements providers.Backend: the endpoint first (it needs no member and no gateway
// report: the gateways serve it from their Secret), then the join token, the bootstrap and
// gateway Secrets, and from the gateways' reports which members are in rotation.
func (b *Backend) Ensure(ctx context.Context, lb *lbv1.LoadBalancer, members []providers.Member) (providers.EndpointStatus, error) {
	st := providers.EndpointStatus{InRotation: map[string]bool{}}
	if msg, err := b.portConflict(ctx, lb); err != nil {
		return st, err
	} else if msg != "" {
		// Publishing would bake a port another cluster holds into certificates and kubeconfigs.
		st.Reason, st.Message, st.RequeueAfter = lbv1.GatewayPortConflictReason, msg, b.resync()
		st.RotationUnknown = len(members) > 0
		st.Conditions = append(st.Conditions, metav1.Condition{Type: lbv1.GatewaysReadyCondition,
			Status: metav1.ConditionFalse, Reason: lbv1.GatewayPortConflictReason, Message: msg})
		return st, nil
	}
	st.Endpoint = Endpoint(lb)

	token, err := b.token(ctx, lb)
	if err != nil {
		return st, err
	}
	ca, err := b.clusterCA(ctx, lb)
	if err != nil {
		return st, err
	}
	var quiesced []string
	for _, m := range members {
		if m.NodeName != "" && outOfRotation(m.State) {
			quiesced = append(quiesced, m.NodeName)
		}
	}
	if err := b.writeBootstrap(ctx, lb, token); err != nil {
		return st, err
	}
	if err := b.writeGateways(ctx, lb, token, ca, quiesced); err != nil {
		return st, err
	}

	vs, err := b.views(ctx, lb)
	if err != nil {
		return st, err
	}
	var serving, silent []string
	for _, v := range vs {
		if v.fresh {
			serving = append(serving, v.name)
		} else {
			silent = append(silent, v.name+" "+v.why)
		}
	}
	pending := len(silent) > 0
	for _, m := range members {
		if m.NodeName == "" {
			continue
		}
		for _, v := range vs {
			if v.serves(m.NodeName) {
				st.InRotation[m.Name] = true
				break
			}
		}
		if !st.InRotation[m.Name] && !outOfRotation(m.State) {
			pending = true
		}
	}
	// With no gateway report to go by, members keep their states rather than all dropping out.
	st.RotationUnknown = len(serving) == 0 && len(members) > 0

	ready := metav1.Condition{Type: lbv1.GatewaysReadyCondition, Status: metav1.ConditionTrue, Reason: lbv1.GatewaysReadyReason,
		Message: fmt.Sprintf("%d of %d gateways report: %s", len(serving), len(vs), strings.Join(serving, ", "))}
	if len(silent) > 0 {
		ready.Status, ready.Reason = metav1.ConditionFalse, lbv1.WaitingForGatewaysReason
		ready.Message = fmt.Sprintf("%d of %d gateways report; gateway %s", len(serving), len(vs), strings.Join(silent, "; gateway "))
	}
	st.Conditions = append(st.Conditions, ready)
	if len(serving) > 0 {
		st.Available, st.Reason = true, lbv1.EndpointAvailableReason
		st.Message = fmt.Sprintf("gateways %s serve %s:%d", strings.Join(serving, ", "), st.Endpoint.Host, st.Endpoint.Port)
	} else {
		st.Reason = lbv1.WaitingForEndpointReason
		st.Message = fmt.Sprintf("%s:%d is published; no gateway has reported serving it yet (run the gateways from Secret %s)",
			st.Endpoint.Host, st.Endpoint.Port, GatewaySecretName(lb))
	}
	if pending {
		st.RequeueAfter = b.pendingPoll()
	} else {
		st.RequeueAfter = b.resync()
	}
	return st, nil
}

// Quiesce implements providers.Backend. Done only when every gateway reports the member's node
// out of rotation and either no open connection to it, or the drain timeout (the gateways close
// the rest then) has passed since the last of them acknowledged — never on a timer alone. A
// silent gateway holds the quiesce until spec.quiesce.timeout: it may still send the member
// traffic from its last configuration.
func (b *Backend) Quiesce(ctx context.Context, lb *lbv1.LoadBalancer, m providers.Member) (providers.QuiesceStatus, error) {
	wait := providers.QuiesceStatus{RequeueAfter: b.pendingPoll()}
	if m.NodeName == "" {
		// No Node, so its member never registered under a node name a gateway would route to.
		return providers.QuiesceStatus{Done: true}, nil
	}
	log := ctrl.LoggerFrom(ctx).WithValues("member", m.Name, "node", m.NodeName)
	if err := b.setQuiesced(ctx, lb, m.NodeName, true); err != nil {
		return wait, err
	}
	vs, err := b.views(ctx, lb)
	if err != nil {
		return wait, err
	}
	key := string(lb.UID) + "/" + m.NodeName
	conns := 0
	var waiting []string
	for _, v := range vs {
		out, n := v.quiesced(m.NodeName)
		conns += n
		switch {
		case !v.fresh:
			waiting = append(waiting, v.name+" "+v.why)
		case !out:
			waiting = append(waiting, v.name+" still has it in rotation")
		}
	}
	if len(waiting) > 0 {
		b.ackedAt.Delete(key)
		log.V(1).Info("Waiting for the gateways to quiesce the member", "gateways", strings.Join(waiting, "; "))
		return wait, nil
	}
	if conns == 0 {
		b.ackedAt.Delete(key)
		log.V(1).Info("Quiesce confirmed: every gateway reports no open connection")
		return providers.QuiesceStatus{Done: true}, nil
	}
	now := b.opts.Now.Now()
	first, _ := b.ackedAt.LoadOrStore(key, now)
	if left := drainTimeout(lb) - now.Sub(first.(time.Time)); left > 0 {
		log.V(1).Info("Quiesced; waiting for open connections to end", "connections", conns, "left", left)
		return providers.QuiesceStatus{RequeueAfter: min(left, b.pendingPoll())}, nil
	}
	b.ackedAt.Delete(key)
	log.V(1).Info("Quiesce confirmed: the drain timeout passed; the gateways close the rest", "connections", conns)
	return providers.QuiesceStatus{Done: true}, nil
}

// Restore implements providers.Backend: the node leaves the gateways' quiesced list; Ensure puts
// it back in rotation once a gateway reports it healthy.
func (b *Backend) Restore(ctx context.Context, lb *lbv1.LoadBalancer, m providers.Member) (providers.QuiesceStatus, error) {
	b.ackedAt.Delete(string(lb.UID) + "/" + m.NodeName)
	if m.NodeName == "" {
		return providers.QuiesceStatus{Done: true}, nil
	}
	if err := b.setQuiesced(ctx, lb, m.NodeName, false); err != nil {
		return providers.QuiesceStatus{RequeueAfter: b.pendingPoll()}, err
	}
	return providers.QuiesceStatus{Done: true}, nil
}

// Release implements providers.Backend: the three Secrets (the gateways' reports are theirs).
func (b *Backend) Release(ctx context.Context, lb *lbv1.LoadBalancer) error {
	var errs []error
	if lb.Spec.ClusterName != "" {
		for _, name := range []string{BootstrapSecretName(lb), GatewaySecretName(lb), TokenSecretName(lb)} {
			if err := b.deleteOwned(ctx, lb, name); err != nil {
				errs = append(errs, err)
			}
		}
	}
	b.ackedAt.Range(func(k, _ any) bool {
		if strings.HasPrefix(k.(string), string(lb.UID)+"/") {
			b.ackedAt.Delete(k)
		}
		return true
	})
	return errors.Join(errs...)
}

func (b *Backend) deleteOwned(ctx context.Context, lb *lbv1.LoadBalancer, name string) error {
	sec := &corev1.Secret{}
	if err := b.opts.Client.Get(ctx, client.ObjectKey{Namespace: lb.Namespace, Name: name}, sec); err != nil {
		return client.IgnoreNotFound(err)
	}
	if !metav1.IsControlledBy(sec, lb) {
		return nil
	}
	if err := b.opts.Client.Delete(ctx, sec); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("deleting Secret %s/%s: %w", lb.Namespace, name, err)
	}
	return nil
}
