package controllers

import (
	"context"
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	lbv1 "github.com/caplb/caplb/api/v1alpha1"
)

// Uninstalling caplb while LoadBalancers exist leaves what the manager placed: a pre-drain hook on
// every member Machine (CAPI then waits on it for ever when it deletes the Machine) and a finalizer
// on every LoadBalancer (deleting them, or the CRD, hangs). Cleanup removes both without a
// manager: `caplb cleanup`, run by a person with the rights to patch Machines, Nodes and
// LoadBalancers. It is idempotent and safe to run while a manager still runs (the manager would
// put its marks back: stop it first).

// CleanupOptions selects what Cleanup touches.
type CleanupOptions struct {
	// Namespace limits Machines and LoadBalancers to one namespace; empty means all.
	Namespace string
	// Nodes also cleans Nodes (Node targets of a manager running inside the cluster).
	Nodes bool
	// DryRun reports what would change and changes nothing.
	DryRun bool
}

// CleanupReport says what Cleanup changed (or, with DryRun, would change).
type CleanupReport struct {
	// Hooks lists "<kind> <namespace>/<name>: <annotation>" for every hook removed.
	Hooks []string
	// Marks counts members whose name/status annotations were removed.
	Marks int
	// Finalizers lists the LoadBalancers whose finalizer was removed.
	Finalizers []string
	// ClassFinalizers lists the LoadBalancerClasses whose finalizer was removed.
	ClassFinalizers []string
}

// Cleanup releases every hook and annotation caplb placed on Machines (and Nodes with
// opts.Nodes), then removes caplb's finalizer from every LoadBalancer and LoadBalancerClass.
// Members first, so that no Machine is left waiting on a LoadBalancer that can no longer release
// it. (A class's finalizer only deletes its LoadBalancers: without a manager nobody would.)
func Cleanup(ctx context.Context, c client.Client, opts CleanupOptions) (CleanupReport, error) {
	var rep CleanupReport
	var errs []error
	var ns []client.ListOption
	if opts.Namespace != "" {
		ns = append(ns, client.InNamespace(opts.Namespace))
	}
	var machines clusterv1.MachineList
	if err := c.List(ctx, &machines, ns...); err != nil && !meta.IsNoMatchError(err) {
		return rep, fmt.Errorf("listing Machines: %w", err)
	}
	for i := range machines.Items {
		errs = append(errs, cleanMember(ctx, c, &machines.Items[i], "Machine", opts.DryRun, &rep))
	}
	if opts.Nodes {
		var nodes corev1.NodeList
		if err := c.List(ctx, &nodes); err != nil {
			return rep, fmt.Errorf("listing Nodes: %w", err)
		}
		for i := range nodes.Items {
			errs = append(errs, cleanMember(ctx, c, &nodes.Items[i], "Node", opts.DryRun, &rep))
		}
	}
	if err := errors.Join(errs...); err != nil {
		// Never drop a finalizer while a hook it guards may still be in place.
		return rep, err
	}
	var lbs lbv1.LoadBalancerList
	if err := c.List(ctx, &lbs, ns...); err != nil {
		return rep, fmt.Errorf("listing LoadBalancers: %w", err)
	}
	for i := range lbs.Items {
		lb := &lbs.Items[i]
		if !controllerutil.ContainsFinalizer(lb, lbv1.LoadBalancerFinalizer) {
			continue
		}
		rep.Finalizers = append(rep.Finalizers, lb.Namespace+"/"+lb.Name)
		if opts.DryRun {
			continue
		}
		orig := lb.DeepCopy()
		controllerutil.RemoveFinalizer(lb, lbv1.LoadBalancerFinalizer)
		if err := c.Patch(ctx, lb, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("removing the finalizer of LoadBalancer %s/%s: %w", lb.Namespace, lb.Name, err))
		}
	}
	var classes lbv1.LoadBalancerClassList
	if err := c.List(ctx, &classes, ns...); err != nil && !meta.IsNoMatchError(err) {
		return rep, errors.Join(append(errs, fmt.Errorf("listing LoadBalancerClasses: %w", err))...)
	}
	for i := range classes.Items {
		lbc := &classes.Items[i]
		if !controllerutil.ContainsFinalizer(lbc, lbv1.LoadBalancerClassFinalizer) {
			continue
		}
		rep.ClassFinalizers = append(rep.ClassFinalizers, lbc.Namespace+"/"+lbc.Name)
		if opts.DryRun {
			continue
		}
		orig := lbc.DeepCopy()
		controllerutil.RemoveFinalizer(lbc, lbv1.LoadBalancerClassFinalizer)
		if err := c.Patch(ctx, lbc, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("removing the finalizer of LoadBalancerClass %s/%s: %w", lbc.Namespace, lbc.Name, err))
		}
	}
	return rep, errors.Join(errs...)
}

// cleanMember removes caplb's hooks and its name/status annotations from one member.
func cleanMember(ctx context.Context, c client.Client, obj client.Object, kind string, dryRun bool, rep *CleanupReport) error {
	orig, ok := obj.DeepCopyObject().(client.Object)
	if !ok {
		return nil
	}
	ann := obj.GetAnnotations()
	changed := false
	for k := range ann {
		if strings.HasPrefix(k, hookKeyPrefix) || strings.HasPrefix(k, preTermKeyPrefix) {
			rep.Hooks = append(rep.Hooks, fmt.Sprintf("%s %s: %s", kind, client.ObjectKeyFromObject(obj), k))
			delete(ann, k)
			changed = true
		}
	}
	if _, has := ann[lbv1.NameAnnotation]; has {
		delete(ann, lbv1.NameAnnotation)
		delete(ann, lbv1.StatusAnnotation)
		rep.Marks++
		changed = true
	}
	if !changed || dryRun {
		return nil
	}
	obj.SetAnnotations(ann)
	if err := c.Patch(ctx, obj, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("cleaning %s %s: %w", kind, client.ObjectKeyFromObject(obj), err)
	}
	return nil
}
