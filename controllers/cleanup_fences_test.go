package controllers

import (
	"context"
	"errors"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	coordv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	lbv1 "github.com/caplb/caplb/api/v1alpha1"
)

// fenceLease is a workload Lease in ns/name held by holder ("" for none).
func fenceLease(ns, name, holder string) *coordv1.Lease {
	l := &coordv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + ns + "-" + name)},
		Spec:       coordv1.LeaseSpec{LeaseDurationSeconds: ptr.To[int32](3600)},
	}
	if holder != "" {
		l.Spec.HolderIdentity = ptr.To(holder)
	}
	return l
}

// fencedLB is LoadBalancer default/prod-cp of backend kind ("arp" or "bgp"), with
// takeOver.kubeVIP when takeOver.
func fencedLB(kind string, takeOver bool) *lbv1.LoadBalancer {
	lb := newLB("prod-cp")
	lb.Namespace = "default"
	var to *lbv1.TakeOver
	if takeOver {
		to = &lbv1.TakeOver{KubeVIP: &lbv1.KubeVIPTakeOver{}}
	}
	switch kind {
	case "bgp":
		lb.Spec.Backend = lbv1.Backend{BGP: &lbv1.BGPBackend{ASN: 64512, TakeOver: to}}
	default:
		lb.Spec.Backend = lbv1.Backend{ARP: &lbv1.ARPBackend{TakeOver: to}}
	}
	return lb
}

// fenceClients are the management client holding mgmt and the workload client holding leases.
func fenceClients(t *testing.T, mgmt []client.Object, leases ...client.Object) (client.Client, client.Client) {
	t.Helper()
	s, err := newTestScheme()
	if err != nil {
		t.Fatal(err)
	}
	return fake.NewClientBuilder().WithScheme(s).WithObjects(mgmt...).Build(),
		fake.NewClientBuilder().WithScheme(s).WithObjects(leases...).Build()
}

// leaseKeys lists the Leases left in the workload cluster.
func leaseKeys(g Gomega, wl client.Client) []string {
	var list coordv1.LeaseList
	g.Expect(wl.List(context.Background(), &list)).To(Succeed())
	var keys []string
	for _, l := range list.Items {
		keys = append(keys, l.Namespace+"/"+l.Name)
	}
	return keys
}

func TestCleanupFences(t *testing.T) {
	const holder = lbv1.KubeVIPFenceHolderPrefix + "default/prod-cp"
	deleting := fencedLB("arp", true)
	deleting.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	deleting.Finalizers = []string{lbv1.LoadBalancerFinalizer}
	lease := client.ObjectKey{Namespace: "kube-system", Name: "plndr-cp-lock"}
	prodCP := client.ObjectKey{Namespace: "default", Name: "prod-cp"}
	for _, tt := range []struct {
		name   string
		mgmt   []client.Object
		leases []client.Object
		opts   FenceCleanupOptions
		want   []Fence
		left   []string
	}{{
		name:   "LoadBalancer gone: deleted",
		leases: []client.Object{fenceLease("kube-system", "plndr-cp-lock", holder)},
		want:   []Fence{{Lease: lease, Holder: holder, LoadBalancer: prodCP, Removed: true, Reason: "LoadBalancer gone"}},
	}, {
		name:   "arp LoadBalancer still takes over: kept",
		mgmt:   []client.Object{fencedLB("arp", true)},
		leases: []client.Object{fenceLease("kube-system", "plndr-cp-lock", holder)},
		want: []Fence{{Lease: lease, Holder: holder, LoadBalancer: prodCP,
			Reason: "LoadBalancer default/prod-cp still takes the VIP over (remove spec.backend.arp.takeOver or delete it first)"}},
		left: []string{"kube-system/plndr-cp-lock"},
	}, {
		name:   "bgp LoadBalancer still takes over: kept, naming the bgp field",
		mgmt:   []client.Object{fencedLB("bgp", true)},
		leases: []client.Object{fenceLease("kube-system", "plndr-cp-lock", holder)},
		want: []Fence{{Lease: lease, Holder: holder, LoadBalancer: prodCP,
			Reason: "LoadBalancer default/prod-cp still takes the VIP over (remove spec.backend.bgp.takeOver or delete it first)"}},
		left: []string{"kube-system/plndr-cp-lock"},
	}, {
		name:   "takeOver removed: deleted",
		mgmt:   []client.Object{fencedLB("arp", false)},
		leases: []client.Object{fenceLease("kube-system", "plndr-cp-lock", holder)},
		want:   []Fence{{Lease: lease, Holder: holder, LoadBalancer: prodCP, Removed: true, Reason: "takeOver removed"}},
	}, {
		name:   "LoadBalancer being deleted, takeOver still set: deleted",
		mgmt:   []client.Object{deleting},
		leases: []client.Object{fenceLease("kube-system", "plndr-cp-lock", holder)},
		want:   []Fence{{Lease: lease, Holder: holder, LoadBalancer: prodCP, Removed: true, Reason: "LoadBalancer being deleted"}},
	}, {
		name: "kube-vip's Lease and a Lease without holder: untouched, not reported",
		leases: []client.Object{fenceLease("kube-system", "plndr-cp-lock", "node-1"),
			fenceLease("kube-system", "plndr-svcs-lock", "")},
		left: []string{"kube-system/plndr-cp-lock", "kube-system/plndr-svcs-lock"},
	}, {
		name:   "dry run: reported, nothing deleted",
		leases: []client.Object{fenceLease("kube-system", "plndr-cp-lock", holder)},
		opts:   FenceCleanupOptions{DryRun: true},
		want:   []Fence{{Lease: lease, Holder: holder, LoadBalancer: prodCP, Removed: true, Reason: "LoadBalancer gone"}},
		left:   []string{"kube-system/plndr-cp-lock"},
	}, {
		name: "malformed holders: reported, not deleted",
		leases: []client.Object{fenceLease("kube-system", "a", "caplb:nonsense"), fenceLease("kube-system", "b", "caplb:a/b/c"),
			fenceLease("kube-system", "c", "caplb:/prod-cp")},
		want: []Fence{
			{Lease: client.ObjectKey{Namespace: "kube-system", Name: "a"}, Holder: "caplb:nonsense",
				Reason: `holder "caplb:nonsense" is not caplb:<namespace>/<name>, so it names no LoadBalancer: left alone`},
			{Lease: client.ObjectKey{Namespace: "kube-system", Name: "b"}, Holder: "caplb:a/b/c",
				Reason: `holder "caplb:a/b/c" is not caplb:<namespace>/<name>, so it names no LoadBalancer: left alone`},
			{Lease: client.ObjectKey{Namespace: "kube-system", Name: "c"}, Holder: "caplb:/prod-cp",
				Reason: `holder "caplb:/prod-cp" is not caplb:<namespace>/<name>, so it names no LoadBalancer: left alone`},
		},
		left: []string{"kube-system/a", "kube-system/b", "kube-system/c"},
	}, {
		name: "a custom leaseNamespace is found across namespaces",
		leases: []client.Object{fenceLease("vip", "cp-lock", holder),
			fenceLease("kube-system", "plndr-cp-lock", "node-1")},
		want: []Fence{{Lease: client.ObjectKey{Namespace: "vip", Name: "cp-lock"}, Holder: holder, LoadBalancer: prodCP,
			Removed: true, Reason: "LoadBalancer gone"}},
		left: []string{"kube-system/plndr-cp-lock"},
	}, {
		name:   "--lease-namespace limits the search",
		leases: []client.Object{fenceLease("vip", "cp-lock", holder), fenceLease("kube-system", "plndr-cp-lock", holder)},
		opts:   FenceCleanupOptions{LeaseNamespace: "kube-system"},
		want:   []Fence{{Lease: lease, Holder: holder, LoadBalancer: prodCP, Removed: true, Reason: "LoadBalancer gone"}},
		left:   []string{"vip/cp-lock"},
	}} {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			mgmt, wl := fenceClients(t, tt.mgmt, tt.leases...)
			rep, err := CleanupFences(context.Background(), mgmt, wl, tt.opts)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(rep.Fences).To(Equal(tt.want))
			g.Expect(rep.Fallback).To(BeEmpty())
			g.Expect(leaseKeys(g, wl)).To(ConsistOf(tt.left))
			// Idempotent: a second run finds only what the first kept.
			again, err := CleanupFences(context.Background(), mgmt, wl, tt.opts)
			g.Expect(err).NotTo(HaveOccurred())
			if !tt.opts.DryRun {
				for _, f := range again.Fences {
					g.Expect(f.Removed).To(BeFalse(), "%s was left by the first run", f.Lease)
				}
			}
		})
	}
}

// A Lease that changed between the list and the delete (here kube-vip took it back, as it does
// once the fence expires) is not deleted: the delete carries the UID and resourceVersion read.
func TestCleanupFencesSparesALeaseChangedSinceRead(t *testing.T) {
	g := NewWithT(t)
	const holder = lbv1.KubeVIPFenceHolderPrefix + "default/prod-cp"
	mgmt, inner := fenceClients(t, nil, fenceLease("kube-system", "plndr-cp-lock", holder))
	var pre *metav1.Preconditions
	wl := interceptor.NewClient(inner.(client.WithWatch), interceptor.Funcs{
		Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			do := &client.DeleteOptions{}
			do.ApplyOptions(opts)
			pre = do.Preconditions
			l := &coordv1.Lease{}
			g.Expect(c.Get(ctx, client.ObjectKeyFromObject(obj), l)).To(Succeed())
			l.Spec.HolderIdentity = ptr.To("node-1")
			g.Expect(c.Update(ctx, l)).To(Succeed())
			return c.Delete(ctx, obj, opts...)
		},
	})
	rep, err := CleanupFences(context.Background(), mgmt, wl, FenceCleanupOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(pre).NotTo(BeNil())
	g.Expect(pre.UID).To(HaveValue(Equal(types.UID("uid-kube-system-plndr-cp-lock"))))
	g.Expect(pre.ResourceVersion).To(HaveValue(Not(BeEmpty())))
	g.Expect(rep.Fences).To(HaveLen(1))
	g.Expect(rep.Fences[0].Removed).To(BeFalse())
	g.Expect(rep.Fences[0].Reason).To(ContainSubstring("changed since it was read"))
	l := &coordv1.Lease{}
	g.Expect(inner.Get(context.Background(), client.ObjectKey{Namespace: "kube-system", Name: "plndr-cp-lock"}, l)).To(Succeed())
	g.Expect(l.Spec.HolderIdentity).To(HaveValue(Equal("node-1")))
}

// A credential that may list Leases only per namespace still finds the fences of kube-system,
// and the report says that the search was narrowed.
func TestCleanupFencesFallsBackToKubeSystem(t *testing.T) {
	g := NewWithT(t)
	const holder = lbv1.KubeVIPFenceHolderPrefix + "default/prod-cp"
	mgmt, inner := fenceClients(t, nil, fenceLease("kube-system", "plndr-cp-lock", holder), fenceLease("vip", "cp-lock", holder))
	wl := interceptor.NewClient(inner.(client.WithWatch), interceptor.Funcs{
		List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			lo := &client.ListOptions{}
			lo.ApplyOptions(opts)
			if lo.Namespace == "" {
				return apierrors.NewForbidden(schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}, "",
					errors.New("cannot list resource \"leases\" at the cluster scope"))
			}
			return c.List(ctx, list, opts...)
		},
	})
	rep, err := CleanupFences(context.Background(), mgmt, wl, FenceCleanupOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(rep.Scope).To(Equal("namespace kube-system"))
	g.Expect(rep.Fallback).To(And(ContainSubstring("forbidden"), ContainSubstring("--lease-namespace")))
	g.Expect(rep.Fences).To(HaveLen(1))
	g.Expect(rep.Fences[0].Lease.Namespace).To(Equal("kube-system"))
	g.Expect(leaseKeys(g, inner)).To(ConsistOf("vip/cp-lock"))
}

// Reading the LoadBalancer fails: the fence is kept and the error returned, naming both; a
// management cluster without caplb's API (the wrong kubeconfig) stops the whole run.
func TestCleanupFencesKeepsWhatItCannotJudge(t *testing.T) {
	const holder = lbv1.KubeVIPFenceHolderPrefix + "default/prod-cp"
	for _, tt := range []struct {
		name    string
		getErr  error
		wantErr []string
	}{
		{"read fails", errors.New("etcd unavailable"),
			[]string{"reading LoadBalancer default/prod-cp, whose fence is Lease kube-system/plndr-cp-lock", "etcd unavailable"}},
		{"no LoadBalancer API", &meta.NoKindMatchError{GroupKind: schema.GroupKind{Group: lbv1.GroupVersion.Group, Kind: "LoadBalancer"}},
			[]string{"serves no", "is --kubeconfig, or KUBECONFIG, the management cluster's?"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			inner, wl := fenceClients(t, nil, fenceLease("kube-system", "plndr-cp-lock", holder))
			mgmt := interceptor.NewClient(inner.(client.WithWatch), interceptor.Funcs{
				Get: func(context.Context, client.WithWatch, client.ObjectKey, client.Object, ...client.GetOption) error {
					return tt.getErr
				},
			})
			rep, err := CleanupFences(context.Background(), mgmt, wl, FenceCleanupOptions{})
			for _, s := range tt.wantErr {
				g.Expect(err).To(MatchError(ContainSubstring(s)))
			}
			g.Expect(rep.Fences).To(BeEmpty())
			g.Expect(leaseKeys(g, wl)).To(ConsistOf("kube-system/plndr-cp-lock"))
		})
	}
}
