package controllers

import (
	"context"
	"maps"
	"reflect"

	corev1 "k8s.io/api/core/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	"sigs.k8s.io/cluster-api/controllers/clustercache"
	"sigs.k8s.io/cluster-api/util/conditions"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	agentv1 "github.com/caplb/caplb/api/agent/v1alpha1"
	lbv1 "github.com/caplb/caplb/api/v1alpha1"
)

func (r *LoadBalancerReconciler) setupWithManager(mgr ctrl.Manager, name string, workers int, skipNameValidation bool) error {
	opts := controller.Options{MaxConcurrentReconciles: workers}
	if skipNameValidation {
		t := true
		opts.SkipNameValidation = &t
	}
	b := ctrl.NewControllerManagedBy(mgr).
		Named(name).
		WithOptions(opts).
		For(&lbv1.LoadBalancer{}, builderPredicates(lbChanged))
	// CAPI's kinds only where they are served: a watch on a missing kind never syncs and stops
	// the manager (optional_apis.go).
	if r.APIs.Machines {
		b = b.Watches(&clusterv1.Machine{}, handler.EnqueueRequestsFromMapFunc(r.machineToLoadBalancers),
			builderPredicates(memberChanged(machineView)))
	}
	if r.APIs.Clusters {
		b = b.Watches(&clusterv1.Cluster{}, handler.EnqueueRequestsFromMapFunc(r.clusterToLoadBalancers),
			builderPredicates(clusterChanged))
	}
	if r.APIs.IPAM {
		// The VIP backends' IPAddressClaims: an allocation is published at once.
		b = b.Owns(&ipamv1.IPAddressClaim{})
	}
	if r.probeEvents != nil {
		// Endpoint health changes found by the static backend's own probes.
		b = b.WatchesRawSource(source.Channel(r.probeEvents, &handler.EnqueueRequestForObject{}))
	}
	if r.ClusterCache != nil {
		// Workload cluster connects, disconnects and failing health probes: a remote Node
		// LoadBalancer's WorkloadClusterReachable follows them, a reconnect re-adds the watches,
		// and a VIP's first member is made active as soon as the manager reaches it.
		b = b.WatchesRawSource(r.ClusterCache.GetClusterSource(name, r.clusterToWorkloadLoadBalancers,
			clustercache.WatchForProbeFailure(workloadProbeFailureWindow)))
	}
	if r.NodeTargetsNamespace != "" {
		// Only with Node targets enabled: otherwise the manager needs no access to Nodes at all.
		b = b.Watches(&corev1.Node{}, handler.EnqueueRequestsFromMapFunc(r.nodeToLoadBalancers),
			builderPredicates(memberChanged(nodeView)))
	}
	c, err := b.Build(r)
	if err != nil {
		return err
	}
	r.controller = c
	r.cpWatches = &controlPlaneWatches{ctrl: c, cache: mgr.GetCache(), toRequests: r.controlPlaneToLoadBalancers}
	return nil
}

// lbChanged passes LoadBalancer updates that need a reconcile: spec (generation), labels,
// annotations (pause), finalizers (the first reconcile returns after adding ours) and deletion —
// not our own status patches, which would only cause a second, idle reconcile per change.
func lbChanged(old, new client.Object) bool {
	return old.GetGeneration() != new.GetGeneration() ||
		!reflect.DeepEqual(old.GetAnnotations(), new.GetAnnotations()) ||
		!reflect.DeepEqual(old.GetLabels(), new.GetLabels()) ||
		!reflect.DeepEqual(old.GetFinalizers(), new.GetFinalizers()) ||
		!old.GetDeletionTimestamp().Equal(new.GetDeletionTimestamp())
}

// memberView is the part of a member object the controller reacts to.
type memberView struct {
	Labels, Annotations map[string]string
	Deleting            bool
	Ready               bool
	Addresses           map[string]string
	ClusterName         string
	NodeName            string
	// Unschedulable is a Node's cordon (spec.quiesce.whenCordoned).
	Unschedulable bool
}

func machineView(o client.Object) memberView {
	m, ok := o.(*clusterv1.Machine)
	if !ok {
		return memberView{}
	}
	v := memberView{Labels: m.Labels, Annotations: m.Annotations, Deleting: !m.DeletionTimestamp.IsZero(),
		Ready: conditions.IsTrue(m, clusterv1.ReadyCondition), ClusterName: m.Spec.ClusterName, NodeName: m.Status.NodeRef.Name,
		Addresses: map[string]string{}}
	for _, a := range m.Status.Addresses {
		v.Addresses[string(a.Type)+"/"+a.Address] = a.Address
	}
	return v
}

func nodeView(o client.Object) memberView {
	n, ok := o.(*corev1.Node)
	if !ok {
		return memberView{}
	}
	v := memberView{Labels: n.Labels, Annotations: n.Annotations, Deleting: !n.DeletionTimestamp.IsZero(),
		Addresses: map[string]string{}, Unschedulable: n.Spec.Unschedulable}
	if _, ok := n.Annotations[agentv1.AgentStatusAnnotation]; ok {
		// The agents refresh their report's timestamp periodically: only its content matters.
		v.Annotations = maps.Clone(n.Annotations)
		v.Annotations[agentv1.AgentStatusAnnotation] = agentAnnotations(n)
	}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			v.Ready = c.Status == corev1.ConditionTrue
		}
	}
	for _, a := range n.Status.Addresses {
		v.Addresses[string(a.Type)+"/"+a.Address] = a.Address
	}
	return v
}

// memberChanged passes member updates that can change a LoadBalancer's decision; CAPI rewrites
// Machine status often (condition messages, timestamps), and Node heartbeats are frequent.
func memberChanged(view func(client.Object) memberView) func(old, new client.Object) bool {
	return func(old, new client.Object) bool {
		return !reflect.DeepEqual(view(old), view(new))
	}
}

// clusterChanged passes Cluster spec changes (pause, endpoint, controlPlaneRef), pause
// annotations and deletion.
func clusterChanged(old, new client.Object) bool {
	return old.GetGeneration() != new.GetGeneration() ||
		!reflect.DeepEqual(old.GetAnnotations(), new.GetAnnotations()) ||
		!old.GetDeletionTimestamp().Equal(new.GetDeletionTimestamp())
}

// builderPredicates passes creates, deletes and generic events, and updates for which changed
// is true.
func builderPredicates(changed func(old, new client.Object) bool) builder.Predicates {
	return builder.WithPredicates(predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool { return changed(e.ObjectOld, e.ObjectNew) },
	})
}

// machineToLoadBalancers maps a Machine to the LoadBalancers that may care: the one its name
// annotation names, those its caplb hooks name, and every LoadBalancer of its Cluster (its
// selector may now match). All lookups go through cache indexes.
func (r *LoadBalancerReconciler) machineToLoadBalancers(ctx context.Context, o client.Object) []reconcile.Request {
	m, ok := o.(*clusterv1.Machine)
	if !ok {
		return nil
	}
	reqs := map[client.ObjectKey]bool{}
	if n := m.Annotations[lbv1.NameAnnotation]; n != "" {
		reqs[client.ObjectKey{Namespace: m.Namespace, Name: n}] = true
	}
	for k := range m.Annotations {
		if len(k) > len(hookKeyPrefix) && k[:len(hookKeyPrefix)] == hookKeyPrefix {
			// Long names are hashed in the key and cannot be mapped back; the name annotation
			// covers them.
			reqs[client.ObjectKey{Namespace: m.Namespace, Name: k[len(hookKeyPrefix):]}] = true
		}
	}
	if m.Spec.ClusterName != "" {
		var lbs lbv1.LoadBalancerList
		if err := r.Client.List(ctx, &lbs, client.InNamespace(m.Namespace),
			client.MatchingFields{indexLBClusterName: m.Spec.ClusterName}); err != nil {
			ctrl.LoggerFrom(ctx).Error(err, "Listing LoadBalancers of a Machine's Cluster")
		}
		for i := range lbs.Items {
			reqs[client.ObjectKeyFromObject(&lbs.Items[i])] = true
		}
	}
	return toRequests(reqs)
}

// nodeToLoadBalancers maps a Node to the LoadBalancers that target Nodes (few: one per cluster
// that balances itself).
func (r *LoadBalancerReconciler) nodeToLoadBalancers(ctx context.Context, _ client.Object) []reconcile.Request {
	var lbs lbv1.LoadBalancerList
	if err := r.Client.List(ctx, &lbs, client.MatchingFields{indexLBTargetKind: lbv1.NodeKind}); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Listing LoadBalancers that target Nodes")
		return nil
	}
	reqs := map[client.ObjectKey]bool{}
	for i := range lbs.Items {
		reqs[client.ObjectKeyFromObject(&lbs.Items[i])] = true
	}
	return toRequests(reqs)
}

// clusterToLoadBalancers maps a Cluster to the LoadBalancers whose spec.clusterName names it.
func (r *LoadBalancerReconciler) clusterToLoadBalancers(ctx context.Context, o client.Object) []reconcile.Request {
	var lbs lbv1.LoadBalancerList
	if err := r.Client.List(ctx, &lbs, client.InNamespace(o.GetNamespace()),
		client.MatchingFields{indexLBClusterName: o.GetName()}); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Listing LoadBalancers of a Cluster")
		return nil
	}
	reqs := map[client.ObjectKey]bool{}
	for i := range lbs.Items {
		reqs[client.ObjectKeyFromObject(&lbs.Items[i])] = true
	}
	return toRequests(reqs)
}

// clusterToWorkloadLoadBalancers maps a Cluster's ClusterCache event (connect, disconnect,
// failing probe) to its LoadBalancers that work through the connection: remote Node targets
// (their members are the workload Nodes), the arp and bgp backends (the agents' reports, the
// membership annotations, the watch on the workload Nodes that a reconnect must re-add, kube-vip's
// mirror Pods) and an endpoint move (the workload ConfigMaps). Without the connect event, the
// first member of a new cluster, whose VIP is the only way in, waited for the LoadBalancer's
// next poll to become active (13 s of its 19 s in a lab run). A static LoadBalancer of Machine
// targets keeps its own pace.
func (r *LoadBalancerReconciler) clusterToWorkloadLoadBalancers(ctx context.Context, o client.Object) []reconcile.Request {
	var lbs lbv1.LoadBalancerList
	if err := r.Client.List(ctx, &lbs, client.InNamespace(o.GetNamespace()),
		client.MatchingFields{indexLBClusterName: o.GetName()}); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Listing LoadBalancers of a Cluster")
		return nil
	}
	reqs := map[client.ObjectKey]bool{}
	for i := range lbs.Items {
		spec := &lbs.Items[i].Spec
		if spec.RemoteNodes() || spec.Backend.VIP() != nil || spec.TakeOverEndpointFrom != nil {
			reqs[client.ObjectKeyFromObject(&lbs.Items[i])] = true
		}
	}
	return toRequests(reqs)
}

func toRequests(keys map[client.ObjectKey]bool) []reconcile.Request {
	out := make([]reconcile.Request, 0, len(keys))
	for k := range keys {
		out = append(out, reconcile.Request{NamespacedName: k})
	}
	return out
}
