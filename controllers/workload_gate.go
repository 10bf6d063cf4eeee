package controllers

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/controllers/clustercache"
	"sigs.k8s.io/cluster-api/util/secret"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	lbv1 "github.com/caplb/caplb/api/v1alpha1"
)

// CAPI's ClusterCache connects to every provisioned Cluster through its <cluster>-kubeconfig
// Secret. caplb narrows it in two places, both before anything is dialed:
//   - its ClusterFilter (workloadGate.filter) admits only a Cluster that a LoadBalancer needs
//     (needsWorkload) and whose kubeconfig checkKubeconfig accepts; a Cluster no LoadBalancer
//     names is never connected to, and a connection is dropped once it is no longer needed;
//   - its SecretClient (kubeconfigSecrets) hands the ClusterCache a kubeconfig only after
//     checkKubeconfig accepted that very copy, so a Secret rewritten between the filter and the
//     connect is refused too.
// The filter runs only when the ClusterCache reconciles a Cluster, and a new LoadBalancer is not a
// Cluster event: workloadClusters.GetClient, which every consumer calls, puts the Cluster back in
// the ClusterCache's queue when it has no connection, so that the filter is asked again.

// needsWorkload reports whether lb reaches its workload cluster through the ClusterCache: remote
// Node targets (members read and annotated there), and the arp and bgp backends, whose agents
// report on the workload cluster's Nodes, and an endpoint move (spec.takeOverEndpointFrom),
// which rewrites kube-public/cluster-info and kube-system ConfigMaps there.
func needsWorkload(lb *lbv1.LoadBalancer) bool {
	return lb.Spec.ClusterName != "" && (lb.Spec.TargetKind.IsNode() || lb.Spec.Backend.VIP() != nil ||
		lb.Spec.TakeOverEndpointFrom != nil)
}

// workloadGate decides which Clusters the ClusterCache may connect to.
type workloadGate struct {
	// cache reads the manager's cache: LoadBalancers (indexed by spec.clusterName) and the
	// kubeconfig Secrets, the same copies the ClusterCache reads.
	cache client.Reader
	log   logr.Logger
	// queue is the ClusterCache controller's work queue, once the controller has built it.
	queue atomic.Pointer[priorityqueue.PriorityQueue[reconcile.Request]]
	// verdicts keeps checkKubeconfig's answer per Secret (client.ObjectKey → kubeconfigVerdict):
	// the filter runs at every health probe of a connected Cluster (10 s), and decoding a
	// kubeconfig costs a fraction of a millisecond.
	verdicts sync.Map
}

// kubeconfigVerdict is checkKubeconfig's answer for one version of a Secret.
type kubeconfigVerdict struct {
	uid             types.UID
	resourceVersion string
	err             error
}

// filterTimeout bounds the filter's cache reads (the filter has no context of its own).
const filterTimeout = 10 * time.Second

// filter is the ClusterCache's ClusterFilter. A Cluster it turns away is disconnected (if it was
// connected) and not looked at again until its next event or wake.
func (g *workloadGate) filter(c *clusterv1.Cluster) bool {
	ctx, cancel := context.WithTimeout(context.Background(), filterTimeout)
	defer cancel()
	key := client.ObjectKeyFromObject(c)
	log := g.log.WithValues("Cluster", key.String())
	wanted, err := g.wanted(ctx, key)
	if err != nil {
		log.Error(err, "Not connecting to the workload cluster: cannot tell whether a LoadBalancer needs it")
		return false
	}
	if !wanted {
		log.V(4).Info("Not connecting to the workload cluster: no LoadBalancer needs it")
		return false
	}
	if err := g.refusal(ctx, key); err != nil {
		var r *kubeconfigRefusal
		if errors.As(err, &r) {
			log.Info("Not connecting to the workload cluster: its kubeconfig Secret is refused", "field", r.Field, "reason", r.Reason)
		} else {
			log.Error(err, "Not connecting to the workload cluster: cannot check its kubeconfig Secret")
		}
		return false
	}
	return true
}

// wanted reports whether a LoadBalancer in the Cluster's namespace needs its workload cluster.
// With --watch-filter the cache holds this shard's LoadBalancers only, so a shard connects only
// to its own Clusters.
func (g *workloadGate) wanted(ctx context.Context, cluster client.ObjectKey) (bool, error) {
	var list lbv1.LoadBalancerList
	if err := g.cache.List(ctx, &list, client.InNamespace(cluster.Namespace),
		client.MatchingFields{indexLBClusterName: cluster.Name}); err != nil {
		return false, fmt.Errorf("listing the LoadBalancers of Cluster %s: %w", cluster, err)
	}
	for i := range list.Items {
		if needsWorkload(&list.Items[i]) {
			return true, nil
		}
	}
	return false, nil
}

// refusal returns the *kubeconfigRefusal of the Cluster's kubeconfig Secret, nil when it is
// acceptable or absent (the ClusterCache then fails on its own, without dialing), or a read error.
func (g *workloadGate) refusal(ctx context.Context, cluster client.ObjectKey) error {
	s := &corev1.Secret{}
	key := client.ObjectKey{Namespace: cluster.Namespace, Name: secret.Name(cluster.Name, secret.Kubeconfig)}
	if err := g.cache.Get(ctx, key, s); err != nil {
		if apierrors.IsNotFound(err) {
			g.verdicts.Delete(key)
			return nil
		}
		return fmt.Errorf("reading Secret %s: %w", key, err)
	}
	if v, ok := g.verdicts.Load(key); ok {
		if v := v.(kubeconfigVerdict); v.uid == s.UID && v.resourceVersion == s.ResourceVersion {
			return v.err
		}
	}
	err := checkKubeconfig(s.Data[secret.KubeconfigDataName])
	g.verdicts.Store(key, kubeconfigVerdict{uid: s.UID, resourceVersion: s.ResourceVersion, err: err})
	return err
}

// newQueue builds the ClusterCache controller's queue as controller-runtime builds it by default
// (its priority queue) and keeps a handle on it for wake.
func (g *workloadGate) newQueue(name string, rl workqueue.TypedRateLimiter[reconcile.Request]) workqueue.TypedRateLimitingInterface[reconcile.Request] {
	q := priorityqueue.New(name, func(o *priorityqueue.Opts[reconcile.Request]) {
		o.RateLimiter = rl
		o.Log = g.log
	})
	g.queue.Store(&q)
	return q
}

// wake makes the ClusterCache reconcile the Cluster (and so ask the filter) soon. Its own retry
// interval still bounds how often it tries to connect.
func (g *workloadGate) wake(cluster client.ObjectKey) {
	if q := g.queue.Load(); q != nil {
		(*q).Add(reconcile.Request{NamespacedName: cluster})
	}
}

// kubeconfigSecrets is the ClusterCache's SecretClient: it returns a Secret only when
// checkKubeconfig accepts the kubeconfig in it.
type kubeconfigSecrets struct{ client.Reader }

func (s kubeconfigSecrets) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if err := s.Reader.Get(ctx, key, obj, opts...); err != nil {
		return err
	}
	sec, ok := obj.(*corev1.Secret)
	if !ok {
		return fmt.Errorf("kubeconfig reader: refusing to read %T %s, only Secrets", obj, key)
	}
	if err := checkKubeconfig(sec.Data[secret.KubeconfigDataName]); err != nil {
		// Blank it: nothing may build a client from it even if the error were dropped.
		*sec = corev1.Secret{}
		return fmt.Errorf("kubeconfig Secret %s: %w", key, err)
	}
	return nil
}

// List is refused: the ClusterCache reads one Secret per Cluster, and a list would bypass Get's check.
func (s kubeconfigSecrets) List(_ context.Context, list client.ObjectList, _ ...client.ListOption) error {
	return fmt.Errorf("kubeconfig reader: refusing to list %T", list)
}

// workloadClusters is the ClusterCache caplb hands out: CAPI's, whose GetClient says why a
// refused kubeconfig is refused, and wakes the ClusterCache for a Cluster it has no connection to.
type workloadClusters struct {
	clustercache.ClusterCache
	gate *workloadGate
}

// GetClient returns the Cluster's client. Without a connection it returns a *kubeconfigRefusal
// when the Cluster's kubeconfig Secret is refused, else the ClusterCache's error, and asks the
// ClusterCache to look at the Cluster again (a LoadBalancer that needs it may be new).
func (w *workloadClusters) GetClient(ctx context.Context, cluster client.ObjectKey) (client.Client, error) {
	c, err := w.ClusterCache.GetClient(ctx, cluster)
	if err == nil {
		return c, nil
	}
	var r *kubeconfigRefusal
	if rerr := w.gate.refusal(ctx, cluster); errors.As(rerr, &r) {
		return nil, fmt.Errorf("the %s-kubeconfig Secret: %w", cluster.Name, rerr)
	}
	w.gate.wake(cluster)
	return nil, err
}

// The wrapper keeps the test hooks of CAPI's ClusterCache, which callers find by type assertion.
var (
	_ interface{ SetConnectionCreationRetryInterval(time.Duration) } = &workloadClusters{}
	_ interface{ Shutdown() }                                        = &workloadClusters{}
)

// SetConnectionCreationRetryInterval forwards to CAPI's ClusterCache (see ClusterCacheRetry).
func (w *workloadClusters) SetConnectionCreationRetryInterval(d time.Duration) {
	ClusterCacheRetry(w.ClusterCache, d)
}

// Shutdown forwards to CAPI's ClusterCache: a test that stops its manager closes the workload
// connections with it (an open watch holds a test API server's shutdown).
func (w *workloadClusters) Shutdown() {
	if s, ok := w.ClusterCache.(interface{ Shutdown() }); ok {
		s.Shutdown()
	}
}
