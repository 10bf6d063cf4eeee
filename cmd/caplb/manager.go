package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/discovery"
	"k8s.io/klog/v2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/controllers/clustercache"
	capiflags "sigs.k8s.io/cluster-api/util/flags"
	ctrl "sigs.k8s.io/controller-runtime"
	ctrlconfig "sigs.k8s.io/controller-runtime/pkg/client/config"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/caplb/caplb/cmd/internal/version"
	"github.com/caplb/caplb/controllers"
	"github.com/caplb/caplb/internal/buildinfo"
	"github.com/caplb/caplb/providers"
	"github.com/caplb/caplb/providers/vip"
	"github.com/caplb/caplb/providers/wireguard"
)

// leaderElectionID names the Lease the manager replicas elect a leader with.
const leaderElectionID = "caplb-manager.loadbalancer.cluster.x-k8s.io"

type managerOptions struct {
	diagnostics          capiflags.ManagerOptions
	probeAddr            string
	pprofAddr            string
	leaderElect          bool
	leaderElectionNS     string
	concurrency          int
	namespace            string
	watchFilter          string
	qps                  float32
	burst                int
	shutdownTimeout      time.Duration
	workloadRetry        time.Duration
	nodeTargetsNamespace string
	agentImage           string
	webhookPort          int
	webhookCertDir       string
	zap                  zap.Options
}

// DefaultWorkloadConnectRetry is --workload-connect-retry's default. CAPI's 30s suits its fleets of
// clusters it always watches; caplb reaches only the clusters whose LoadBalancer needs their Nodes,
// and a new cluster's first member waited out the whole 30s after its API server came up (the
// lifecycle lab: 33 s between the first machine's boot and its membership).
const DefaultWorkloadConnectRetry = 5 * time.Second

// defaultWebhookCertDir is where the manager Deployment mounts the serving certificate
// cert-manager issues (config/webhook), controller-runtime's own default.
const defaultWebhookCertDir = "/tmp/k8s-webhook-server/serving-certs"

// newManagerCommand builds `caplb manager`, the management-side controllers.
func newManagerCommand() *cobra.Command {
	o := managerOptions{zap: zap.Options{}}
	cmd := &cobra.Command{
		Use:   "manager",
		Short: "Run the LoadBalancer controller",
		Long: "Run the LoadBalancer controller against the cluster of --kubeconfig (or $KUBECONFIG, or the in-cluster\n" +
			"config): it selects each LoadBalancer's members, holds CAPI pre-drain hooks on member Machines, and\n" +
			"publishes endpoints to Clusters. Metrics on --diagnostics-address (/metrics,\n" +
			"HTTPS with authentication and authorization unless --insecure-diagnostics), probes on\n" +
			"--health-probe-bind-address (/healthz, /readyz), the validating admission webhook on --webhook-port\n" +
			"(HTTPS, certificate from --webhook-cert-dir; 0 turns it off). SIGTERM or SIGINT stop it gracefully.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runManager(o) },
	}
	fs := cmd.Flags()
	// CAPI's own flags (--diagnostics-address :8443, --insecure-diagnostics, --tls-min-version,
	// --tls-cipher-suites, ...), so caplb is scraped like every other CAPI provider.
	capiflags.AddManagerOptions(fs, &o.diagnostics)
	fs.StringVar(&o.probeAddr, "health-probe-bind-address", ":8081", `address of the /healthz and /readyz endpoints; "0" disables them`)
	fs.StringVar(&o.pprofAddr, "pprof-bind-address", "", `address of Go's pprof endpoints (/debug/pprof/), for profiling; empty (the default) disables them: they expose memory contents, bind them to localhost only`)
	fs.BoolVar(&o.leaderElect, "leader-elect", false, "elect a leader among manager replicas through a Lease, so that only one reconciles")
	fs.StringVar(&o.leaderElectionNS, "leader-election-namespace", "", "namespace of the leader-election Lease (default: the manager's own namespace)")
	fs.IntVar(&o.concurrency, "concurrency", controllers.DefaultMaxConcurrentReconciles, "LoadBalancers reconciled in parallel")
	fs.StringVar(&o.namespace, "namespace", "", "watch only this namespace (LoadBalancers, Machines, Clusters); Nodes (cluster-scoped) are watched only with --node-targets-namespace")
	fs.StringVar(&o.watchFilter, "watch-filter", "", "reconcile only LoadBalancers and LoadBalancerClasses labelled "+clusterv1.WatchLabel+"=<value>, "+
		"to shard a fleet over several managers as CAPI's --watch-filter does; empty (the default) reconciles all")
	fs.Float32Var(&o.qps, "kube-api-qps", 0, "client-side request rate limit to the API server; 0 leaves it off (API priority and fairness applies)")
	fs.IntVar(&o.burst, "kube-api-burst", 0, "client-side burst, with --kube-api-qps")
	fs.StringVar(&o.nodeTargetsNamespace, "node-targets-namespace", "", "accept LoadBalancers with targetKind Node, only in this namespace (the manager's own); "+
		"needs the node-targets RBAC component. Empty (the default) disables Node targets")
	fs.StringVar(&o.agentImage, "agent-image", "", "node agent image the arp and bgp backends put in the bootstrap Secret's static pod when a LoadBalancer's spec.backend.<kind>.agent.image is empty")
	fs.IntVar(&o.webhookPort, "webhook-port", webhook.DefaultPort, "port of the validating admission webhook (HTTPS; refuses a second LoadBalancer publishing a Cluster's endpoint); "+
		"0 turns the webhook server off, for runs without a serving certificate (the reconciler still reports a second publisher)")
	fs.StringVar(&o.webhookCertDir, "webhook-cert-dir", defaultWebhookCertDir, "directory with the webhook's serving certificate and key (tls.crt, tls.key), reloaded when they change")
	fs.DurationVar(&o.shutdownTimeout, "graceful-shutdown-timeout", 30*time.Second, "how long running reconciles may take to finish on shutdown")
	fs.DurationVar(&o.workloadRetry, "workload-connect-retry", DefaultWorkloadConnectRetry, "how soon the manager tries again to reach a workload cluster's API server after a failed attempt "+
		"(CAPI's ClusterCache, whose own default is 30s): a new cluster's first member becomes active at most this long after its API server answers")
	goFlags := flag.NewFlagSet("manager", flag.ContinueOnError)
	ctrlconfig.RegisterFlags(goFlags) // --kubeconfig
	o.zap.BindFlags(goFlags)          // --zap-log-level, --zap-devel, --zap-encoder, ...
	fs.AddGoFlagSet(goFlags)
	return cmd
}

// setupLogging makes one logr logger the manager's and klog's: client-go logs through klog, and
// without this its lines land as raw text among the manager's JSON lines.
func setupLogging(opts *zap.Options, w io.Writer) {
	logger := zap.New(zap.UseFlagOptions(opts), zap.WriteTo(w))
	ctrl.SetLogger(logger)
	klog.SetLogger(logger)
}

func runManager(o managerOptions) error {
	if o.concurrency < 1 {
		return errors.New("--concurrency must be at least 1")
	}
	if o.webhookPort < 0 || o.webhookPort > 65535 {
		return errors.New("--webhook-port must be 0 (off) or a TCP port")
	}
	if o.workloadRetry <= 0 {
		return fmt.Errorf("--workload-connect-retry must be a positive duration (default %v)", DefaultWorkloadConnectRetry)
	}
	setupLogging(&o.zap, os.Stderr)
	log := ctrl.Log.WithName("setup")

	cfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("loading the kubeconfig: %w", err)
	}
	if o.qps > 0 {
		cfg.QPS, cfg.Burst = o.qps, o.burst
	}
	scheme := runtime.NewScheme()
	if err := controllers.AddToScheme(scheme); err != nil {
		return err
	}
	_, metricsOpts, err := capiflags.GetManagerOptions(o.diagnostics)
	if err != nil {
		return fmt.Errorf("reading the diagnostics flags: %w", err)
	}
	shutdown := o.shutdownTimeout
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                        scheme,
		Cache:                         controllers.CacheOptions(o.namespace, o.watchFilter),
		Client:                        controllers.ClientOptions(),
		Metrics:                       *metricsOpts,
		HealthProbeBindAddress:        o.probeAddr,
		PprofBindAddress:              o.pprofAddr,
		LeaderElection:                o.leaderElect,
		LeaderElectionID:              leaderElectionID,
		LeaderElectionNamespace:       o.leaderElectionNS,
		LeaderElectionReleaseOnCancel: true,
		GracefulShutdownTimeout:       &shutdown,
		WebhookServer:                 webhook.NewServer(webhook.Options{Port: o.webhookPort, CertDir: o.webhookCertDir}),
	})
	if err != nil {
		return fmt.Errorf("creating the manager: %w", err)
	}
	// The metrics server serves controller-runtime's registry.
	if err := buildinfo.Register(ctrlmetrics.Registry, version.Get().BuildLabels()); err != nil {
		return err
	}

	ctx := ctrl.SetupSignalHandler()
	// Which of CAPI's APIs exist decides what is watched: a standalone install has none.
	dc, err := discovery.NewDiscoveryClientForConfigAndClient(mgr.GetConfig(), mgr.GetHTTPClient())
	if err != nil {
		return fmt.Errorf("creating the discovery client: %w", err)
	}
	apis, err := controllers.DiscoverAPIs(dc)
	if err != nil {
		return err
	}
	var cc clustercache.ClusterCache
	if apis.Clusters {
		// The ClusterCache watches Clusters; without them there is no workload cluster to reach.
		if cc, err = controllers.SetupClusterCache(ctx, mgr, controllers.ControllerName, false); err != nil {
			return err
		}
		controllers.ClusterCacheRetry(cc, o.workloadRetry)
	}
	vipOpts := vip.Options{Client: mgr.GetClient(), Workload: cc, AgentImage: o.agentImage}
	if err := controllers.Setup(ctx, mgr, controllers.Options{
		MaxConcurrentReconciles: o.concurrency,
		NodeTargetsNamespace:    o.nodeTargetsNamespace,
		Backends: []providers.Backend{vip.NewARP(vipOpts), vip.NewBGP(vipOpts), wireguard.New(wireguard.Options{
			Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), AgentImage: o.agentImage})},
		ClusterCache: cc,
		APIs:         &apis,
	}); err != nil {
		return fmt.Errorf("setting up the LoadBalancer controller: %w", err)
	}
	if o.webhookPort != 0 {
		// Registering starts the server with the manager; it runs on every replica, leader or not.
		controllers.SetupWebhook(mgr)
		// The webhook Service routes to ready pods only: ready once the server answers TLS.
		if err := mgr.AddReadyzCheck("webhook", mgr.GetWebhookServer().StartedChecker()); err != nil {
			return err
		}
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return err
	}
	// Ready once the informers have synced: before that a reconcile would see no members.
	if err := mgr.AddReadyzCheck("readyz", func(req *http.Request) error {
		wctx, cancel := context.WithTimeout(req.Context(), time.Second)
		defer cancel()
		if !mgr.GetCache().WaitForCacheSync(wctx) {
			return errors.New("informer caches not synced")
		}
		return nil
	}); err != nil {
		return err
	}

	log.Info("Starting manager", "namespace", o.namespace, "watchFilter", o.watchFilter, "concurrency", o.concurrency, "leaderElect", o.leaderElect,
		"webhookPort", o.webhookPort)
	if err := mgr.Start(ctx); err != nil {
		return fmt.Errorf("running the manager: %w", err)
	}
	log.Info("Manager stopped")
	return nil
}
