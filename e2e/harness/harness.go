// Package harness runs caplb against Cluster API's own code on a real API server: it starts the
// test control plane (e2e/envtest, with CAPI's CRDs, caplb's and the test infrastructure CRD),
// CAPI's real Cluster and Machine reconcilers with a ClusterCache, the test infrastructure
// provider (e2e/testinfra) and caplb's controllers, each in its own controller-runtime manager so
// that caplb's can be stopped and started again while CAPI keeps running, as when the caplb
// Deployment restarts in a real management cluster.
//
// The integration suite, the demo and the controller benchmark share it. It has no test
// dependencies: waits return errors and callers decide how to fail.
package harness

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lbv1 "github.com/caplb/caplb/api/v1alpha1"
	"github.com/caplb/caplb/e2e/envtest"
	"github.com/caplb/caplb/e2e/testinfra"
)

// LogEnv names the environment variable that turns on controller logs (to stderr): any
// non-empty value. Off by default, because CAPI's reconcilers log every step.
const LogEnv = "CAPLB_TEST_LOG"

// Options tunes Start.
type Options struct {
	// Logger receives the managers' logs. Zero: discarded unless $CAPLB_TEST_LOG is set.
	Logger logr.Logger
	// ClientQPS and ClientBurst are the rate limits of the harness's own client. Zero means
	// 200 and 400: parallel tests poll every 100ms, which client-go's defaults (5, 10) throttle.
	ClientQPS   float32
	ClientBurst int
	// WithoutCAPLBCRDs starts the control plane without caplb's CRDs (see envtest.Options).
	WithoutCAPLBCRDs bool
	// ServiceEndpointRouting: see envtest.Options.
	ServiceEndpointRouting bool
	// WithoutCAPICRDs starts a standalone cluster: neither CAPI's CRDs nor the test
	// infrastructure provider's, only caplb's (see envtest.Options).
	WithoutCAPICRDs bool
}

// Env is a running test control plane and a client for it.
type Env struct {
	// ControlPlane is the envtest kube-apiserver and etcd.
	ControlPlane *envtest.Env
	// Config authenticates as cluster admin.
	Config *rest.Config
	// Scheme knows core Kubernetes, CAPI core and caplb types.
	Scheme *runtime.Scheme
	// Client talks to the API server directly (no cache), so a test reads what is stored.
	Client client.Client
	// Logger is the logger handed to managers.
	Logger logr.Logger
}

// NewScheme returns a scheme with every type the harness and its managers use.
func NewScheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{
		clientgoscheme.AddToScheme, apiextensionsv1.AddToScheme, clusterv1.AddToScheme, ipamv1.AddToScheme, lbv1.AddToScheme,
		bootstrapv1.AddToScheme, controlplanev1.AddToScheme,
	} {
		if err := add(s); err != nil {
			return nil, fmt.Errorf("building scheme: %w", err)
		}
	}
	return s, nil
}

// Start launches the control plane with the test infrastructure CRD installed.
func Start(opts Options) (*Env, error) {
	logger := opts.Logger
	if logger.GetSink() == nil {
		logger = logr.Discard()
		if os.Getenv(LogEnv) != "" {
			logger = funcr.New(func(prefix, args string) {
				fmt.Fprintln(os.Stderr, prefix, args)
			}, funcr.Options{Verbosity: 4, LogTimestamp: true})
		}
	}
	// controller-runtime and klog (used directly by parts of CAPI) are process-wide loggers;
	// pointing them at our logger keeps the demo's timeline and test output readable.
	ctrl.SetLogger(logger)
	klog.SetLogger(logger)

	crdDir, err := testinfra.CRDDir()
	if err != nil {
		return nil, err
	}
	extra := []string{crdDir}
	if opts.WithoutCAPICRDs {
		extra = nil
	}
	cp, err := envtest.Start(envtest.Options{ExtraCRDPaths: extra, WithoutCAPLBCRDs: opts.WithoutCAPLBCRDs,
		WithoutCAPICRDs: opts.WithoutCAPICRDs, ServiceEndpointRouting: opts.ServiceEndpointRouting})
	if err != nil {
		return nil, err
	}
	env, err := newEnv(cp, logger, opts)
	if err != nil {
		return nil, errors.Join(err, cp.Stop())
	}
	return env, nil
}

func newEnv(cp *envtest.Env, logger logr.Logger, opts Options) (*Env, error) {
	scheme, err := NewScheme()
	if err != nil {
		return nil, err
	}
	cfg := rest.CopyConfig(cp.Config)
	cfg.QPS, cfg.Burst = 200, 400
	if opts.ClientQPS > 0 {
		cfg.QPS, cfg.Burst = opts.ClientQPS, opts.ClientBurst
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, fmt.Errorf("creating client: %w", err)
	}
	return &Env{ControlPlane: cp, Config: cp.Config, Scheme: scheme, Client: c, Logger: logger}, nil
}

// Stop stops the control plane. Stop the managers first.
func (e *Env) Stop() error {
	return e.ControlPlane.Stop()
}

// CreateNamespace creates a namespace with a generated name starting with prefix.
func (e *Env) CreateNamespace(ctx context.Context, prefix string) (string, error) {
	ns := &corev1.Namespace{}
	ns.GenerateName = prefix + "-"
	if err := e.Client.Create(ctx, ns); err != nil {
		return "", fmt.Errorf("creating namespace: %w", err)
	}
	return ns.Name, nil
}
