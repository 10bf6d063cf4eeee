// Package controllers holds caplb's management-side controller: the LoadBalancer reconciler,
// which picks a LoadBalancer's members, runs each member's state machine through a backend,
// holds CAPI pre-drain deletion hooks on member Machines, and publishes the endpoint to the
// LoadBalancer's status, the Cluster and the control plane.
package controllers

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/discovery"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	"sigs.k8s.io/cluster-api/controllers/clustercache"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/event"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	lbv1 "github.com/caplb/caplb/api/v1alpha1"
	"github.com/caplb/caplb/providers"
	"github.com/caplb/caplb/providers/static"
)

// DefaultMaxConcurrentReconciles is the number of LoadBalancers reconciled in parallel when
// Options.MaxConcurrentReconciles is 0. Reconciles mostly wait on the API server (a new
// LoadBalancer's takes three round trips: members, Cluster, status), so many more workers than
// cores pay off; they cost a goroutine each.
const DefaultMaxConcurrentReconciles = 20

// ControllerName is the default name of the controller (logs, metrics, events' reporter).
const ControllerName = "loadbalancer"

// Options tunes Setup. Every field is optional.
type Options struct {
	// MaxConcurrentReconciles bounds parallel reconciles; 0 means DefaultMaxConcurrentReconciles.
	MaxConcurrentReconciles int
	// Backends are added to the registry next to the built-in static backend (the ARP, BGP and
	// WireGuard backends register here). A backend whose Kind is "static" replaces the built-in
	// one, e.g. a static backend with a test dialer.
	Backends []providers.Backend
	// MetricsRegisterer receives the controller's metrics; nil means controller-runtime's
	// registry, served on the manager's metrics endpoint.
	MetricsRegisterer prometheus.Registerer
	// ControllerName overrides ControllerName, e.g. to run two managers in one process.
	ControllerName string
	// SkipNameValidation lets a second controller of the same name be created in one process
	// (controller-runtime refuses by default). Tests that restart a manager set it.
	SkipNameValidation bool
	// Now is the clock; nil means time.Now. Tests that fix it should fix the backends' too.
	Now func() time.Time
	// NodeTargetsNamespace enables LoadBalancers with targetKind Node, only in this namespace
	// (the manager's own); empty disables them and the manager does not watch Nodes.
	NodeTargetsNamespace string
	// ClusterCache, when set, lets the controller watch workload clusters' Nodes for the arp and
	// bgp agents' reports (SetupClusterCache creates it).
	ClusterCache clustercache.ClusterCache
	// APIs are the optional APIs the cluster serves (DiscoverAPIs); nil means Setup asks the
	// API server's discovery itself. Only these are watched and indexed.
	APIs *APIs
}

// AddToScheme adds every type the controller reads or writes: client-go's (Nodes, Events,
// Secrets), CAPI core v1beta2 (Clusters, Machines), CAPI IPAM v1beta2 (the VIP backends'
// IPAddressClaims) and caplb's LoadBalancer.
func AddToScheme(s *runtime.Scheme) error {
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, clusterv1.AddToScheme, ipamv1.AddToScheme, lbv1.AddToScheme} {
		if err := add(s); err != nil {
			return err
		}
	}
	return nil
}

// Setup registers the field indexes, the backends, the metrics, the LoadBalancer reconciler and
// the LoadBalancerClass reconciler on mgr. The manager's scheme must include AddToScheme's types.
func Setup(ctx context.Context, mgr ctrl.Manager, opts Options) error {
	apis, err := setupAPIs(ctx, mgr, opts.APIs)
	if err != nil {
		return err
	}
	if err := setupIndexes(ctx, mgr.GetFieldIndexer(), opts.NodeTargetsNamespace != "", apis.Machines); err != nil {
		return err
	}

	// The static backend probes endpoints on its own and tells the controller when a result
	// changes (probeEvents), instead of requeueing every LoadBalancer every health-check interval.
	probeEvents := make(chan event.GenericEvent, 1024)
	notify := func(namespace, name string) {
		probeEvents <- event.GenericEvent{Object: &lbv1.LoadBalancer{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}}
	}
	backends := []providers.Backend{}
	hasStatic := false
	for _, b := range opts.Backends {
		if sb, ok := b.(*static.Backend); ok && sb.Notify == nil {
			sb.Notify = notify
		}
		hasStatic = hasStatic || b.Kind() == static.Kind
		backends = append(backends, b)
	}
	if !hasStatic {
		backends = append(backends, &static.Backend{Now: opts.Now, Notify: notify})
	}
	reg, err := providers.NewRegistry(backends...)
	if err != nil {
		return err
	}

	regr := opts.MetricsRegisterer
	if regr == nil {
		regr = ctrlmetrics.Registry
	}
	metrics, err := newMetrics(regr)
	if err != nil {
		return fmt.Errorf("registering metrics: %w", err)
	}

	name := opts.ControllerName
	if name == "" {
		name = ControllerName
	}
	r := &LoadBalancerReconciler{
		Client:       mgr.GetClient(),
		APIReader:    mgr.GetAPIReader(),
		RESTMapper:   mgr.GetRESTMapper(),
		Recorder:     mgr.GetEventRecorder("caplb-" + name),
		Backends:     reg,
		Metrics:      metrics,
		Now:          opts.Now,
		ClusterCache: opts.ClusterCache,
		APIs:         apis,

		NodeTargetsNamespace: opts.NodeTargetsNamespace,
	}
	workers := opts.MaxConcurrentReconciles
	if workers <= 0 {
		workers = DefaultMaxConcurrentReconciles
	}
	r.probeEvents = probeEvents
	if err := r.setupWithManager(mgr, name, workers, opts.SkipNameValidation); err != nil {
		return err
	}
	classes := &LoadBalancerClassReconciler{Client: mgr.GetClient(), Backends: reg, Recorder: r.Recorder, Clusters: apis.Clusters}
	classController := ClassControllerName
	if opts.ControllerName != "" {
		classController = opts.ControllerName + "-class"
	}
	if err := classes.setupWithManager(mgr, classController, opts.SkipNameValidation); err != nil {
		return fmt.Errorf("setting up the LoadBalancerClass controller: %w", err)
	}
	return nil
}

// setupAPIs returns the optional APIs given, or discovers them, and logs once which were found.
func setupAPIs(ctx context.Context, mgr ctrl.Manager, given *APIs) (APIs, error) {
	var apis APIs
	if given != nil {
		apis = *given
	} else {
		d, err := discovery.NewDiscoveryClientForConfigAndClient(mgr.GetConfig(), mgr.GetHTTPClient())
		if err != nil {
			return APIs{}, fmt.Errorf("creating the discovery client: %w", err)
		}
		if apis, err = DiscoverAPIs(d); err != nil {
			return APIs{}, err
		}
	}
	ctrl.LoggerFrom(ctx).WithName("setup").Info("Optional APIs discovered; LoadBalancers that need a missing one report APINotInstalled",
		"found", apis.Found(), "missing", apis.Missing())
	return apis, nil
}
