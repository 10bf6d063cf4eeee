package harness

import (
	"context"
	"fmt"
	"time"

	"sigs.k8s.io/cluster-api/bootstrap/kubeadm/reconcilers/kubeadmconfig"
	"sigs.k8s.io/cluster-api/controllers/clustercache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/manager"
)

// bootstrapTokenTTL is how long CABPK's join tokens live (its manager's default, 15 min).
const bootstrapTokenTTL = 15 * time.Minute

// setupKubeadmBootstrap adds CAPI's kubeadm bootstrap provider to CAPI's manager, as its own
// binary sets it up (secretClient reads the Secrets CAPI's cache keeps).
func setupKubeadmBootstrap(ctx context.Context, mgr manager.Manager, cc clustercache.ClusterCache, secretClient client.Client) error {
	if err := (&kubeadmconfig.Reconciler{
		Client:              mgr.GetClient(),
		SecretCachingClient: secretClient,
		APIReader:           mgr.GetAPIReader(),
		ClusterCache:        cc,
		TokenTTL:            bootstrapTokenTTL,
	}).SetupWithManager(ctx, mgr, controller.Options{MaxConcurrentReconciles: 5}); err != nil {
		return fmt.Errorf("setting up CAPI's kubeadm bootstrap provider: %w", err)
	}
	return nil
}
