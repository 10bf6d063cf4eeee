// Package vip is the management side of the arp and bgp backends: one implementation serving
// both kinds. It resolves the VIP (spec.endpoint.host or a CAPI IPAM claim), keeps the bootstrap
// Secret the control plane's Machines boot the node agent from, and drives the agents' versioned
// membership and quiesce requests through annotations on the workload cluster's Nodes, reading
// back what each agent reports on its own Node. See docs/design/membership.md.
package vip

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentv1 "github.com/caplb/caplb/api/agent/v1alpha1"
	lbv1 "github.com/caplb/caplb/api/v1alpha1"
	"github.com/caplb/caplb/providers"
)

// Options are the backend's dependencies.
type Options struct {
	// Client reads and writes the management cluster (LoadBalancers' claims, Secrets). It must
	// not serve Secrets from a cache that holds every Secret of the cluster.
	Client client.Client
	// Workload reaches the workload clusters' Nodes (CAPI's ClusterCache).
	Workload WorkloadClients
	// AgentImage is the agent's image when spec.backend.<kind>.agent.image is empty (the
	// manager's --agent-image).
	AgentImage string
	// Now is the clock; nil reads the wall clock.
	Now providers.Clock
	// Polling paces the waits on node-side reports; zero fields take providers' defaults.
	providers.Polling
}

// Backend serves one kind ("arp" or "bgp"). Both kinds' backends may share one Options.
type Backend struct {
	kind string
	opts Options

	// quiescedAt remembers when a member was first seen quiesced, per LoadBalancer UID and
	// Node, to count the drain period from there. Losing it (a restart) restarts the count: a
	// quiesce can only take longer, never finish early.
	quiescedAt sync.Map
}

var _ providers.Backend = &Backend{}

// NewARP returns the arp backend.
func NewARP(o Options) *Backend { return &Backend{kind: lbv1.BackendARP, opts: o} }

// NewBGP returns the bgp backend.
func NewBGP(o Options) *Backend { return &Backend{kind: lbv1.BackendBGP, opts: o} }

// Kind implements providers.Backend.
func (b *Backend) Kind() string { return b.kind }

func (b *Backend) staleAfter() time.Duration  { return b.opts.StaleAfterOrDefault() }
func (b *Backend) pendingPoll() time.Duration { return b.opts.PendingPollOrDefault() }
func (b *Backend) resync() time.Duration      { return b.opts.ResyncOrDefault() }

// Ensure implements providers.Backend: the VIP first (published as soon as it is known, before
// any Machine exists), then the bootstrap Secret and, once members have Nodes, one membership
// step and the Node annotations.
func (b *Backend) Ensure(ctx context.Context, lb *lbv1.LoadBalancer, members []providers.Member) (providers.EndpointStatus, error) {
	st := providers.EndpointStatus{InRotation: map[string]bool{}}
	addr, err := b.resolveAddress(ctx, lb)
	if err != nil {
		return st, err
	}
	st.Conditions = append(st.Conditions, addr.cond)
	if addr.vip == "" {
		st.Reason, st.Message = lbv1.WaitingForEndpointReason, "waiting for the VIP: "+addr.cond.Message
		st.RequeueAfter = b.resync()
		st.Conditions = append(st.Conditions, metav1.Condition{Type: lbv1.AgentsReadyCondition, Status: metav1.ConditionUnknown,
			Reason: lbv1.WaitingForAddressReason, Message: "no agent runs before the VIP is known"})
		return st, nil
	}
	st.Endpoint = lbv1.APIEndpoint{Host: addr.vip, Port: lb.Spec.EffectivePort()}
	b.ensureTakeOver(ctx, lb, addr.vip, members, &st)

	sec, cur, err := b.loadSecret(ctx, lb)
	if err != nil {
		return st, err
	}
	cands := candidates(members)
	ag := b.readAgents(ctx, lb, cands, cur)
	pending := pendingChange(cands, cur)
	if ag.client != nil {
		nm, issued, due, err := b.stepMembership(ctx, lb, sec, addr.vip, cur, cands, ag.views)
		if err != nil {
			return st, err
		}
		if issued != nil {
			st.Events = append(st.Events, *issued)
		}
		pending = pending || due
		cur = nm
	}
	if err := b.writeSecret(ctx, lb, sec, addr.vip, cur); err != nil {
		return st, err
	}
	if ag.client == nil {
		agentsUnread(&st, ag.err, len(cands) > 0 || len(cur.Members) > 0, b.resync())
		return st, nil
	}
	if err := annotateNodes(ctx, ag.client, ag.nodes, cands, cur); err != nil {
		return st, err
	}
	if b.reportRotation(&st, lb, members, addr.vip, cur, ag.views) {
		pending = true
	}
	if pending {
		st.RequeueAfter = b.pendingPoll()
	} else {
		st.RequeueAfter = b.resync()
	}
	return st, nil
}

// agents is what Ensure read of the members' agents: the workload cluster's client (nil when it
// cannot be read, err saying why), each agent's view from its Node, and the Nodes.
type agents struct {
	client client.Client
	err    error
	views  views
	nodes  map[string]*corev1.Node
}

// readAgents reads the Nodes of the candidates and of the current members, when there are any.
func (b *Backend) readAgents(ctx context.Context, lb *lbv1.LoadBalancer, cands []candidate, cur agentv1.Membership) agents {
	ag := agents{views: views{}, nodes: map[string]*corev1.Node{}}
	if len(cands) == 0 && len(cur.Members) == 0 {
		return ag
	}
	wl, err := b.workload(ctx, lb)
	if err != nil {
		ag.err = err
		return ag
	}
	names := make([]string, 0, len(cands)+len(cur.Members))
	for _, c := range cands {
		names = append(names, c.node)
	}
	for _, m := range cur.Members {
		names = append(names, m.Name)
	}
	vs, nodes, err := b.readViews(ctx, wl, names)
	if err != nil {
		ag.err = err
		return ag
	}
	ag.client, ag.views, ag.nodes = wl, vs, nodes
	return ag
}

// pendingChange reports whether something waits on an agent (a joiner's first report, a
// leaver's hand-over), so that Ensure looks again soon even if the workload Node watch is not
// connected yet.
func pendingChange(cands []candidate, cur agentv1.Membership) bool {
	for _, c := range cands {
		if (c.state == lbv1.TargetRemoving) == cur.Has(c.node) && c.state != lbv1.TargetRemoved {
			return true
		}
	}
	return false
}

// stepMembership issues the next membership (one change at a time) once a majority of the
// current one's members run it. It returns the membership in force, the event to record (nil
// when none was issued), and whether a change is due (issued or waiting for that majority).
func (b *Backend) stepMembership(ctx context.Context, lb *lbv1.LoadBalancer, sec *corev1.Secret, vip string,
	cur agentv1.Membership, cands []candidate, vs views) (in agentv1.Membership, issued *providers.Event, due bool, err error) {
	nm, ch, due := next(cur, desired(cur, cands, vs))
	if !due || !vs.acknowledged(cur) {
		return cur, nil, due, nil
	}
	if err := b.writeSecret(ctx, lb, sec, vip, nm); err != nil {
		return cur, nil, due, err
	}
	ctrl.LoggerFrom(ctx).Info("Issued a new membership", "version", nm.Version, "change", ch.String(), "members", len(nm.Members))
	return nm, &providers.Event{Reason: "MembershipChanged",
		Message: fmt.Sprintf("membership version %d: %s (%d members)", nm.Version, ch, len(nm.Members))}, true, nil
}

// agentsUnread reports a VIP whose agents cannot be read (yet).
func agentsUnread(st *providers.EndpointStatus, err error, haveMembers bool, resync time.Duration) {
	st.RotationUnknown = haveMembers
	st.RequeueAfter = resync
	st.Reason, st.Message = lbv1.WaitingForEndpointReason, "the VIP is allocated; no agent report read yet"
	if err != nil {
		st.Message = "the VIP is allocated; agents' reports cannot be read: " + err.Error()
	}
	st.Conditions = append(st.Conditions, metav1.Condition{Type: lbv1.AgentsReadyCondition, Status: metav1.ConditionUnknown,
		Reason: lbv1.WaitingForAgentsReason, Message: st.Message})
}

// annotateNodes writes the membership on every candidate's Node (joiners learn it too), and a
// quiesce request on the Nodes of members that are out or leaving.
func annotateNodes(ctx context.Context, wl client.Client, nodes map[string]*corev1.Node, cands []candidate, cur agentv1.Membership) error {
	var errs []error
	for _, c := range cands {
		node := nodes[c.node]
		if node == nil {
			continue
		}
		if err := setNodeAnnotation(ctx, wl, node, agentv1.MembershipAnnotation, cur.String()); err != nil {
			errs = append(errs, err)
		}
		if why := quiesceReason(c.state); why != "" {
			if err := setNodeAnnotation(ctx, wl, node, agentv1.QuiesceAnnotation, why); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// reportRotation fills in who is in rotation, who serves the VIP and the AgentsReady condition;
// it reports whether agents lag behind (or none runs yet), which Ensure polls for.
func (b *Backend) reportRotation(st *providers.EndpointStatus, lb *lbv1.LoadBalancer, members []providers.Member,
	vip string, cur agentv1.Membership, vs views) (lagging bool) {
	for _, m := range members {
		if m.NodeName != "" && vs.inRotation(cur, m.NodeName) {
			st.InRotation[m.Name] = true
		}
	}
	holder := vs.holder(cur, "")
	st.Available = holder != ""
	if lb.Spec.Backend.ARP != nil {
		st.VIPOwner = holder
	}
	switch {
	case !st.Available:
		st.Reason, st.Message = lbv1.WaitingForEndpointReason, "no member's agent reports serving the VIP "+vip
	case lb.Spec.Backend.BGP != nil:
		st.Reason, st.Message = lbv1.EndpointAvailableReason, fmt.Sprintf("%s announces %s (membership version %d)", holder, vip, cur.Version)
	default:
		st.Reason, st.Message = lbv1.EndpointAvailableReason, fmt.Sprintf("%s holds %s (membership version %d)", holder, vip, cur.Version)
	}
	acked, behind := vs.acks(cur)
	ready := metav1.Condition{Type: lbv1.AgentsReadyCondition, Status: metav1.ConditionTrue, Reason: lbv1.AgentsReadyReason,
		Message: fmt.Sprintf("%d of %d members run membership version %d", acked, len(cur.Members), cur.Version)}
	if len(behind) > 0 || len(cur.Members) == 0 {
		ready.Status, ready.Reason = metav1.ConditionFalse, lbv1.WaitingForAgentsReason
		if len(behind) > 0 {
			ready.Message += "; lagging: " + joinNames(behind)
		} else {
			ready.Message = "no member yet: waiting for a Machine with a Node whose agent reports"
		}
		lagging = true
	}
	st.Conditions = append(st.Conditions, ready)
	return lagging
}

// quiesceReason is the quiesce annotation's value for a member in state s, "" for none.
func quiesceReason(s lbv1.TargetState) string {
	switch s {
	case lbv1.TargetDisabling, lbv1.TargetDisabled:
		return "disabled"
	case lbv1.TargetRemoving, lbv1.TargetRemoved:
		return "removing"
	}
	return ""
}

// Quiesce implements providers.Backend. Done only when the member's agent reports it quiesced
// (or its node is down while another member serves the VIP), the drain period has passed since,
// and — for a member being removed — a membership without it is issued and run by a majority of
// its members. During a kube-vip takeover a machine outside the membership (one from before
// caplb, running kube-vip) is done only once a caplb member holds (arp) or announces (bgp, with
// every router's session Established) the VIP. Never on a timer alone; the controller bounds the wait with spec.quiesce.timeout.
func (b *Backend) Quiesce(ctx context.Context, lb *lbv1.LoadBalancer, m providers.Member) (providers.QuiesceStatus, error) {
	wait := providers.QuiesceStatus{RequeueAfter: b.pendingPoll()}
	if m.NodeName == "" {
		// No Node, so never a member of any issued version: nothing of ours to hand over.
		return providers.QuiesceStatus{Done: true}, nil
	}
	log := ctrl.LoggerFrom(ctx).WithValues("member", m.Name, "node", m.NodeName)
	_, cur, err := b.loadSecret(ctx, lb)
	if err != nil {
		return wait, err
	}
	wl, err := b.workload(ctx, lb)
	if err != nil {
		log.V(1).Info("Cannot reach the workload cluster; quiesce waits", "reason", err.Error())
		return wait, nil
	}
	names := []string{m.NodeName}
	for _, x := range cur.Members {
		names = append(names, x.Name)
	}
	vs, nodes, err := b.readViews(ctx, wl, names)
	if err != nil {
		return wait, err
	}
	if node := nodes[m.NodeName]; node != nil {
		if err := setNodeAnnotation(ctx, wl, node, agentv1.QuiesceAnnotation, quiesceReason(m.State)); err != nil {
			return wait, err
		}
	}
	key := string(lb.UID) + "/" + m.NodeName
	var out bool
	var why string
	if cur.Has(m.NodeName) {
		out, why = vs.quiesced(cur, m.NodeName)
	} else {
		// Already out of the membership: a non-member never claims. Only a node that still
		// holds from before (the version-0 bootstrap) must let go first.
		v := vs[m.NodeName]
		out = !v.reported || v.dead() || !v.status.Holding || v.status.Quiesced
		why = "it is not a member and does not hold the VIP"
		if bgp := lb.Spec.Backend.BGP != nil; out && kubeVIPTakeOver(lb) != nil && vs.takeOverServer(cur, m.NodeName, bgp) == "" {
			// A machine from before caplb runs kube-vip, which may still serve the VIP: it
			// leaves once a caplb member holds it (a BGP member: announces it to every router,
			// each session Established), not while only kube-vip stands between the clients and
			// an outage (spec.quiesce.timeout bounds the wait). A BGP kube-vip without election
			// announces from this very node, so the routers keep a path only if a caplb member's
			// routes reach them too.
			out, why = false, "a kube-vip takeover is under way and no caplb member serves the VIP yet"
			if bgp {
				why = "a kube-vip takeover is under way and " + noSessionsYet
			}
		}
	}
	if !out {
		b.quiescedAt.Delete(key)
		log.V(1).Info("Waiting for the agent to quiesce", "why", why)
		return wait, nil
	}
	now := b.opts.Now.Now()
	first, _ := b.quiescedAt.LoadOrStore(key, now)
	if left := lb.Spec.Quiesce.EffectiveDrainPeriod() - now.Sub(first.(time.Time)); left > 0 {
		return providers.QuiesceStatus{RequeueAfter: min(left, b.pendingPoll())}, nil
	}
	if m.State == lbv1.TargetRemoving {
		if cur.Has(m.NodeName) {
			log.V(1).Info("Quiesced; waiting for the membership without it")
			return wait, nil
		}
		if !vs.acknowledged(cur) {
			log.V(1).Info("Quiesced and removed; waiting for a majority to run the new membership", "version", cur.Version)
			return wait, nil
		}
	}
	b.quiescedAt.Delete(key)
	log.V(1).Info("Quiesce confirmed", "why", why)
	return providers.QuiesceStatus{Done: true}, nil
}

// Restore implements providers.Backend: removing the quiesce request is enough; Ensure puts the
// member back in rotation once its agent reports being in the data plane.
func (b *Backend) Restore(ctx context.Context, lb *lbv1.LoadBalancer, m providers.Member) (providers.QuiesceStatus, error) {
	b.quiescedAt.Delete(string(lb.UID) + "/" + m.NodeName)
	if m.NodeName == "" {
		return providers.QuiesceStatus{Done: true}, nil
	}
	wl, err := b.workload(ctx, lb)
	if err != nil {
		return providers.QuiesceStatus{RequeueAfter: b.pendingPoll()}, nil
	}
	node := &corev1.Node{}
	if err := wl.Get(ctx, client.ObjectKey{Name: m.NodeName}, node); err != nil {
		if apierrors.IsNotFound(err) {
			return providers.QuiesceStatus{Done: true}, nil
		}
		return providers.QuiesceStatus{}, fmt.Errorf("reading Node %s: %w", m.NodeName, err)
	}
	if err := setNodeAnnotation(ctx, wl, node, agentv1.QuiesceAnnotation, ""); err != nil {
		return providers.QuiesceStatus{}, err
	}
	return providers.QuiesceStatus{Done: true}, nil
}

// Release implements providers.Backend: the annotations it wrote on reachable Nodes, the
// IPAddressClaim and the bootstrap Secret. An unreachable workload cluster does not hold the
// deletion up (the cluster is usually going away with the LoadBalancer). Only this
// LoadBalancer's Nodes lose their annotations: another LoadBalancer of the Cluster (the control
// plane's VIP beside a worker ingress VIP) keeps its own on its own Nodes.
func (b *Backend) Release(ctx context.Context, lb *lbv1.LoadBalancer) error {
	log := ctrl.LoggerFrom(ctx)
	if c, _ := b.unfence(ctx, lb); c != nil {
		// Not held up: the workload cluster often goes with the LoadBalancer, and an unrenewed
		// fence expires on its own (fenceDurationSeconds).
		log.Info("Cannot delete the kube-vip fence; kube-vip stays fenced until it expires or `caplb cleanup --workload-kubeconfig` removes it", "reason", c.Message)
	}
	if wl, err := b.workload(ctx, lb); err == nil {
		for _, name := range b.memberNodes(ctx, lb) {
			n := &corev1.Node{}
			if err := wl.Get(ctx, client.ObjectKey{Name: name}, n); err != nil {
				if !apierrors.IsNotFound(err) {
					log.Info("Cannot read a Node; leaving its annotations", "node", name, "reason", err.Error())
				}
				continue
			}
			for _, k := range []string{agentv1.MembershipAnnotation, agentv1.QuiesceAnnotation} {
				if err := setNodeAnnotation(ctx, wl, n, k, ""); err != nil {
					log.Info("Cannot remove an annotation", "node", n.Name, "annotation", k, "reason", err.Error())
				}
			}
		}
	} else {
		log.V(1).Info("Workload cluster unreachable; leaving Node annotations", "reason", err.Error())
	}
	var errs []error
	if lb.Spec.Backend.VIP() != nil && lb.Spec.Backend.VIP().AddressFrom != nil {
		claim := &ipamv1.IPAddressClaim{ObjectMeta: metav1.ObjectMeta{Namespace: lb.Namespace, Name: ClaimName(lb)}}
		if err := b.deleteOwned(ctx, lb, claim); err != nil {
			errs = append(errs, err)
		}
	}
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: lb.Namespace, Name: SecretName(lb)}}
	if err := b.deleteOwned(ctx, lb, sec); err != nil {
		errs = append(errs, err)
	}
	b.quiescedAt.Range(func(k, _ any) bool {
		if s := k.(string); len(s) > len(lb.UID) && s[:len(lb.UID)] == string(lb.UID) {
			b.quiescedAt.Delete(k)
		}
		return true
	})
	return errors.Join(errs...)
}

// memberNodes names the Nodes this LoadBalancer annotated: the members of its current membership
// and the Nodes of the targets it still lists (joiners learn the membership too). Machines that
// are gone, or have no Node, name none.
func (b *Backend) memberNodes(ctx context.Context, lb *lbv1.LoadBalancer) []string {
	seen := map[string]bool{}
	var out []string
	add := func(n string) {
		if n != "" && !seen[n] {
			seen[n] = true
			out = append(out, n)
		}
	}
	if _, cur, err := b.loadSecretIfAny(ctx, lb); err == nil {
		for _, m := range cur.Members {
			add(m.Name)
		}
	}
	for _, t := range lb.Status.Targets {
		if lb.Spec.TargetKind.IsNode() {
			add(t.Name)
			continue
		}
		m := &clusterv1.Machine{}
		if err := b.opts.Client.Get(ctx, client.ObjectKey{Namespace: lb.Namespace, Name: t.Name}, m); err == nil {
			add(m.Status.NodeRef.Name)
		}
	}
	return out
}

// deleteOwned deletes obj if it exists and lb controls it.
func (b *Backend) deleteOwned(ctx context.Context, lb *lbv1.LoadBalancer, obj client.Object) error {
	if err := b.opts.Client.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("reading %T %s: %w", obj, obj.GetName(), err)
	}
	if !metav1.IsControlledBy(obj, lb) {
		return nil
	}
	if err := b.opts.Client.Delete(ctx, obj); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting %T %s: %w", obj, obj.GetName(), err)
	}
	return nil
}
