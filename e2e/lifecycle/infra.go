//go:build linux

package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/caplb/caplb/e2e/lab/cloudinit"
	"github.com/caplb/caplb/e2e/testinfra"
)

// machineFinalizer holds a TestMachine until its lab machine is destroyed, as a cloud
// provider's finalizer holds an instance until the VM is gone.
const machineFinalizer = "lifecycle.caplb.test/machine"

// infra is the lab's infrastructure provider: each TestMachine becomes a machine of the lab
// (Node), booted from the bootstrap Secret caplb rendered for the cluster; deleting the
// TestMachine destroys it.
type infra struct {
	client    client.Client
	apiReader client.Reader
	deps      *nodeDeps
	// bootstrapSecret names the Secret the control-plane machines' bootstrap files come from.
	bootstrapSecret string
	// workers, when set, boots the Machines whose spec.bootstrap.dataSecretName is its Secret as
	// workers (workers.go).
	workers *bootRole
	// kubeVIP, when set, boots the Machines whose bootstrap is its Secret with kube-vip
	// (kubevip.go); podGC then deletes a destroyed machine's Pods (mirror.go).
	kubeVIP *bootRole
	podGC   func(node string)
	// cabpk: a control-plane machine boots from the data Secret CABPK rendered for its Machine.
	cabpk bool

	mu    sync.Mutex
	nodes map[string]*Node
	next  int
	// booted records every machine booted, in order, with what it booted from.
	booted []Boot
}

func (r *infra) setup(mgr ctrl.Manager) error {
	tm := &unstructured.Unstructured{}
	tm.SetGroupVersionKind(testinfra.MachineGVK)
	// One at a time: machines boot one after the other, as a provider's API queue would.
	return ctrl.NewControllerManagedBy(mgr).Named("lifecycle-machine").For(tm).
		WithOptions(controller.Options{MaxConcurrentReconciles: 1}).Complete(r)
}

func (r *infra) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	tm := &unstructured.Unstructured{}
	tm.SetGroupVersionKind(testinfra.MachineGVK)
	if err := r.apiReader.Get(ctx, req.NamespacedName, tm); err != nil {
		if apierrors.IsNotFound(err) {
			return ctrl.Result{}, r.destroy(req.Name)
		}
		return ctrl.Result{}, err
	}
	if !tm.GetDeletionTimestamp().IsZero() {
		if err := r.destroy(req.Name); err != nil {
			return ctrl.Result{}, err
		}
		if controllerutil.RemoveFinalizer(tm, machineFinalizer) {
			return ctrl.Result{}, client.IgnoreNotFound(r.client.Update(ctx, tm))
		}
		return ctrl.Result{}, nil
	}
	if controllerutil.AddFinalizer(tm, machineFinalizer) {
		if err := r.client.Update(ctx, tm); err != nil {
			return ctrl.Result{}, err
		}
	}
	r.mu.Lock()
	n := r.nodes[req.Name]
	r.mu.Unlock()
	if n == nil {
		role, ok, err := r.roleOf(ctx, tm)
		if err != nil || !ok {
			// The Machine has not adopted its TestMachine yet: its bootstrap is not known.
			return ctrl.Result{RequeueAfter: 200 * time.Millisecond}, err
		}
		secretName := r.bootstrapSecret
		if role.worker || role.kubeVIP {
			secretName = role.secret
		} else if r.cabpk {
			name, ok, err := r.cabpkSecret(ctx, req.Namespace, tm.GetOwnerReferences())
			if err != nil || !ok {
				// CABPK has not rendered the Machine's data yet.
				return ctrl.Result{RequeueAfter: 200 * time.Millisecond}, err
			}
			secretName = name
		}
		secret := &corev1.Secret{}
		err = r.apiReader.Get(ctx, client.ObjectKey{Namespace: req.Namespace, Name: secretName}, secret)
		if apierrors.IsNotFound(err) {
			// The bootstrap data is not ready: a machine cannot boot yet.
			return ctrl.Result{RequeueAfter: 200 * time.Millisecond}, nil
		}
		if err != nil {
			return ctrl.Result{}, err
		}
		r.mu.Lock()
		r.next++
		index := r.next
		r.mu.Unlock()
		providerID := testinfra.ProviderID(req.Namespace, req.Name)
		if n, err = r.deps.boot(ctx, req.Name, index, providerID, secret, r.running(), role); err != nil {
			r.deps.lab.Logf("infra", "%v", err)
			return ctrl.Result{}, err
		}
		boot := Boot{Machine: req.Name, Secret: secretName}
		if n.kubeadmStep != nil {
			boot.Kubeadm = *n.kubeadmStep
			boot.FromCloudInit = true
		}
		r.mu.Lock()
		r.nodes[req.Name] = n
		r.booted = append(r.booted, boot)
		r.mu.Unlock()
	}
	patch := fmt.Sprintf(`{"spec":{"providerID":%q,"nodeName":%q}}`, n.providerID, n.Name)
	if err := r.client.Patch(ctx, tm, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
		return ctrl.Result{}, fmt.Errorf("TestMachine %s: %w", req, err)
	}
	base := tm.DeepCopy()
	tm.Object["status"] = map[string]any{
		"initialization": map[string]any{"provisioned": true},
		"addresses":      []any{map[string]any{"type": "InternalIP", "address": n.Addr.String()}},
	}
	if err := r.client.Status().Patch(ctx, tm, client.MergeFrom(base)); err != nil {
		return ctrl.Result{}, fmt.Errorf("TestMachine %s status: %w", req, err)
	}
	return ctrl.Result{}, nil
}

func (r *infra) destroy(name string) error {
	r.mu.Lock()
	n := r.nodes[name]
	delete(r.nodes, name)
	r.mu.Unlock()
	if n == nil {
		return nil
	}
	err := n.destroy()
	if r.podGC != nil {
		go r.podGC(name)
	}
	return err
}

// Boot is one machine's boot: the bootstrap data Secret it booted from and, with CABPK's data,
// the kubeadm command it ran.
type Boot struct {
	Machine, Secret string
	// FromCloudInit: the machine booted from CABPK's cloud-init (Kubeadm is its command).
	FromCloudInit bool
	Kubeadm       cloudinit.KubeadmStep
}

// Booted lists every machine booted so far, in order.
func (l *Lab) Booted() []Boot {
	l.infra.mu.Lock()
	defer l.infra.mu.Unlock()
	return append([]Boot(nil), l.infra.booted...)
}

// Node returns the running machine called name, or nil.
func (r *infra) node(name string) *Node {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.nodes[name]
}

// running lists the running machines.
func (r *infra) running() []*Node {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]*Node, 0, len(r.nodes))
	for _, n := range r.nodes {
		out = append(out, n)
	}
	return out
}

func (r *infra) destroyAll() error {
	var errs []error
	for _, n := range r.running() {
		errs = append(errs, r.destroy(n.Name))
	}
	return errors.Join(errs...)
}
