package controllers

import (
	"context"
	"errors"
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	discoveryfake "k8s.io/client-go/discovery/fake"
	clienttesting "k8s.io/client-go/testing"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	lbv1 "github.com/caplb/caplb/api/v1alpha1"
	"github.com/caplb/caplb/providers"
	"github.com/caplb/caplb/providers/static"
)

func resourceList(gv string, names ...string) *metav1.APIResourceList {
	l := &metav1.APIResourceList{GroupVersion: gv}
	for _, n := range names {
		l.APIResources = append(l.APIResources, metav1.APIResource{Name: n})
	}
	return l
}

func TestAPIsFrom(t *testing.T) {
	core, ipam := clusterv1.GroupVersion.String(), ipamv1.GroupVersion.String()
	for _, tc := range []struct {
		name  string
		lists []*metav1.APIResourceList
		want  APIs
	}{
		{"no CAPI at all", nil, APIs{}},
		{"CAPI core and IPAM", []*metav1.APIResourceList{
			resourceList(core, "clusters", "clusters/status", "machines", "machines/status", "machinesets"),
			resourceList(ipam, "ipaddressclaims", "ipaddresses"),
		}, AllAPIs()},
		{"CAPI core only", []*metav1.APIResourceList{resourceList(core, "clusters", "machines")},
			APIs{Clusters: true, Machines: true}},
		{"only an older CAPI version is served", []*metav1.APIResourceList{
			resourceList("cluster.x-k8s.io/v1beta1", "clusters", "machines"),
			resourceList("ipam.cluster.x-k8s.io/v1beta1", "ipaddressclaims", "ipaddresses"),
		}, APIs{}},
		{"a subresource alone does not count", []*metav1.APIResourceList{resourceList(core, "machines/status")}, APIs{}},
		{"IPAM needs claims and addresses", []*metav1.APIResourceList{resourceList(ipam, "ipaddressclaims")}, APIs{}},
		{"a nil or malformed list is skipped", []*metav1.APIResourceList{nil, resourceList("a/b/c", "clusters")}, APIs{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			NewWithT(t).Expect(APIsFrom(tc.lists)).To(Equal(tc.want))
		})
	}
}

func TestDiscoverAPIs(t *testing.T) {
	for _, tc := range []struct {
		name    string
		lists   []*metav1.APIResourceList
		fail    error
		want    APIs
		wantErr string
	}{
		{name: "groups not served are absent, not an error", want: APIs{}},
		{name: "served groups are found", lists: []*metav1.APIResourceList{
			resourceList(clusterv1.GroupVersion.String(), "clusters", "machines"),
		}, want: APIs{Clusters: true, Machines: true}},
		{name: "another failure stops the start", fail: errors.New("connection refused"),
			wantErr: "discovering cluster.x-k8s.io/v1beta2: connection refused"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			d := &discoveryfake.FakeDiscovery{Fake: &clienttesting.Fake{Resources: tc.lists}}
			if tc.fail != nil {
				d.AddReactor("*", "*", func(clienttesting.Action) (bool, runtime.Object, error) { return true, nil, tc.fail })
			}
			got, err := DiscoverAPIs(d)
			if tc.wantErr != "" {
				g.Expect(err).To(MatchError(ContainSubstring(tc.wantErr)))
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(got).To(Equal(tc.want))
		})
	}
}

func TestAPIsFoundMissing(t *testing.T) {
	g := NewWithT(t)
	a := APIs{Clusters: true}
	g.Expect(a.Found()).To(Equal([]string{"clusters.cluster.x-k8s.io/v1beta2"}))
	g.Expect(a.Missing()).To(Equal([]string{"ipaddressclaims.ipam.cluster.x-k8s.io/v1beta2",
		"ipaddresses.ipam.cluster.x-k8s.io/v1beta2", "machines.cluster.x-k8s.io/v1beta2"}))
	g.Expect(AllAPIs().Missing()).To(BeEmpty())
}

func TestMissingFor(t *testing.T) {
	node := lbv1.TargetKind{Kind: lbv1.NodeKind}
	pool := &lbv1.AddressFrom{PoolRef: lbv1.IPPoolReference{APIGroup: "ipam.cluster.x-k8s.io", Kind: "InClusterIPPool", Name: "p"}}
	for _, tc := range []struct {
		name string
		apis APIs
		spec lbv1.LoadBalancerSpec
		want []string // substrings, one per missing API, in order
	}{
		{"local Nodes need nothing", APIs{}, lbv1.LoadBalancerSpec{TargetKind: node, Backend: lbv1.Backend{Static: &lbv1.StaticBackend{}}}, nil},
		{"local Nodes with an ARP VIP need nothing", APIs{}, lbv1.LoadBalancerSpec{TargetKind: node, Backend: lbv1.Backend{ARP: &lbv1.ARPBackend{}}}, nil},
		{"Machines need Machines and Clusters", APIs{}, lbv1.LoadBalancerSpec{ClusterName: "c"}, []string{
			"needs the CRD machines.cluster.x-k8s.io/v1beta2", "needs the CRD clusters.cluster.x-k8s.io/v1beta2"}},
		{"Machines with CAPI need nothing", AllAPIs(), lbv1.LoadBalancerSpec{ClusterName: "c"}, nil},
		{"remote Nodes need Clusters", APIs{Machines: true}, lbv1.LoadBalancerSpec{TargetKind: node, ClusterName: "c"},
			[]string{"spec.clusterName needs the CRD clusters.cluster.x-k8s.io/v1beta2"}},
		{"an IPAM pool needs IPAM", APIs{}, lbv1.LoadBalancerSpec{TargetKind: node,
			Backend: lbv1.Backend{ARP: &lbv1.ARPBackend{VIPBackend: lbv1.VIPBackend{AddressFrom: pool}}}},
			[]string{"addressFrom needs the CRDs ipaddressclaims.ipam.cluster.x-k8s.io/v1beta2 and ipaddresses"}},
		{"an IPAM pool with IPAM needs nothing", APIs{IPAM: true}, lbv1.LoadBalancerSpec{TargetKind: node,
			Backend: lbv1.Backend{BGP: &lbv1.BGPBackend{VIPBackend: lbv1.VIPBackend{AddressFrom: pool}}}}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			got := tc.apis.missingFor(&tc.spec)
			g.Expect(got).To(HaveLen(len(tc.want)))
			for i, w := range tc.want {
				g.Expect(got[i]).To(ContainSubstring(w))
			}
		})
	}
}

// A Machine-targets LoadBalancer on a cluster without CAPI is reported, and nothing reads a
// Machine or a Cluster for it; deleting it drops its finalizer.
func TestReconcileMissingAPIs(t *testing.T) {
	lb := testLB("lb", "c1")
	h := newHarness(t, lb)
	g := h.g
	h.r.APIs = APIs{}
	h.r.Client = noCAPIClient(t, h.c)

	h.reconcile("lb")
	got := h.lb("lb")
	g.Expect(conditions.GetReason(got, lbv1.ReadyCondition)).To(Equal(lbv1.APINotInstalledReason))
	msg := conditions.GetMessage(got, lbv1.ReadyCondition)
	g.Expect(msg).To(ContainSubstring("machines.cluster.x-k8s.io/v1beta2"))
	g.Expect(msg).To(ContainSubstring("install Cluster API"))
	g.Expect(msg).To(ContainSubstring("restart it after installing them"))
	g.Expect(got.Status.ObservedGeneration).To(Equal(got.Generation))
	g.Expect(h.events()).To(ContainElement(ContainSubstring(lbv1.EventAPINotInstalled)))

	// A second reconcile changes nothing and emits no second event.
	n := len(h.events())
	h.reconcile("lb")
	g.Expect(h.events()).To(HaveLen(n))

	g.Expect(h.c.Delete(context.Background(), got)).To(Succeed())
	h.reconcile("lb")
	g.Expect(h.c.Get(context.Background(), client.ObjectKeyFromObject(lb), &lbv1.LoadBalancer{})).
		To(MatchError(ContainSubstring("not found")), "the finalizer is gone and the LoadBalancer with it")
}

// Node targets reconcile without any CAPI kind: no read of one is even attempted.
func TestNodeTargetsWithoutCAPI(t *testing.T) {
	lb := newLB("lb")
	lb.Finalizers = []string{lbv1.LoadBalancerFinalizer}
	lb.Spec.ClusterName = ""
	lb.Spec.TargetKind = lbv1.TargetKind{Kind: lbv1.NodeKind}
	lb.Spec.HealthCheck.Disabled = true
	h := newHarness(t, testNode("n1", "10.0.0.1", true, true), lb)
	g := h.g
	h.r.APIs = APIs{}
	h.r.APIReader = noCAPIClient(t, h.c)
	h.r.Client = noCAPIClient(t, h.c)
	h.r.NodeTargetsNamespace = lb.Namespace

	h.reconcile("lb")
	got := h.lb("lb")
	g.Expect(targetStates(got)).To(Equal(map[string]lbv1.TargetState{"n1": lbv1.TargetActive}))
	g.Expect(got.Status.Endpoint.Host).To(Equal("10.0.0.1"))
	g.Expect(conditions.IsTrue(got, lbv1.ReadyCondition)).To(BeTrue())
}

// noCAPIClient fails every request for a CAPI kind, as an API server without its CRDs does.
func noCAPIClient(t *testing.T, c client.Client) client.Client {
	t.Helper()
	w, ok := c.(client.WithWatch)
	if !ok {
		t.Fatalf("%T is not a client.WithWatch", c)
	}
	capi := func(obj runtime.Object) error {
		gvk, err := w.GroupVersionKindFor(obj)
		if err != nil {
			return err
		}
		if gvk.Group == clusterv1.GroupVersion.Group || gvk.Group == ipamv1.GroupVersion.Group {
			return errors.New("no matches for kind " + gvk.Kind + ": the test API server has no CAPI CRDs")
		}
		return nil
	}
	return interceptor.NewClient(w, interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if err := capi(obj); err != nil {
				return err
			}
			return c.Get(ctx, key, obj, opts...)
		},
		List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			if err := capi(list); err != nil {
				return err
			}
			return c.List(ctx, list, opts...)
		},
	})
}

// A LoadBalancerClass selects Clusters: without CAPI it is reported, and no Cluster is listed.
func TestClassWithoutClusters(t *testing.T) {
	g := NewWithT(t)
	h := newHarness(t)
	reg, err := providers.NewRegistry(&static.Backend{})
	g.Expect(err).NotTo(HaveOccurred())
	class := &lbv1.LoadBalancerClass{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "cls"},
		Spec: lbv1.LoadBalancerClassSpec{Template: lbv1.LoadBalancerClassTemplate{Spec: lbv1.LoadBalancerTemplateSpec{
			Backend: lbv1.Backend{Static: &lbv1.StaticBackend{}}}}}}
	r := &LoadBalancerClassReconciler{Client: noCAPIClient(t, h.c), Backends: reg}
	s := &classScope{class: class}
	g.Expect(r.reconcileClassNormal(context.Background(), s)).To(Succeed())
	setClassReady(s)
	g.Expect(conditions.GetReason(class, lbv1.ReadyCondition)).To(Equal(lbv1.APINotInstalledReason))
	g.Expect(conditions.GetMessage(class, lbv1.ReadyCondition)).To(And(
		ContainSubstring("clusters.cluster.x-k8s.io/v1beta2"), ContainSubstring("install Cluster API")))

	r.Clusters = true
	s = &classScope{class: class}
	g.Expect(r.reconcileClassNormal(context.Background(), s)).To(MatchError(ContainSubstring("no matches for kind Cluster")),
		"with Clusters it does list them (and this client has none)")
}
