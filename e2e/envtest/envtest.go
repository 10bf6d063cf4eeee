// Package envtest starts a real kube-apiserver and etcd (built by
// `make testbin`) with the Cluster API CRDs and caplb's own CRDs installed,
// for integration tests, the demo and benchmarks.
//
// It wraps controller-runtime's envtest so that every caller gets the same
// binaries, CRD set and timeouts, and so that missing binaries produce an
// error pointing at `make testbin` instead of envtest's generic message.
package envtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// DefaultStartTimeout bounds the start of each control-plane component.
// controller-runtime's 20s default is too tight for a cold kube-apiserver on
// a loaded 2-core CI machine.
const DefaultStartTimeout = 60 * time.Second

// Options tunes Start. The zero value is a control plane with CAPI and caplb
// CRDs installed.
type Options struct {
	// ExtraCRDPaths are additional CRD files or directories to install. Each
	// must exist.
	ExtraCRDPaths []string
	// StartTimeout overrides DefaultStartTimeout per component.
	StartTimeout time.Duration
	// AttachOutput streams kube-apiserver and etcd logs to the test's
	// stdout/stderr, for debugging start failures. The environment variable
	// KUBEBUILDER_ATTACH_CONTROL_PLANE_OUTPUT=true has the same effect.
	AttachOutput bool
	// WithoutCAPLBCRDs leaves caplb's own CRDs out, for a test that installs them itself (the
	// install test applies the released components).
	WithoutCAPLBCRDs bool
	// StopTimeout bounds how long Stop waits for each process after SIGTERM before it kills it
	// (controller-runtime's default: 20s).
	StopTimeout time.Duration
	// WithoutCAPICRDs leaves Cluster API's CRDs out (caplb's and ExtraCRDPaths are installed): a
	// standalone cluster, where the manager serves Node targets only.
	WithoutCAPICRDs bool
	// WithoutCRDs installs no CRD at all: an API server playing a workload cluster, which has
	// neither CAPI's kinds nor caplb's.
	WithoutCRDs bool
	// ServiceEndpointRouting makes the API server call webhooks behind a Service at the
	// Service's EndpointSlice addresses instead of its cluster IP (--enable-aggregator-routing):
	// there is no kube-proxy, so a test that plays the endpoints controller reaches a webhook
	// server in the test through the shipped Service reference.
	ServiceEndpointRouting bool
}

// Env is a running control plane. Call Stop when done, or the kube-apiserver
// and etcd processes outlive the test.
type Env struct {
	// Environment is the underlying controller-runtime environment, e.g. for
	// AddUser or KubeConfig.
	Environment *envtest.Environment
	// Config authenticates as a system:masters admin.
	Config *rest.Config

	stopOnce sync.Once
	stopErr  error
}

// Start launches etcd and kube-apiserver and installs the CRDs: CAPI's
// (from the module cache), caplb's from <repo>/config/crd/bases when that
// directory exists, and opts.ExtraCRDPaths. Start returns once the CRDs are
// served.
func Start(opts Options) (*Env, error) {
	binDir, err := BinaryDir()
	if err != nil {
		return nil, err
	}
	crdPaths, err := crdPaths(opts.ExtraCRDPaths, !opts.WithoutCAPICRDs, !opts.WithoutCAPLBCRDs)
	if err != nil {
		return nil, err
	}
	if opts.WithoutCRDs {
		crdPaths = nil
	}
	timeout := opts.StartTimeout
	if timeout == 0 {
		timeout = DefaultStartTimeout
	}

	te := &envtest.Environment{
		BinaryAssetsDirectory: binDir,
		CRDDirectoryPaths:     crdPaths,
		// Every path we pass was checked or is required to exist: a silently
		// skipped directory would surface later as a confusing "no matches
		// for kind" error.
		ErrorIfCRDPathMissing:    true,
		ControlPlaneStartTimeout: timeout,
		ControlPlaneStopTimeout:  opts.StopTimeout,
		AttachControlPlaneOutput: opts.AttachOutput,
	}
	if opts.ServiceEndpointRouting {
		te.ControlPlane.GetAPIServer().Configure().Set("enable-aggregator-routing", "true")
	}
	cfg, err := te.Start()
	if err != nil {
		// Start can fail after the processes are up (e.g. a bad CRD); do not
		// leak them.
		if stopErr := te.Stop(); stopErr != nil {
			err = errors.Join(err, fmt.Errorf("stopping partially started control plane: %w", stopErr))
		}
		return nil, fmt.Errorf("starting envtest control plane from %s: %w", binDir, err)
	}
	if !opts.WithoutCAPICRDs && !opts.WithoutCRDs {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		err := labelProviderCRDs(ctx, cfg)
		cancel()
		if err != nil {
			return nil, errors.Join(err, te.Stop())
		}
	}
	return &Env{Environment: te, Config: cfg}, nil
}

// Stop terminates kube-apiserver and etcd and removes their temporary data.
// It is safe to call more than once.
func (e *Env) Stop() error {
	e.stopOnce.Do(func() {
		if err := e.Environment.Stop(); err != nil {
			e.stopErr = fmt.Errorf("stopping envtest control plane: %w", err)
		}
	})
	return e.stopErr
}

// crdPaths assembles the CRD directories to install, in dependency order:
// CAPI first since caplb's resources reference CAPI objects.
func crdPaths(extra []string, withCAPI, withOwn bool) ([]string, error) {
	var paths []string
	if withCAPI {
		var err error
		if paths, err = CAPICRDPaths(); err != nil {
			return nil, err
		}
	}
	if !withOwn {
		return append(paths, extra...), nil
	}
	root, err := RepoRoot()
	if err != nil {
		return nil, err
	}
	// Our CRDs are generated later in the project's life; until then the
	// directory is simply absent.
	own := filepath.Join(root, "config", "crd", "bases")
	switch fi, err := os.Stat(own); {
	case err == nil && fi.IsDir():
		paths = append(paths, own)
	case err != nil && !errors.Is(err, os.ErrNotExist):
		return nil, fmt.Errorf("checking caplb CRD directory: %w", err)
	}
	return append(paths, extra...), nil
}
