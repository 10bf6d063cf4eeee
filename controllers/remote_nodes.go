package controllers

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/cluster-api/controllers/clustercache"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	lbv1 "github.com/caplb/caplb/api/v1alpha1"
)

// Remote Node targets: a LoadBalancer with targetKind Node and spec.clusterName takes its members
// from that workload cluster's Nodes, read and annotated through CAPI's ClusterCache, which
// reaches a Cluster through its <cluster>-kubeconfig Secret once its infrastructure is
// provisioned. The Cluster may be externally managed (cluster.x-k8s.io/managed-by on its
// infrastructure cluster), with no control plane object and no Machines. Everything else — the
// state machine, the backends, the Node annotations, quiesce through the disabled annotation —
// is the Node path's, through remoteNodeKind.

const (
	// nodeTargetsWatcher names the watch on a workload cluster's Nodes for remote Node targets.
	nodeTargetsWatcher = "loadbalancer-node-targets"
	// workloadRecheck is how soon a LoadBalancer whose workload cluster is unreachable looks
	// again. The ClusterCache's connect event usually comes first; a probe that recovers without
	// a reconnect sends none.
	workloadRecheck = 10 * time.Second
	// workloadProbeFailureWindow: the ClusterCache enqueues a Cluster's LoadBalancers when its
	// health probe (every 10s) has not passed for this long, so that the condition shows an
	// outage before the ClusterCache gives the connection up (five failed probes).
	workloadProbeFailureWindow = 15 * time.Second
)

// workloadCondition is the pure rule for WorkloadClusterReachable: connErr is the ClusterCache's
// answer to GetClient, st its health-checking state. A refused kubeconfig (a *kubeconfigRefusal)
// has the reason naming its field. A connection whose probe has started failing counts as
// unreachable at once: its cache still answers, but with a view that may be stale, and writes
// would fail.
func workloadCondition(clusterName string, connErr error, st clustercache.HealthCheckingState) metav1.Condition {
	c := metav1.Condition{Type: lbv1.WorkloadClusterReachableCondition}
	const keep = "status.targets, the Nodes' annotations and the published endpoint stay as they were"
	var refused *kubeconfigRefusal
	switch {
	case errors.As(connErr, &refused):
		c.Status, c.Reason = metav1.ConditionFalse, refused.Reason
		what := refused.Fix
		if refused.Field != "" {
			what = refused.Field + ": " + refused.Fix
		}
		c.Message = fmt.Sprintf("the manager refuses the %s-kubeconfig Secret and does not connect to workload cluster %s: %s: %s",
			clusterName, clusterName, what, keep)
	case connErr != nil:
		c.Status, c.Reason = metav1.ConditionFalse, lbv1.WorkloadClusterUnreachableReason
		c.Message = fmt.Sprintf("no connection to workload cluster %s through its %s-kubeconfig Secret (%v): %s",
			clusterName, clusterName, connErr, keep)
	case st.ConsecutiveFailures > 0:
		c.Status, c.Reason = metav1.ConditionFalse, lbv1.WorkloadClusterUnreachableReason
		last := "never"
		if !st.LastProbeSuccessTime.IsZero() {
			last = st.LastProbeSuccessTime.UTC().Format(time.RFC3339)
		}
		c.Message = fmt.Sprintf("workload cluster %s: %d health probe(s) in a row failed, last success %s: %s",
			clusterName, st.ConsecutiveFailures, last, keep)
	default:
		c.Status, c.Reason = metav1.ConditionTrue, lbv1.WorkloadClusterReachableReason
		c.Message = fmt.Sprintf("workload cluster %s answers through its %s-kubeconfig Secret", clusterName, clusterName)
	}
	return c
}

// remoteKindFor returns the memberKind of a remote Node LoadBalancer and its
// WorkloadClusterReachable condition: remoteNodeKind while the workload cluster is reachable,
// else unreachableKind.
func (r *LoadBalancerReconciler) remoteKindFor(ctx context.Context, lb *lbv1.LoadBalancer) (memberKind, metav1.Condition) {
	key := client.ObjectKey{Namespace: lb.Namespace, Name: lb.Spec.ClusterName}
	if r.ClusterCache == nil {
		cond := workloadCondition(lb.Spec.ClusterName, errors.New("this manager runs without a ClusterCache"), clustercache.HealthCheckingState{})
		return unreachableKind{why: cond.Message}, cond
	}
	c, err := r.ClusterCache.GetClient(ctx, key)
	cond := workloadCondition(lb.Spec.ClusterName, err, r.ClusterCache.GetHealthCheckingState(ctx, key))
	if cond.Status != metav1.ConditionTrue {
		return unreachableKind{why: cond.Message}, cond
	}
	k := remoteNodeKind{nodeKind: nodeKind{c: c, w: c}}
	if r.NodeTargetsNamespace != "" {
		// Only a manager with Node targets enabled may read (and so could be led to annotate) its
		// own cluster's Nodes; without them a kubeconfig pointing back at the management cluster
		// gets Forbidden for the manager's own identity.
		k.own = &ownNodeGuard{cache: r.Client, live: r.APIReader, verdicts: &r.ownNodeVerdicts}
	}
	return k, cond
}

// remoteNodeKind is nodeKind over a workload cluster's ClusterCache client. That cache has no
// caplb index, so annotated scans the Nodes (a workload cluster's Nodes are in memory).
type remoteNodeKind struct {
	nodeKind
	// own, when set (Node targets enabled), hides the manager's own cluster's Nodes seen through
	// the workload client (remote_fence.go).
	own *ownNodeGuard
}

func (k remoteNodeKind) candidates(ctx context.Context, lb *lbv1.LoadBalancer) ([]client.Object, error) {
	objs, err := k.nodeKind.candidates(ctx, lb)
	if err != nil {
		return nil, fmt.Errorf("workload cluster %s: %w", lb.Spec.ClusterName, err)
	}
	return k.hideOwn(ctx, objs)
}

func (k remoteNodeKind) annotated(ctx context.Context, lb *lbv1.LoadBalancer) ([]client.Object, error) {
	var list corev1.NodeList
	if err := k.c.List(ctx, &list); err != nil {
		return nil, fmt.Errorf("listing Nodes of workload cluster %s: %w", lb.Spec.ClusterName, err)
	}
	var out []client.Object
	for _, o := range objectPtrs[corev1.Node](list.Items) {
		if o.GetAnnotations()[lbv1.NameAnnotation] == ownerValue(lb) {
			out = append(out, o)
		}
	}
	return k.hideOwn(ctx, out)
}

func (k remoteNodeKind) get(ctx context.Context, lb *lbv1.LoadBalancer, name string) (client.Object, error) {
	o, err := k.nodeKind.get(ctx, lb, name)
	if err != nil {
		return o, err
	}
	kept, err := k.hideOwn(ctx, []client.Object{o})
	if err != nil {
		return nil, err
	}
	if len(kept) == 0 {
		return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "nodes"}, name)
	}
	return o, nil
}

// hideOwn drops the objects that are Nodes of the manager's own cluster (see ownNodeGuard).
func (k remoteNodeKind) hideOwn(ctx context.Context, objs []client.Object) ([]client.Object, error) {
	if k.own == nil {
		return objs, nil
	}
	return k.own.filter(ctx, objs)
}

// unreachableKind is the memberKind of a remote Node LoadBalancer whose workload cluster does not
// answer. reconcileMembers does not gather through it (it keeps the last known members); the
// delete and invalid-spec paths skip the Nodes.
type unreachableKind struct{ why string }

func (k unreachableKind) err() error { return fmt.Errorf("workload cluster unreachable: %s", k.why) }

func (unreachableKind) kind() string { return lbv1.NodeKind }
func (unreachableKind) hooks() bool  { return false }
func (k unreachableKind) candidates(context.Context, *lbv1.LoadBalancer) ([]client.Object, error) {
	return nil, k.err()
}
func (k unreachableKind) annotated(context.Context, *lbv1.LoadBalancer) ([]client.Object, error) {
	return nil, k.err()
}
func (k unreachableKind) get(context.Context, *lbv1.LoadBalancer, string) (client.Object, error) {
	return nil, k.err()
}
func (unreachableKind) facts(lb *lbv1.LoadBalancer, obj client.Object) facts {
	return nodeKind{}.facts(lb, obj)
}
func (k unreachableKind) patch(context.Context, client.Object, client.Patch) error { return k.err() }

var (
	_ memberKind = remoteNodeKind{}
	_ memberKind = unreachableKind{}
)

// lastKnownMembers rebuilds the members from status.targets, for a reconcile that cannot read the
// workload cluster: the backend keeps serving exactly what it served.
func lastKnownMembers(lb *lbv1.LoadBalancer) []*member {
	out := make([]*member, 0, len(lb.Status.Targets))
	for _, t := range lb.Status.Targets {
		rec := record{State: t.State, Since: t.Since.Time}
		m := &member{name: t.Name, prev: rec, cur: rec, facts: facts{
			name: t.Name, nodeName: t.Name, address: t.Address, ready: t.Ready,
		}}
		if t.Address != "" {
			m.facts.addresses = map[string]string{"InternalIP": t.Address}
		}
		out = append(out, m)
	}
	return out
}

// reconcileUnreachable is reconcileMembers for a workload cluster that does not answer: nothing
// the manager cannot see changes. status.targets is not rewritten (the members are not gathered),
// no Node is annotated, and the backend is asked to ensure the endpoint with the last known
// members — so that a VIP is still resolved and published before the workload cluster's API
// server exists (it may need the VIP to come up), and an established one is never torn down.
func (r *LoadBalancerReconciler) reconcileUnreachable(ctx context.Context, s *scope) error {
	ctrl.LoggerFrom(ctx).V(1).Info("Workload cluster unreachable; keeping the last known members",
		"targets", len(s.lb.Status.Targets))
	s.requeueAfter(workloadRecheck)
	r.ensure(ctx, s, backendMembers(lastKnownMembers(s.lb)))
	return nil
}

// watchRemoteNodes makes the changes of a remote Node LoadBalancer's workload Nodes that matter
// to it (labels, annotations, cordon, Ready, addresses, creation, deletion) reconcile it at once.
// The watch is added once per connection; a reconcile after a reconnect adds it again.
func (r *LoadBalancerReconciler) watchRemoteNodes(ctx context.Context, s *scope) {
	if r.ClusterCache == nil || r.controller == nil || s.cluster == nil || !s.lb.Spec.RemoteNodes() {
		return
	}
	if _, ok := s.kind.(remoteNodeKind); !ok {
		return
	}
	cluster := s.cluster
	err := r.ClusterCache.Watch(ctx, client.ObjectKeyFromObject(cluster), clustercache.NewWatcher(clustercache.WatcherOptions{
		Name:    nodeTargetsWatcher,
		Watcher: r.controller,
		Kind:    &corev1.Node{},
		EventHandler: handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, _ client.Object) []reconcile.Request {
			return r.clusterToLoadBalancers(ctx, cluster)
		}),
		Predicates: []predicate.Predicate{predicate.Funcs{
			UpdateFunc:  func(e event.UpdateEvent) bool { return memberChanged(nodeView)(e.ObjectOld, e.ObjectNew) },
			CreateFunc:  func(event.CreateEvent) bool { return true },
			DeleteFunc:  func(event.DeleteEvent) bool { return true },
			GenericFunc: func(event.GenericEvent) bool { return false },
		}},
	}))
	if err != nil {
		ctrl.LoggerFrom(ctx).V(4).Info("Not watching the workload cluster's Nodes yet", "reason", err.Error())
	}
}
