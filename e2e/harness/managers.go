package harness

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"k8s.io/utils/ptr"
	"sigs.k8s.io/cluster-api/controllers/clustercache"
	clusterreconciler "sigs.k8s.io/cluster-api/core/reconcilers/cluster"
	machinereconciler "sigs.k8s.io/cluster-api/core/reconcilers/machine"
	mdreconciler "sigs.k8s.io/cluster-api/core/reconcilers/machinedeployment"
	machinesetreconciler "sigs.k8s.io/cluster-api/core/reconcilers/machineset"
	"sigs.k8s.io/cluster-api/core/setup"
	"sigs.k8s.io/cluster-api/util/index"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/caplb/caplb/controllers"
	"github.com/caplb/caplb/e2e/testinfra"
	"github.com/caplb/caplb/providers"
	"github.com/caplb/caplb/providers/vip"
	"github.com/caplb/caplb/providers/wireguard"
)

// capiStarts counts StartCAPIWith calls in this process (see there).
var capiStarts atomic.Int32

const (
	// shutdownGrace is how long a test manager's runnables get to return once it is stopped.
	// controller-runtime's default, 30 s, is a production figure; here a reconcile in flight
	// shares two cores with other suites' API servers, and CI once saw CAPI's manager miss it
	// at the end of a passing test (TestShardedManagers). Stop reports what was still running.
	shutdownGrace = 90 * time.Second
	// stopTimeout bounds how long Stop waits for a manager to shut down.
	stopTimeout = shutdownGrace + 30*time.Second
	// slowStop is when Stop records the goroutines of a manager still shutting down, so that a
	// shutdown that then fails names what held it.
	slowStop = 20 * time.Second
)

// Running is a started controller-runtime manager.
type Running struct {
	// Manager is the running manager, e.g. for GetClient.
	Manager manager.Manager
	// ClusterCache is CAPI's connection cache to the workload clusters (StartCAPI's managers
	// only): what KubeadmControlPlane's Management reaches a workload cluster through.
	ClusterCache clustercache.ClusterCache
	name         string
	// companions are managers started with this one and stopped before it (CAPI's kubeadm
	// providers, each in a manager of its own).
	companions []*Running
	ctx        context.Context
	cancel     context.CancelFunc
	done       chan error
}

// Stop cancels the manager and waits until it has shut down (its controllers have returned).
// It is safe to call more than once.
func (r *Running) Stop() error {
	if r == nil || r.cancel == nil {
		return nil
	}
	if err := stopAll(r.companions); err != nil {
		return errors.Join(err, r.stopSelf())
	}
	return r.stopSelf()
}

func (r *Running) stopSelf() error {
	r.cancel()
	slow := time.NewTimer(slowStop)
	defer slow.Stop()
	deadline := time.NewTimer(stopTimeout)
	defer deadline.Stop()
	var held string
	for {
		select {
		case err := <-r.done:
			r.done <- err // keep the result for a second Stop
			if err != nil {
				return fmt.Errorf("%s manager: %w%s", r.name, err, held)
			}
			return nil
		case <-slow.C:
			held = "\n" + stoppingGoroutines(slowStop)
		case <-deadline.C:
			return fmt.Errorf("%s manager did not stop within %s%s", r.name, stopTimeout, held)
		}
	}
}

// start runs mgr until ctx is cancelled or Stop is called, and waits for its caches to sync.
func start(ctx context.Context, name string, mgr manager.Manager) (*Running, error) {
	ctx, cancel := context.WithCancel(ctx)
	r := &Running{Manager: mgr, name: name, ctx: ctx, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- mgr.Start(ctx) }()
	syncCtx, syncCancel := context.WithTimeout(ctx, 60*time.Second)
	defer syncCancel()
	if !mgr.GetCache().WaitForCacheSync(syncCtx) {
		return nil, errors.Join(fmt.Errorf("%s manager: caches did not sync", name), r.Stop())
	}
	return r, nil
}

func (e *Env) managerOptions() manager.Options {
	return manager.Options{
		Scheme:                  e.Scheme,
		Logger:                  e.Logger,
		Metrics:                 metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress:  "0",
		GracefulShutdownTimeout: ptr.To(shutdownGrace),
		// Controller names are unique per process; a restarted manager registers the same
		// names again.
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	}
}

// StartCAPI starts CAPI's real Cluster and Machine reconcilers, with the ClusterCache they need
// to reach workload clusters, and the test infrastructure provider, set up the way CAPI's own
// manager and envtest suites set them up.
func (e *Env) StartCAPI(ctx context.Context) (*Running, error) {
	return e.StartCAPIWith(ctx, CAPIOptions{})
}

// CAPIOptions tunes StartCAPIWith.
type CAPIOptions struct {
	// Infrastructure sets up the infrastructure provider in CAPI's manager; nil sets up the
	// test provider (e2e/testinfra) with the management cluster as every workload cluster.
	Infrastructure func(mgr manager.Manager) error
	// MachineDeployments also runs CAPI's MachineSet and MachineDeployment reconcilers (worker
	// Machines from a MachineDeployment, its rollouts).
	MachineDeployments bool
	// KubeadmBootstrap also runs CAPI's kubeadm bootstrap provider (CABPK's KubeadmConfig
	// reconciler, in a manager of its own as in a real installation): a Machine whose spec.bootstrap.configRef names a KubeadmConfig gets the
	// cloud-init data CABPK renders for it.
	KubeadmBootstrap bool
	// KubeadmControlPlane also runs CAPI's KubeadmControlPlane reconciler (KCP, in a manager of
	// its own), which creates
	// control-plane Machines and their KubeadmConfigs from a KubeadmControlPlane.
	KubeadmControlPlane bool
}

// StartCAPIWith is StartCAPI with another infrastructure provider (the lifecycle lab's, which
// boots a network-namespace machine per TestMachine).
func (e *Env) StartCAPIWith(ctx context.Context, o CAPIOptions) (*Running, error) {
	opts := e.managerOptions()
	// client-go names informers once per process: a second CAPI in the same process (the
	// lifecycle bench runs one lab per backend) needs names of its own.
	name, suffix := "caplb-test-capi", ""
	if n := capiStarts.Add(1); n > 1 {
		suffix = fmt.Sprintf("-%d", n)
		name += suffix
	}
	opts.Cache = setup.ManagerCacheOptions(e.Scheme, name, "", 10*time.Minute)
	opts.Client = setup.ManagerClientOptions()
	mgr, err := ctrl.NewManager(e.Config, opts)
	if err != nil {
		return nil, fmt.Errorf("creating CAPI manager: %w", err)
	}
	if err := index.AddDefaultIndexes(ctx, mgr); err != nil {
		return nil, fmt.Errorf("adding CAPI indexes: %w", err)
	}
	secretClient, err := setup.CreateSecretCachingClient(mgr)
	if err != nil {
		return nil, fmt.Errorf("creating secret caching client: %w", err)
	}
	cc, err := clustercache.SetupWithManager(ctx, mgr, clustercache.Options{
		SecretClient: secretClient,
		Cache:        setup.ClusterCacheCacheOptions(),
		Client:       setup.ClusterCacheClientOptions(name, 50, 100),
	}, controller.Options{MaxConcurrentReconciles: 10})
	if err != nil {
		return nil, fmt.Errorf("creating ClusterCache: %w", err)
	}
	// CAPI's suites shorten the retry interval too: the default (30s) would make a test that
	// races the first connection wait half a minute.
	if s, ok := cc.(interface{ SetConnectionCreationRetryInterval(time.Duration) }); ok {
		s.SetConnectionCreationRetryInterval(2 * time.Second)
	}
	if err := (&clusterreconciler.Reconciler{
		Client:                      mgr.GetClient(),
		APIReader:                   mgr.GetAPIReader(),
		ClusterCache:                cc,
		RemoteConnectionGracePeriod: 2 * time.Minute,
	}).SetupWithManager(ctx, mgr, controller.Options{MaxConcurrentReconciles: 5}); err != nil {
		return nil, fmt.Errorf("setting up CAPI Cluster reconciler: %w", err)
	}
	if err := (&machinereconciler.Reconciler{
		Client:       mgr.GetClient(),
		APIReader:    mgr.GetAPIReader(),
		ClusterCache: cc,
		// CAPI refuses less than 2m (the ClusterCache must drop a dead connection first).
		RemoteConditionsGracePeriod: 5 * time.Minute,
	}).SetupWithManager(ctx, mgr, controller.Options{MaxConcurrentReconciles: 5}); err != nil {
		return nil, fmt.Errorf("setting up CAPI Machine reconciler: %w", err)
	}
	if o.MachineDeployments {
		if err := (&machinesetreconciler.Reconciler{
			Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), ClusterCache: cc,
		}).SetupWithManager(ctx, mgr, controller.Options{MaxConcurrentReconciles: 2}); err != nil {
			return nil, fmt.Errorf("setting up CAPI MachineSet reconciler: %w", err)
		}
		if err := (&mdreconciler.Reconciler{
			Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(),
		}).SetupWithManager(ctx, mgr, controller.Options{MaxConcurrentReconciles: 2}); err != nil {
			return nil, fmt.Errorf("setting up CAPI MachineDeployment reconciler: %w", err)
		}
	}
	infra := o.Infrastructure
	if infra == nil {
		infra = func(mgr manager.Manager) error {
			return (&testinfra.Reconciler{
				Client:    mgr.GetClient(),
				APIReader: mgr.GetAPIReader(),
				Workload:  mgr.GetClient(),
			}).SetupWithManager(mgr, controller.Options{MaxConcurrentReconciles: 5})
		}
	}
	if err := infra(mgr); err != nil {
		return nil, fmt.Errorf("setting up the infrastructure provider: %w", err)
	}
	r, err := start(ctx, "CAPI", mgr)
	if err != nil {
		return nil, err
	}
	r.ClusterCache = cc
	if r.companions, err = e.startKubeadmProviders(ctx, o, suffix); err != nil {
		return nil, errors.Join(err, r.Stop())
	}
	go func() {
		<-r.ctx.Done()
		if s, ok := cc.(interface{ Shutdown() }); ok {
			s.Shutdown()
		}
	}()
	return r, nil
}

// CAPLBOptions tunes StartCAPLB.
type CAPLBOptions struct {
	// MaxConcurrentReconciles for caplb's controllers; zero takes the controllers' default.
	MaxConcurrentReconciles int
	// NodeTargetsNamespace enables Node targets for LoadBalancers in this namespace (the
	// manager's --node-targets-namespace).
	NodeTargetsNamespace string
	// ServiceAccount ("namespace/name"), when set, is impersonated by the manager: it then runs
	// with exactly the RBAC bound to that account (see ApplyShippedRBAC) instead of as admin.
	ServiceAccount string
	// Webhook, when set, serves the validating webhook (controllers.SetupWebhook) as the manager
	// binary does; StartCAPLB returns once it answers TLS.
	Webhook *WebhookOptions
}

// WebhookOptions is where the test manager serves its webhook.
type WebhookOptions struct {
	// Host and Port to listen on (a loopback address and a free port).
	Host string
	Port int
	// CertDir holds tls.crt and tls.key (testpki's IssueWebhookServing writes them).
	CertDir string
}

// AgentImage is the agent image the test manager renders into bootstrap Secrets.
const AgentImage = "registry.example/caplb:test"

// StartCAPLB starts caplb's controllers in a manager of their own. Stop it and call StartCAPLB
// again to simulate a restart of the caplb Deployment.
func (e *Env) StartCAPLB(ctx context.Context, o CAPLBOptions) (*Running, error) {
	scheme, err := NewScheme()
	if err != nil {
		return nil, err
	}
	if err := controllers.AddToScheme(scheme); err != nil {
		return nil, fmt.Errorf("adding caplb types to scheme: %w", err)
	}
	opts := e.managerOptions()
	opts.Scheme = scheme
	opts.Cache = controllers.CacheOptions("", "")
	opts.Client = controllers.ClientOptions()
	if o.Webhook != nil {
		opts.WebhookServer = webhook.NewServer(webhook.Options{Host: o.Webhook.Host, Port: o.Webhook.Port, CertDir: o.Webhook.CertDir})
	}
	cfg := e.Config
	if o.ServiceAccount != "" {
		cfg = ImpersonateServiceAccount(e.Config, o.ServiceAccount)
	}
	mgr, err := ctrl.NewManager(cfg, opts)
	if err != nil {
		return nil, fmt.Errorf("creating caplb manager: %w", err)
	}
	cc, err := controllers.SetupClusterCache(ctx, mgr, controllers.ControllerName, true)
	if err != nil {
		return nil, err
	}
	controllers.ClusterCacheRetry(cc, 2*time.Second)
	// Tests wait on agents and gateways: look again soon.
	polling := providers.Polling{PendingPoll: 200 * time.Millisecond, Resync: 2 * time.Second}
	vipOpts := vip.Options{Client: mgr.GetClient(), Workload: cc, AgentImage: AgentImage, Polling: polling}
	if err := controllers.Setup(ctx, mgr, controllers.Options{
		MaxConcurrentReconciles: o.MaxConcurrentReconciles,
		NodeTargetsNamespace:    o.NodeTargetsNamespace,
		// A restarted manager registers the same controller name again in this process.
		SkipNameValidation: true,
		Backends: []providers.Backend{vip.NewARP(vipOpts), vip.NewBGP(vipOpts), wireguard.New(wireguard.Options{
			Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), AgentImage: AgentImage, Polling: polling})},
		ClusterCache: cc,
	}); err != nil {
		return nil, fmt.Errorf("setting up caplb controllers: %w", err)
	}
	if o.Webhook != nil {
		controllers.SetupWebhook(mgr)
	}
	r, err := start(ctx, "caplb", mgr)
	if err != nil {
		return nil, err
	}
	go func() {
		<-r.ctx.Done()
		if s, ok := cc.(interface{ Shutdown() }); ok {
			s.Shutdown()
		}
	}()
	if o.Webhook != nil {
		started := mgr.GetWebhookServer().StartedChecker()
		if err := Poll(ctx, 30*time.Second, "the webhook server answering TLS", func(context.Context) (bool, string, error) {
			err := started(nil)
			if err != nil {
				return false, err.Error(), nil
			}
			return true, "", nil
		}); err != nil {
			return nil, errors.Join(err, r.Stop())
		}
	}
	return r, nil
}
