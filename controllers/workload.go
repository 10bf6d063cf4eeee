package controllers

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/controllers/clustercache"
	"sigs.k8s.io/cluster-api/controllers/remote"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	agentv1 "github.com/caplb/caplb/api/agent/v1alpha1"
	lbv1 "github.com/caplb/caplb/api/v1alpha1"
)

// The VIP backends reach workload clusters through CAPI's ClusterCache, set up as CAPI's own
// manager sets it up: it reads each Cluster's <cluster>-kubeconfig Secret, keeps one cached
// client per workload cluster and health-checks the connection.
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch

// CacheOptions returns the manager cache options caplb needs: the watched namespace, Secrets
// cached only when they carry the cluster.x-k8s.io/cluster-name label (the kubeconfig Secrets
// the ClusterCache reads), never every Secret of the cluster, and no managedFields. A non-empty
// watchFilter shards a fleet the way CAPI's --watch-filter does: this manager caches, and so
// reconciles, only the LoadBalancers and LoadBalancerClasses labelled
// cluster.x-k8s.io/watch-filter=<watchFilter>.
func CacheOptions(namespace, watchFilter string) cache.Options {
	req, _ := labels.NewRequirement(clusterv1.ClusterNameLabel, selection.Exists, nil)
	o := cache.Options{
		ByObject: map[client.Object]cache.ByObject{
			&corev1.Secret{}: {Label: labels.NewSelector().Add(*req)},
		},
		// managedFields are a large part of every cached Machine, Cluster and LoadBalancer and
		// caplb never reads them: at 10,000 Clusters (30,000 Machines) they are most of the
		// manager's memory.
		DefaultTransform: cache.TransformStripManagedFields(),
	}
	if watchFilter != "" {
		shard := labels.SelectorFromSet(labels.Set{clusterv1.WatchLabel: watchFilter})
		o.ByObject[&lbv1.LoadBalancer{}] = cache.ByObject{Label: shard}
		o.ByObject[&lbv1.LoadBalancerClass{}] = cache.ByObject{Label: shard}
	}
	if namespace != "" {
		o.DefaultNamespaces = map[string]cache.Config{namespace: {}}
	}
	return o
}

// ClientOptions returns the manager client options caplb needs: Secrets are read live (the
// bootstrap Secret and BGP password Secrets are read once per reconcile of an arp or bgp
// LoadBalancer), the cache above serves only the ClusterCache.
func ClientOptions() client.Options {
	return client.Options{Cache: &client.CacheOptions{DisableFor: []client.Object{&corev1.Secret{}}}}
}

// SetupClusterCache creates the ClusterCache on mgr, whose cache must have been built with
// CacheOptions, and whose LoadBalancer index Setup registers. It connects only to the Clusters a
// LoadBalancer needs and never with a kubeconfig that references a file, a program or a proxy
// (workload_gate.go). name is the controller name, for the workload clients' user agent;
// skipNameValidation lets a process run a second ClusterCache (tests run CAPI's next to ours).
func SetupClusterCache(ctx context.Context, mgr ctrl.Manager, name string, skipNameValidation bool) (clustercache.ClusterCache, error) {
	secrets, err := client.New(mgr.GetConfig(), client.Options{
		HTTPClient: mgr.GetHTTPClient(),
		Scheme:     mgr.GetScheme(),
		Cache:      &client.CacheOptions{Reader: mgr.GetCache()},
	})
	if err != nil {
		return nil, fmt.Errorf("creating the kubeconfig Secret client: %w", err)
	}
	// The gate (workload_gate.go) keeps the ClusterCache to the Clusters a LoadBalancer needs
	// and to kubeconfigs that reference no file, program or proxy.
	gate := &workloadGate{cache: secrets, log: ctrl.LoggerFrom(ctx).WithValues("controller", "clustercache")}
	cc, err := clustercache.SetupWithManager(ctx, mgr, clustercache.Options{
		SecretClient:  kubeconfigSecrets{Reader: secrets},
		ClusterFilter: gate.filter,
		Cache:         clustercache.CacheOptions{DefaultTransform: cache.TransformStripManagedFields()},
		Client: clustercache.ClientOptions{
			QPS: 20, Burst: 30,
			UserAgent: remote.DefaultClusterAPIUserAgent("caplb-" + name),
			Cache: clustercache.ClientCacheOptions{
				DisableFor: []client.Object{&corev1.ConfigMap{}, &corev1.Secret{}},
			},
		},
	}, controller.Options{MaxConcurrentReconciles: 10, SkipNameValidation: &skipNameValidation, NewQueue: gate.newQueue})
	if err != nil {
		return nil, fmt.Errorf("creating the ClusterCache: %w", err)
	}
	return &workloadClusters{ClusterCache: cc, gate: gate}, nil
}

// ClusterCacheRetry shortens the ClusterCache's retry after a failed first connection (30s by
// default): tests use it so that a workload cluster that comes up late is reached quickly.
func ClusterCacheRetry(cc clustercache.ClusterCache, d time.Duration) {
	if s, ok := cc.(interface{ SetConnectionCreationRetryInterval(time.Duration) }); ok {
		s.SetConnectionCreationRetryInterval(d)
	}
}

// workloadNodesWatcher names the watch on a workload cluster's Nodes.
const workloadNodesWatcher = "loadbalancer-agent-reports"

// watchWorkloadNodes makes changes of the agents' reports (and Ready) on the workload cluster's
// Nodes reconcile the
// LoadBalancers of that Cluster at once, rather than at the backend's next poll. A Cluster the
// ClusterCache is not connected to yet is skipped: the next reconcile tries again. Only the arp
// and bgp backends' LoadBalancers of Machine targets need it.
func (r *LoadBalancerReconciler) watchWorkloadNodes(ctx context.Context, s *scope) {
	if r.ClusterCache == nil || r.controller == nil || s.cluster == nil || s.lb.Spec.Backend.VIP() == nil {
		return
	}
	key := client.ObjectKeyFromObject(s.cluster)
	err := r.ClusterCache.Watch(ctx, key, clustercache.NewWatcher(clustercache.WatcherOptions{
		Name:    workloadNodesWatcher,
		Watcher: r.controller,
		Kind:    &corev1.Node{},
		EventHandler: handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, _ client.Object) []reconcile.Request {
			return r.clusterToLoadBalancers(ctx, s.cluster)
		}),
		Predicates: []predicate.Predicate{predicate.Funcs{
			UpdateFunc: func(e event.UpdateEvent) bool {
				return agentAnnotations(e.ObjectOld) != agentAnnotations(e.ObjectNew) || nodeReady(e.ObjectOld) != nodeReady(e.ObjectNew)
			},
			CreateFunc:  func(event.CreateEvent) bool { return true },
			DeleteFunc:  func(event.DeleteEvent) bool { return true },
			GenericFunc: func(event.GenericEvent) bool { return false },
		}},
	}))
	if err != nil {
		ctrl.LoggerFrom(ctx).V(4).Info("Not watching the workload cluster's Nodes yet", "reason", err.Error())
	}
}

// agentAnnotations is the agent's report on a Node without its timestamp, which agents refresh
// periodically (the manager's own annotations are left out: its writes need no reconcile).
func agentAnnotations(o client.Object) string {
	v := o.GetAnnotations()[agentv1.AgentStatusAnnotation]
	st, err := agentv1.ParseAgentStatus(v)
	if err != nil {
		return v
	}
	st.UpdatedAt = metav1.MicroTime{}
	return st.String()
}

func nodeReady(o client.Object) bool {
	n, ok := o.(*corev1.Node)
	if !ok {
		return false
	}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
