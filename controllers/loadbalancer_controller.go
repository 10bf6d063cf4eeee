package controllers

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/controllers/clustercache"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/cluster-api/util/patch"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"

	lbv1 "github.com/caplb/caplb/api/v1alpha1"
	"github.com/caplb/caplb/providers"
)

// RBAC, least privilege: members and Clusters are read from the cache and patched (annotations,
// controlPlaneEndpoint), never updated or deleted; control-plane objects are only read and
// patched when their spec.loadBalancerRef names a LoadBalancer.
// +kubebuilder:rbac:groups=loadbalancer.cluster.x-k8s.io,resources=loadbalancers,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=loadbalancer.cluster.x-k8s.io,resources=loadbalancers/status,verbs=get;patch
// +kubebuilder:rbac:groups=loadbalancer.cluster.x-k8s.io,resources=loadbalancers/finalizers,verbs=update
// +kubebuilder:rbac:groups=cluster.x-k8s.io,resources=machines,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=cluster.x-k8s.io,resources=clusters,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=controlplane.cluster.x-k8s.io,resources=kubeadmcontrolplanes;kthreescontrolplanes;rke2controlplanes,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups="";events.k8s.io,resources=events,verbs=create;patch

// LoadBalancerReconciler reconciles LoadBalancers: it picks the members, runs each member's
// state machine through the backend, holds CAPI pre-drain hooks on member Machines, and
// publishes the endpoint to the LoadBalancer's status, the Cluster and the control plane.
type LoadBalancerReconciler struct {
	// probeEvents carries LoadBalancers whose endpoint probe result changed (static backend).
	probeEvents chan event.GenericEvent
	// Client reads from the manager's cache and writes to the API server.
	Client client.Client
	// APIReader reads the control-plane object behind Cluster.spec.controlPlaneRef directly,
	// so that the manager does not cache (and need list/watch on) every control-plane kind.
	APIReader client.Reader
	// RESTMapper resolves the control-plane kind's version.
	RESTMapper meta.RESTMapper
	// Recorder emits events regarding LoadBalancers.
	Recorder events.EventRecorder
	// Backends holds the backends this build supports.
	Backends *providers.Registry
	// Metrics are the controller's collectors.
	Metrics *Metrics
	// Now returns the current time; tests fix it.
	Now func() time.Time
	// NodeTargetsNamespace is the only namespace whose LoadBalancers may target Nodes; empty
	// disables Node targets (see node_targets.go).
	NodeTargetsNamespace string
	// ClusterCache, when set, watches the workload clusters' Nodes for the VIP backends' agent
	// reports (see watchWorkloadNodes).
	ClusterCache clustercache.ClusterCache
	// APIs are the optional APIs the cluster serves; a LoadBalancer that needs another is only
	// reported (optional_apis.go), and only served kinds are watched.
	APIs APIs

	// ServingCerts checks the members' serving certificates during an endpoint move; nil means
	// a TLS handshake from the manager (servingcert.go).
	ServingCerts ServingCertChecker

	// controller is the built controller, for watches added at run time.
	controller controller.Controller

	// cpPublished remembers, per LoadBalancer UID, a cpMemo: the control plane last looked at
	// and whether our endpoint is on it, to spare a live GET per reconcile. Losing it (a restart)
	// costs one GET.
	cpPublished sync.Map
	// cpWatches adds a metadata watch per control-plane kind met (see controlPlaneWatches).
	cpWatches *controlPlaneWatches
	// claimsReported remembers which claimed members were reported (see firstClaimReport).
	claimsReported sync.Map
	// pending holds, per LoadBalancer, the status last written until the cache shows it
	// (see cacheBehind).
	pending sync.Map
	// ownNodeVerdicts remembers, per workload Node UID, whether it is a Node of the manager's own
	// cluster (remote_fence.go). Losing it (a restart) costs one live read per workload Node.
	ownNodeVerdicts sync.Map
}

// scope carries what one reconcile learned, between its phases.
type scope struct {
	lb      *lbv1.LoadBalancer
	cluster *clusterv1.Cluster // nil when spec.clusterName is empty or names no Cluster
	// clusterMissing: spec.clusterName is set but no such Cluster exists.
	clusterMissing bool
	// peers are the other LoadBalancers of the same Cluster (cluster_peers.go).
	peers []lbv1.LoadBalancer
	// notPublisher: an older LoadBalancer of the Cluster publishes its endpoint (publishToCluster).
	notPublisher bool
	kind         memberKind
	// workload is the WorkloadClusterReachable condition of a remote Node LoadBalancer (nil for
	// the other kinds); set on the LoadBalancer unless paused.
	workload *metav1.Condition
	paused   bool
	backend  providers.Backend
	invalid  field.ErrorList

	// members is nil until gathered; status.targets is only rewritten when it is set.
	members  []*member
	gathered bool
	// ensured: Ensure was called (it is not when gathering members failed); endpoint and
	// ensureErr are its answer.
	ensured   bool
	endpoint  providers.EndpointStatus
	ensureErr error
	hooksHeld int
	requeue   time.Duration
	// reconcileErr is what the phases returned; a lasting one makes Ready False.
	reconcileErr error
	// releasedWhileInvalid are members whose hook the invalid-spec path released (their
	// deletion must not wait on a spec someone has to fix); updateStatus records them.
	releasedWhileInvalid []*member
}

func (s *scope) requeueAfter(d time.Duration) {
	if d > 0 && (s.requeue == 0 || d < s.requeue) {
		s.requeue = d
	}
}

func (r *LoadBalancerReconciler) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

// Reconcile follows CAPI's order: get, finalizer, patch helper, paused, deferred patch, then the
// delete or the normal path.
func (r *LoadBalancerReconciler) Reconcile(ctx context.Context, req ctrl.Request) (res ctrl.Result, reterr error) {
	start := time.Now()
	outcome := resultSuccess
	defer func() {
		switch {
		case reterr != nil:
			outcome = resultError
		case outcome == resultSuccess && res.RequeueAfter > 0:
			outcome = resultRequeue
		}
		r.Metrics.observeReconcile(outcome, time.Since(start))
	}()

	lb := &lbv1.LoadBalancer{}
	if err := r.Client.Get(ctx, req.NamespacedName, lb); err != nil {
		if apierrors.IsNotFound(err) {
			r.Metrics.forget(req.Namespace, req.Name)
			r.pending.Delete(req.NamespacedName)
			return ctrl.Result{}, r.releaseOrphanMarks(ctx, req.NamespacedName)
		}
		return ctrl.Result{}, err
	}
	if r.cacheBehind(lb) {
		outcome = resultStale
		return ctrl.Result{RequeueAfter: staleRetry}, nil
	}
	if missing := r.APIs.missingFor(&lb.Spec); len(missing) > 0 {
		// Before anything reads a Cluster or Machine: those reads would fail with no kind match.
		return ctrl.Result{}, r.reconcileMissingAPIs(ctx, lb, missing)
	}
	log := ctrl.LoggerFrom(ctx).WithValues("Cluster", klog.KRef(lb.Namespace, lb.Spec.ClusterName))
	ctx = ctrl.LoggerInto(ctx, log)

	s := &scope{lb: lb}
	s.kind = r.memberKindFor(ctx, s)
	if lb.Spec.ClusterName != "" {
		cluster := &clusterv1.Cluster{}
		err := r.Client.Get(ctx, client.ObjectKey{Namespace: lb.Namespace, Name: lb.Spec.ClusterName}, cluster)
		switch {
		case apierrors.IsNotFound(err):
			s.clusterMissing = true
		case err != nil:
			return ctrl.Result{}, err
		default:
			s.cluster = cluster
		}
	}

	// The finalizer goes on first, in a patch of its own, so that no hook is ever placed by a
	// LoadBalancer that could be deleted without releasing it; the Cluster's ownerRef rides in the
	// same patch (one write per new LoadBalancer, not two). Like CAPI we return: the update event
	// brings us back with a cache that has caught up.
	if lb.DeletionTimestamp.IsZero() && !controllerutil.ContainsFinalizer(lb, lbv1.LoadBalancerFinalizer) {
		orig := lb.DeepCopy()
		controllerutil.AddFinalizer(lb, lbv1.LoadBalancerFinalizer)
		ensureClusterOwnerRef(lb, s.cluster)
		return ctrl.Result{}, r.Client.Patch(ctx, lb, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}))
	}

	patchHelper, err := patch.NewHelper(lb, r.Client)
	if err != nil {
		return ctrl.Result{}, err
	}
	before := lb.DeepCopy()

	// The Paused condition is set here and written by the deferred patch below, not with
	// paused.EnsurePausedCondition: that helper writes the condition in a patch of its own, a
	// second status write per reconcile.
	pausedCond := pausedCondition(s.cluster, lb)
	conditions.Set(lb, pausedCond)
	s.paused = pausedCond.Status == metav1.ConditionTrue

	defer func() {
		s.reconcileErr = reterr
		r.updateStatus(ctx, s)
		if reterr == nil && !s.paused {
			lb.Status.ObservedGeneration = lb.Generation
		}
		if err := r.patchLoadBalancer(ctx, patchHelper, before, lb); err != nil {
			reterr = kerrors.NewAggregate([]error{reterr, err})
		}
		if reterr == nil && s.requeue > 0 {
			res.RequeueAfter = s.requeue
		}
	}()

	if s.paused {
		outcome = resultPaused
		ctrl.LoggerFrom(ctx).V(4).Info("Reconciliation is paused", "reason", pausedCond.Message)
		return ctrl.Result{}, nil
	}

	if !lb.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, r.reconcileDelete(ctx, s)
	}
	return ctrl.Result{}, r.reconcileNormal(ctx, s)
}

// reconcileNormal runs the phases of a LoadBalancer that is not being deleted.
func (r *LoadBalancerReconciler) reconcileNormal(ctx context.Context, s *scope) error {
	peers, err := r.clusterPeers(ctx, s.lb)
	if err != nil {
		return err
	}
	s.peers = peers
	if s.workload != nil {
		conditions.Set(s.lb, *s.workload)
	}
	s.invalid = append(nodeTargetErrors(s.lb, r.NodeTargetsNamespace), Validate(s.lb, r.Backends)...)
	s.invalid = append(s.invalid, dataPlaneConflicts(s.lb, peers)...)
	if len(s.invalid) > 0 {
		return r.reconcileInvalid(ctx, s)
	}
	ensureClusterOwnerRef(s.lb, s.cluster)
	b, err := r.Backends.Get(s.lb.Spec.Backend.Kind())
	if err != nil {
		return err // Validate checked it; unreachable unless the registry changed.
	}
	s.backend = b
	s.lb.Status.Backend = b.Kind()
	if hasNodeAgent(s.lb) {
		// Known before the Secret is rendered: the members' bootstrap names it.
		s.lb.Status.BootstrapSecretName = lbv1.AgentSecretName(s.lb)
	}
	r.watchWorkloadNodes(ctx, s)
	r.watchRemoteNodes(ctx, s)

	var errs []error
	if err := r.reconcileMembers(ctx, s); err != nil {
		errs = append(errs, err)
	}
	if err := r.reconcileEndpoint(ctx, s); err != nil {
		errs = append(errs, err)
	}
	if err := r.reconcileEndpointMove(ctx, s); err != nil {
		errs = append(errs, err)
	}
	if s.ensureErr != nil {
		errs = append(errs, s.ensureErr)
	}
	return errors.Join(errs...)
}

// patchLoadBalancer writes what the reconcile changed. Metadata and spec (finalizer removal,
// an adopted endpoint) go through CAPI's patch helper. The status goes in one merge patch of its
// own: the patch helper writes conditions and the other status fields in two patches, conditions
// first, so a reader could see Ready or ClusterEndpoint before the endpoint and targets they
// describe (`kubectl wait --for=condition=Ready` followed by reading status.endpoint would get
// nothing). One patch keeps the status consistent and costs one write instead of two. caplb is
// the only writer of a LoadBalancer's status, and cacheBehind keeps the base current, so the patch
// needs no optimistic lock.
func (r *LoadBalancerReconciler) patchLoadBalancer(ctx context.Context, helper *patch.Helper, before, lb *lbv1.LoadBalancer) error {
	status := lb.Status.DeepCopy()
	lb.Status = *before.Status.DeepCopy()
	// A failed metadata/spec patch (an adopted endpoint the API server refuses, a webhook, a
	// conflict) must not also cost the status: it explains what went wrong and carries the members'
	// states, so it is written regardless and the spec error is returned with it.
	specErr := helper.Patch(ctx, lb)
	lb.Status = *status
	if specErr != nil {
		specErr = fmt.Errorf("patching LoadBalancer metadata and spec: %w", specErr)
	}
	if statusJSON(lb) == statusJSON(before) {
		return specErr
	}
	base := before.DeepCopy()
	base.ObjectMeta = *lb.ObjectMeta.DeepCopy()
	base.Spec = *lb.Spec.DeepCopy()
	if err := r.Client.Status().Patch(ctx, lb, client.MergeFrom(base)); err != nil {
		if apierrors.IsNotFound(err) && !lb.DeletionTimestamp.IsZero() && len(lb.Finalizers) == 0 {
			return specErr // deleted once our finalizer went
		}
		return errors.Join(specErr, fmt.Errorf("patching LoadBalancer status: %w", err))
	}
	r.remember(lb)
	return specErr
}

// ensureClusterOwnerRef makes the Cluster an owner (not the controller) of the LoadBalancer, so
// that `clusterctl move` takes it along with the Cluster and deleting the Cluster deletes it; its
// finalizer still releases the hooks first. The patch helper writes it with the reconcile's
// other metadata changes.
func ensureClusterOwnerRef(lb *lbv1.LoadBalancer, cluster *clusterv1.Cluster) {
	if cluster == nil || cluster.UID == "" {
		return
	}
	refs := lb.GetOwnerReferences()
	for i, ref := range refs {
		if ref.Kind == "Cluster" && ref.Name == cluster.Name && strings.HasPrefix(ref.APIVersion, clusterv1.GroupVersion.Group+"/") {
			if ref.UID == cluster.UID && ref.APIVersion == clusterv1.GroupVersion.String() {
				return
			}
			// A Cluster recreated under the same name, or an older API version: point at this one.
			refs[i].UID, refs[i].APIVersion = cluster.UID, clusterv1.GroupVersion.String()
			lb.SetOwnerReferences(refs)
			return
		}
	}
	lb.SetOwnerReferences(append(refs, metav1.OwnerReference{
		APIVersion: clusterv1.GroupVersion.String(), Kind: "Cluster", Name: cluster.Name, UID: cluster.UID,
	}))
}
