package controllers

import (
	"context"
	"errors"
	"fmt"
	"strings"

	coordv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lbv1 "github.com/caplb/caplb/api/v1alpha1"
)

// A kube-vip takeover fences kube-vip by holding its election Lease in the workload cluster
// (providers/vip/fence.go). The manager deletes that fence when the LoadBalancer is deleted or
// its takeOver removed, but only if it reaches the workload cluster then; otherwise the fence
// stays until it expires (an hour) and kube-vip cannot lead meanwhile. CleanupFences removes
// such leftovers from outside the manager, with a person's own kubeconfig of the workload cluster:
// it judges each fence by the LoadBalancer its holder names, which it reads in the management
// cluster, and deletes only the fences no LoadBalancer still takes the VIP over with.

// DefaultFenceNamespace is where CleanupFences looks when it may not list Leases across all
// namespaces: kube-vip's default (spec.backend.<arp|bgp>.takeOver.kubeVIP.leaseNamespace).
const DefaultFenceNamespace = lbv1.DefaultKubeVIPLeaseNamespace

// FenceCleanupOptions selects what CleanupFences touches.
type FenceCleanupOptions struct {
	// LeaseNamespace limits the search to one namespace of the workload cluster; empty means all
	// namespaces, or DefaultFenceNamespace when listing across them is forbidden.
	LeaseNamespace string
	// DryRun reports what would be removed and deletes nothing.
	DryRun bool
}

// Fence is one workload Lease whose holder is caplb's, and what CleanupFences did with it.
type Fence struct {
	// Lease is the fence's namespace/name in the workload cluster.
	Lease client.ObjectKey
	// Holder is its spec.holderIdentity.
	Holder string
	// LoadBalancer is the management LoadBalancer the holder names; zero when the holder is
	// malformed.
	LoadBalancer client.ObjectKey
	// Removed says the fence was deleted (with DryRun: would be); otherwise it was kept.
	Removed bool
	// Reason says why: for a removed fence what became of its LoadBalancer ("LoadBalancer
	// gone"), for a kept one a sentence naming what to do.
	Reason string
}

// FenceCleanupReport says what CleanupFences found and did.
type FenceCleanupReport struct {
	// Scope is where the Leases were listed: "all namespaces" or "namespace <ns>".
	Scope string
	// Fallback explains why Scope is narrower than asked (listing across namespaces was
	// forbidden); empty otherwise.
	Fallback string
	// Fences lists every Lease with a caplb holder, in the order listed.
	Fences []Fence
}

// Why a fence is removed: what became of the LoadBalancer that wrote it.
const (
	fenceLBGone     = "LoadBalancer gone"
	fenceLBDeleting = "LoadBalancer being deleted"
	fenceNoTakeOver = "takeOver removed"
)

// CleanupFences deletes the kube-vip fences in the workload cluster (wl) that no LoadBalancer of
// the management cluster (mgmt) still takes the VIP over with. Only Leases whose holderIdentity
// starts with lbv1.KubeVIPFenceHolderPrefix are judged; every other Lease is kube-vip's (or
// someone else's) and never touched. A fence is deleted only as read (UID and resourceVersion
// preconditions), so a Lease kube-vip took back, or a manager renewed, in between stays. Errors
// on one fence do not stop the others; they are joined.
func CleanupFences(ctx context.Context, mgmt, wl client.Client, opts FenceCleanupOptions) (FenceCleanupReport, error) {
	var rep FenceCleanupReport
	leases, err := listFenceCandidates(ctx, wl, opts.LeaseNamespace, &rep)
	if err != nil {
		return rep, err
	}
	var errs []error
	for i := range leases {
		l := &leases[i]
		if l.Spec.HolderIdentity == nil || !strings.HasPrefix(*l.Spec.HolderIdentity, lbv1.KubeVIPFenceHolderPrefix) {
			continue
		}
		f, err := judgeFence(ctx, mgmt, l)
		if meta.IsNoMatchError(err) {
			// Every fence would look orphaned through a client of a cluster without caplb's API
			// (a --kubeconfig that points at the workload cluster itself, or at another cluster):
			// refuse rather than judge every LoadBalancer gone.
			return rep, fmt.Errorf("the management cluster serves no %s LoadBalancers, so no fence can be judged "+
				"(is --kubeconfig, or KUBECONFIG, the management cluster's? If caplb's CRDs were removed, delete a fence left "+
				"with kubectl: its holderIdentity starts with %q): %w", lbv1.GroupVersion, lbv1.KubeVIPFenceHolderPrefix, err)
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if f.Removed && !opts.DryRun {
			if err := deleteFence(ctx, wl, l, &f); err != nil {
				errs = append(errs, err)
				continue
			}
		}
		rep.Fences = append(rep.Fences, f)
	}
	return rep, errors.Join(errs...)
}

// listFenceCandidates lists the workload Leases of ns (all namespaces when empty). A credential
// that may not list across namespaces (a tenant's, namespaced RBAC) still finds kube-vip's
// default Lease namespace, where nearly every fence is; rep says so.
func listFenceCandidates(ctx context.Context, wl client.Client, ns string, rep *FenceCleanupReport) ([]coordv1.Lease, error) {
	var list coordv1.LeaseList
	if ns != "" {
		rep.Scope = "namespace " + ns
		if err := wl.List(ctx, &list, client.InNamespace(ns)); err != nil {
			return nil, fmt.Errorf("listing Leases in namespace %s of the workload cluster: %w", ns, err)
		}
		return list.Items, nil
	}
	rep.Scope = "all namespaces"
	err := wl.List(ctx, &list)
	if err == nil {
		return list.Items, nil
	}
	if !apierrors.IsForbidden(err) {
		return nil, fmt.Errorf("listing Leases in the workload cluster: %w", err)
	}
	rep.Scope = "namespace " + DefaultFenceNamespace
	rep.Fallback = fmt.Sprintf("listing Leases across all namespaces of the workload cluster is forbidden, so only namespace %s "+
		"was searched; pass --lease-namespace for a takeOver whose kubeVIP.leaseNamespace is another", DefaultFenceNamespace)
	if err := wl.List(ctx, &list, client.InNamespace(DefaultFenceNamespace)); err != nil {
		return nil, fmt.Errorf("listing Leases in namespace %s of the workload cluster (listing across all namespaces is forbidden too): %w",
			DefaultFenceNamespace, err)
	}
	return list.Items, nil
}

// judgeFence decides about one Lease with a caplb holder: removed when the LoadBalancer it names
// is gone, being deleted or no longer takes over; kept while it does (its manager renews the
// fence, and deleting it would let kube-vip lead beside caplb's agents) and when the holder
// names no LoadBalancer at all (caplb never writes such a holder: not provably ours).
func judgeFence(ctx context.Context, mgmt client.Client, l *coordv1.Lease) (Fence, error) {
	f := Fence{Lease: client.ObjectKeyFromObject(l), Holder: *l.Spec.HolderIdentity}
	key, ok := parseFenceHolder(f.Holder)
	if !ok {
		f.Reason = fmt.Sprintf("holder %q is not %s<namespace>/<name>, so it names no LoadBalancer: left alone",
			f.Holder, lbv1.KubeVIPFenceHolderPrefix)
		return f, nil
	}
	f.LoadBalancer = key
	lb := &lbv1.LoadBalancer{}
	switch err := mgmt.Get(ctx, key, lb); {
	case apierrors.IsNotFound(err):
		f.Removed, f.Reason = true, fenceLBGone
	case err != nil:
		return f, fmt.Errorf("reading LoadBalancer %s, whose fence is Lease %s in the workload cluster: %w", key, f.Lease, err)
	case !lb.DeletionTimestamp.IsZero():
		f.Removed, f.Reason = true, fenceLBDeleting
	case lb.Spec.Backend.TakeOver() == nil:
		f.Removed, f.Reason = true, fenceNoTakeOver
	default:
		f.Reason = fmt.Sprintf("LoadBalancer %s still takes the VIP over (remove spec.backend.%s.takeOver or delete it first)",
			key, lb.Spec.Backend.Kind())
	}
	return f, nil
}

// parseFenceHolder reads the LoadBalancer out of a fence holder "caplb:<namespace>/<name>".
func parseFenceHolder(holder string) (client.ObjectKey, bool) {
	ns, name, ok := strings.Cut(strings.TrimPrefix(holder, lbv1.KubeVIPFenceHolderPrefix), "/")
	if !ok || len(validation.IsDNS1123Label(ns)) > 0 || len(validation.IsDNS1123Subdomain(name)) > 0 {
		return client.ObjectKey{}, false
	}
	return client.ObjectKey{Namespace: ns, Name: name}, true
}

// deleteFence deletes l as it was listed. A precondition failure means it changed since: renewed
// by a manager that reached the cluster again, or taken back by kube-vip, whose Lease it then
// is. Either way it is no longer the leftover that was judged, so it is kept and reported, not
// an error: a second run judges it afresh.
func deleteFence(ctx context.Context, wl client.Client, l *coordv1.Lease, f *Fence) error {
	uid, rv := l.UID, l.ResourceVersion
	err := wl.Delete(ctx, l, client.Preconditions{UID: &uid, ResourceVersion: &rv})
	switch {
	case err == nil, apierrors.IsNotFound(err):
		return nil
	case apierrors.IsConflict(err):
		f.Removed = false
		f.Reason = fmt.Sprintf("it changed since it was read (a manager renewed it, or kube-vip took it back), so it was not "+
			"deleted as LoadBalancer %s's (%s); run the cleanup again to judge it afresh", f.LoadBalancer, f.Reason)
		return nil
	}
	return fmt.Errorf("deleting the fence Lease %s of LoadBalancer %s in the workload cluster: %w", f.Lease, f.LoadBalancer, err)
}
