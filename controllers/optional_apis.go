package controllers

import (
	"context"
	"fmt"
	"sort"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	lbv1 "github.com/caplb/caplb/api/v1alpha1"
)

// A standalone install (Node targets on the cluster the manager runs in) has no Cluster API: the
// manager asks discovery once at start which of CAPI's kinds are served and watches only those.
// A watch on a kind the API server does not serve never syncs, and controller-runtime then stops
// the whole manager; so each CAPI watch, index and informer is conditional on APIs.

// The resources caplb reads from optional API groups, as discovery names them.
const (
	resourceClusters        = "clusters"
	resourceMachines        = "machines"
	resourceIPAddressClaims = "ipaddressclaims"
	resourceIPAddresses     = "ipaddresses"
)

// APIs says which optional APIs the management cluster serves, at the versions caplb's scheme
// uses (CAPI core and IPAM v1beta2). The zero value has none: a cluster without CAPI.
type APIs struct {
	// Clusters: cluster.x-k8s.io/v1beta2 Clusters (LoadBalancers with spec.clusterName,
	// LoadBalancerClasses, the ClusterCache for remote Node targets and agent reports).
	Clusters bool
	// Machines: cluster.x-k8s.io/v1beta2 Machines (Machine targets).
	Machines bool
	// IPAM: ipam.cluster.x-k8s.io/v1beta2 IPAddressClaims and IPAddresses (a VIP's addressFrom).
	IPAM bool
}

// AllAPIs is a management cluster with CAPI core and its IPAM contract installed.
func AllAPIs() APIs { return APIs{Clusters: true, Machines: true, IPAM: true} }

// APIsFrom is the pure half of DiscoverAPIs: which optional APIs the discovered resource lists
// serve. A list of another group or version counts for nothing (caplb decodes v1beta2 only).
func APIsFrom(lists []*metav1.APIResourceList) APIs {
	served := map[schema.GroupVersionResource]bool{}
	for _, l := range lists {
		if l == nil {
			continue
		}
		gv, err := schema.ParseGroupVersion(l.GroupVersion)
		if err != nil {
			continue
		}
		for _, r := range l.APIResources {
			// Subresources ("machines/status") are listed as resources of their own.
			if !strings.Contains(r.Name, "/") {
				served[gv.WithResource(r.Name)] = true
			}
		}
	}
	return APIs{
		Clusters: served[clusterv1.GroupVersion.WithResource(resourceClusters)],
		Machines: served[clusterv1.GroupVersion.WithResource(resourceMachines)],
		IPAM: served[ipamv1.GroupVersion.WithResource(resourceIPAddressClaims)] &&
			served[ipamv1.GroupVersion.WithResource(resourceIPAddresses)],
	}
}

// DiscoverAPIs asks the API server's discovery which optional APIs it serves. A group version
// that is not served is absent, not an error; any other failure is, so that a flaky API server
// does not start a manager that silently ignores CAPI.
func DiscoverAPIs(d discovery.DiscoveryInterface) (APIs, error) {
	var lists []*metav1.APIResourceList
	for _, gv := range []schema.GroupVersion{clusterv1.GroupVersion, ipamv1.GroupVersion} {
		l, err := d.ServerResourcesForGroupVersion(gv.String())
		switch {
		case apierrors.IsNotFound(err):
			continue
		case err != nil:
			return APIs{}, fmt.Errorf("discovering %s: %w", gv, err)
		}
		lists = append(lists, l)
	}
	return APIsFrom(lists), nil
}

// Found and Missing name the optional APIs (as CRD names) for the start-up log line.
func (a APIs) Found() []string   { return a.names(true) }
func (a APIs) Missing() []string { return a.names(false) }

func (a APIs) names(present bool) []string {
	out := []string{}
	for crd, ok := range map[string]bool{
		crdName(clusterv1.GroupVersion, resourceClusters):     a.Clusters,
		crdName(clusterv1.GroupVersion, resourceMachines):     a.Machines,
		crdName(ipamv1.GroupVersion, resourceIPAddressClaims): a.IPAM,
		crdName(ipamv1.GroupVersion, resourceIPAddresses):     a.IPAM,
	} {
		if ok == present {
			out = append(out, crd)
		}
	}
	sort.Strings(out)
	return out
}

func crdName(gv schema.GroupVersion, resource string) string {
	return resource + "." + gv.Group + "/" + gv.Version
}

// missingFor returns, for each optional API lb needs and the cluster does not serve, a sentence
// that names its CRD and the fix; nil when lb can be reconciled.
func (a APIs) missingFor(spec *lbv1.LoadBalancerSpec) []string {
	var out []string
	if !spec.TargetKind.IsNode() && !a.Machines {
		out = append(out, fmt.Sprintf("spec.targetKind Machine needs the CRD %s, which this cluster does not serve: "+
			"install Cluster API (clusterctl init), or target Nodes (spec.targetKind.kind: Node, in the manager's "+
			"--node-targets-namespace)", crdName(clusterv1.GroupVersion, resourceMachines)))
	}
	if spec.ClusterName != "" && !a.Clusters {
		out = append(out, fmt.Sprintf("spec.clusterName needs the CRD %s, which this cluster does not serve: "+
			"install Cluster API (clusterctl init), or leave spec.clusterName empty and target this cluster's Nodes",
			crdName(clusterv1.GroupVersion, resourceClusters)))
	}
	if vip := spec.Backend.VIP(); vip != nil && vip.AddressFrom != nil && !a.IPAM {
		out = append(out, fmt.Sprintf("addressFrom needs the CRDs %s and %s, which this cluster does not serve: "+
			"install Cluster API's IPAM CRDs and an IPAM provider (clusterctl init --ipam in-cluster), or set the "+
			"VIP in spec.endpoint.host instead", crdName(ipamv1.GroupVersion, resourceIPAddressClaims),
			crdName(ipamv1.GroupVersion, resourceIPAddresses)))
	}
	return out
}

// missingMessage joins missingFor's sentences and says how the manager learns of a later install.
func missingMessage(missing []string) string {
	return strings.Join(missing, "; ") + " (the manager discovers APIs at start: restart it after installing them)"
}

// reconcileMissingAPIs reports a LoadBalancer that needs an API the cluster does not serve:
// Ready False with APINotInstalled, a Warning event when the message changes, and nothing read
// or written beyond the LoadBalancer itself. A deleted one only loses its finalizer: without the
// kinds, no member can carry its marks.
func (r *LoadBalancerReconciler) reconcileMissingAPIs(ctx context.Context, lb *lbv1.LoadBalancer, missing []string) error {
	if !lb.DeletionTimestamp.IsZero() {
		if !controllerutil.ContainsFinalizer(lb, lbv1.LoadBalancerFinalizer) {
			return nil
		}
		orig := lb.DeepCopy()
		controllerutil.RemoveFinalizer(lb, lbv1.LoadBalancerFinalizer)
		if err := r.Client.Patch(ctx, lb, client.MergeFrom(orig)); err != nil {
			return fmt.Errorf("removing the finalizer of a LoadBalancer whose APIs are not installed: %w", err)
		}
		return nil
	}
	msg := missingMessage(missing)
	orig := lb.DeepCopy()
	if prev := conditions.Get(lb, lbv1.ReadyCondition); prev == nil || prev.Reason != lbv1.APINotInstalledReason || prev.Message != msg {
		r.event(lb, nil, true, lbv1.EventAPINotInstalled, "Discover", "%s", msg)
		ctrl.LoggerFrom(ctx).Info("LoadBalancer needs an API this cluster does not serve; waiting for it and a manager restart",
			"reason", lbv1.APINotInstalledReason, "message", msg)
	}
	conditions.Set(lb, metav1.Condition{Type: lbv1.ReadyCondition, Status: metav1.ConditionFalse,
		Reason: lbv1.APINotInstalledReason, Message: msg, ObservedGeneration: lb.Generation})
	lb.Status.ObservedGeneration = lb.Generation
	if r.Metrics != nil {
		r.Metrics.setLoadBalancer(lb, 0, false)
	}
	if statusJSON(lb) == statusJSON(orig) {
		return nil
	}
	if err := r.Client.Status().Patch(ctx, lb, client.MergeFrom(orig)); err != nil {
		return fmt.Errorf("patching the status of a LoadBalancer whose APIs are not installed: %w", err)
	}
	r.remember(lb)
	return nil
}
