package harness

import (
	"context"
	"errors"
	"fmt"
	"time"

	"sigs.k8s.io/cluster-api/bootstrap/kubeadm/reconcilers/kubeadmconfig"
	cabpksetup "sigs.k8s.io/cluster-api/bootstrap/kubeadm/setup"
	"sigs.k8s.io/cluster-api/controllers/clustercache"
	"sigs.k8s.io/cluster-api/controlplane/kubeadm/reconcilers/kubeadmcontrolplane"
	kcpsetup "sigs.k8s.io/cluster-api/controlplane/kubeadm/setup"
	"sigs.k8s.io/cluster-api/util/index"
	ctrl "sigs.k8s.io/controller-runtime"
	ctrlcache "sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/manager"
)

const (
	// bootstrapTokenTTL is how long CABPK's join tokens live (its manager's default, 15 min).
	bootstrapTokenTTL = 15 * time.Minute
	// KCP's etcd timeouts (its manager's defaults).
	kcpEtcdDialTimeout = 10 * time.Second
	kcpEtcdCallTimeout = 15 * time.Second
)

// providerManager is how one of CAPI's kubeadm providers sets up its manager: its cache (which
// Secrets it keeps with their data), client and ClusterCache options, and its reconciler.
type providerManager struct {
	name          string
	cache         func(name string) ctrlcache.Options
	client        client.Options
	secretClient  func(mgr ctrl.Manager) (client.Client, error)
	clusterCache  clustercache.CacheOptions
	clusterClient func(name string) clustercache.ClientOptions
	setup         func(ctx context.Context, mgr manager.Manager, cc clustercache.ClusterCache, secretClient client.Client) error
}

// kubeadmBootstrap is CABPK's manager (bootstrap/kubeadm/main.go).
func (e *Env) kubeadmBootstrap() providerManager {
	return providerManager{
		name: "kubeadm-bootstrap",
		cache: func(name string) ctrlcache.Options {
			return cabpksetup.ManagerCacheOptions(e.Scheme, name, "", 10*time.Minute)
		},
		client:       cabpksetup.ManagerClientOptions(),
		secretClient: cabpksetup.CreateSecretCachingClient,
		clusterCache: cabpksetup.ClusterCacheCacheOptions(),
		clusterClient: func(name string) clustercache.ClientOptions {
			return cabpksetup.ClusterCacheClientOptions(name, 20, 30)
		},
		setup: func(ctx context.Context, mgr manager.Manager, cc clustercache.ClusterCache, secretClient client.Client) error {
			return (&kubeadmconfig.Reconciler{
				Client:              mgr.GetClient(),
				SecretCachingClient: secretClient,
				APIReader:           mgr.GetAPIReader(),
				ClusterCache:        cc,
				TokenTTL:            bootstrapTokenTTL,
			}).SetupWithManager(ctx, mgr, controller.Options{MaxConcurrentReconciles: 5})
		},
	}
}

// kubeadmControlPlane is KCP's manager (controlplane/kubeadm/main.go).
func (e *Env) kubeadmControlPlane() providerManager {
	return providerManager{
		name: "kubeadm-control-plane",
		cache: func(name string) ctrlcache.Options {
			return kcpsetup.ManagerCacheOptions(e.Scheme, name, "", 10*time.Minute)
		},
		client:        kcpsetup.ManagerClientOptions(),
		secretClient:  kcpsetup.CreateSecretCachingClient,
		clusterCache:  kcpsetup.ClusterCacheCacheOptions(),
		clusterClient: func(name string) clustercache.ClientOptions { return kcpsetup.ClusterCacheClientOptions(name, 20, 30) },
		setup: func(ctx context.Context, mgr manager.Manager, cc clustercache.ClusterCache, secretClient client.Client) error {
			return (&kubeadmcontrolplane.Reconciler{
				Client:              mgr.GetClient(),
				APIReader:           mgr.GetAPIReader(),
				SecretCachingClient: secretClient,
				ClusterCache:        cc,
				EtcdDialTimeout:     kcpEtcdDialTimeout,
				EtcdCallTimeout:     kcpEtcdCallTimeout,
				// CAPI refuses less than 2m (the ClusterCache must drop a dead connection first).
				RemoteConditionsGracePeriod: 5 * time.Minute,
			}).SetupWithManager(ctx, mgr, controller.Options{MaxConcurrentReconciles: 5})
		},
	}
}

// startProvider runs p in a manager of its own, as each provider runs in its own Deployment:
// one manager's cache options would not do for all (CAPI core's drops the data of every Secret
// but kubeconfigs; KCP and CABPK keep the cluster's CA Secrets). suffix keeps client-go's
// informer names unique in the process.
func (e *Env) startProvider(ctx context.Context, p providerManager, suffix string) (*Running, error) {
	name := p.name + suffix
	opts := e.managerOptions()
	opts.Cache = p.cache(name)
	opts.Client = p.client
	mgr, err := ctrl.NewManager(e.Config, opts)
	if err != nil {
		return nil, fmt.Errorf("creating the %s manager: %w", p.name, err)
	}
	if err := index.AddDefaultIndexes(ctx, mgr); err != nil {
		return nil, fmt.Errorf("adding CAPI indexes to the %s manager: %w", p.name, err)
	}
	secretClient, err := p.secretClient(mgr)
	if err != nil {
		return nil, fmt.Errorf("creating the %s secret caching client: %w", p.name, err)
	}
	cc, err := clustercache.SetupWithManager(ctx, mgr, clustercache.Options{
		SecretClient: secretClient, Cache: p.clusterCache, Client: p.clusterClient(name),
	}, controller.Options{MaxConcurrentReconciles: 10})
	if err != nil {
		return nil, fmt.Errorf("creating the %s ClusterCache: %w", p.name, err)
	}
	if s, ok := cc.(interface{ SetConnectionCreationRetryInterval(time.Duration) }); ok {
		s.SetConnectionCreationRetryInterval(2 * time.Second)
	}
	if err := p.setup(ctx, mgr, cc, secretClient); err != nil {
		return nil, fmt.Errorf("setting up %s: %w", p.name, err)
	}
	r, err := start(ctx, p.name, mgr)
	if err != nil {
		return nil, err
	}
	r.ClusterCache = cc
	go func() {
		<-r.ctx.Done()
		if s, ok := cc.(interface{ Shutdown() }); ok {
			s.Shutdown()
		}
	}()
	return r, nil
}

// startKubeadmProviders starts the kubeadm providers o asks for; Stop of the returned
// companions stops them.
func (e *Env) startKubeadmProviders(ctx context.Context, o CAPIOptions, suffix string) ([]*Running, error) {
	var wanted []providerManager
	if o.KubeadmBootstrap {
		wanted = append(wanted, e.kubeadmBootstrap())
	}
	if o.KubeadmControlPlane {
		wanted = append(wanted, e.kubeadmControlPlane())
	}
	var started []*Running
	for _, p := range wanted {
		r, err := e.startProvider(ctx, p, suffix)
		if err != nil {
			return nil, errors.Join(err, stopAll(started))
		}
		started = append(started, r)
	}
	return started, nil
}

func stopAll(rs []*Running) error {
	var errs []error
	for _, r := range rs {
		errs = append(errs, r.Stop())
	}
	return errors.Join(errs...)
}
