package controllers

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/go-logr/logr"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/clientcmd"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/controllers/clustercache"
	"sigs.k8s.io/cluster-api/util/secret"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	lbv1 "github.com/caplb/caplb/api/v1alpha1"
)

// gateReader is a fake manager cache holding objs, with the LoadBalancer index the gate lists by.
func gateReader(t *testing.T, objs ...client.Object) client.Client {
	t.Helper()
	s, err := newTestScheme()
	if err != nil {
		t.Fatal(err)
	}
	return fake.NewClientBuilder().WithScheme(s).WithObjects(objs...).
		WithIndex(&lbv1.LoadBalancer{}, indexLBClusterName, func(o client.Object) []string {
			return []string{o.(*lbv1.LoadBalancer).Spec.ClusterName}
		}).Build()
}

func newTestScheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	return s, AddToScheme(s)
}

// kubeconfigSecret is Cluster edge's kubeconfig Secret in namespace ns; tokenFile, when set, is
// its user's.
func kubeconfigSecret(t *testing.T, ns, tokenFile string) *corev1.Secret {
	t.Helper()
	kc := inlineKubeconfig()
	kc.AuthInfos["tenant"].TokenFile = tokenFile
	data, err := clientcmd.Write(*kc)
	if err != nil {
		t.Fatal(err)
	}
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: secret.Name("edge", secret.Kubeconfig)},
		Data:       map[string][]byte{secret.KubeconfigDataName: data},
	}
}

func TestNeedsWorkload(t *testing.T) {
	remote := nodeLB("edge", "ns")
	local := nodeLB("", "ns")
	static := newLB("lb")
	arp := newLB("lb")
	arp.Spec.Backend = lbv1.Backend{ARP: &lbv1.ARPBackend{}}
	standalone := newLB("lb")
	standalone.Spec.ClusterName = ""
	for _, tt := range []struct {
		name string
		lb   *lbv1.LoadBalancer
		want bool
	}{
		{"remote Node targets", remote, true},
		{"arp backend, Machine targets (agents report on workload Nodes)", arp, true},
		{"static backend, Machine targets", static, false},
		{"local Node targets", local, false},
		{"standalone", standalone, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			NewWithT(t).Expect(needsWorkload(tt.lb)).To(Equal(tt.want))
		})
	}
}

// The ClusterCache connects to a Cluster only when a LoadBalancer of its namespace needs it and
// its kubeconfig is acceptable.
func TestWorkloadGateFilter(t *testing.T) {
	const tokenPath = "/var/run/secrets/kubernetes.io/serviceaccount/token"
	remote := nodeLB("edge", "tenant")
	elsewhere := nodeLB("edge", "other")
	static := newLB("lb")
	static.Namespace, static.Spec.ClusterName = "tenant", "edge"
	for _, tt := range []struct {
		name string
		objs []client.Object
		want bool
	}{
		{"no LoadBalancer names the Cluster", []client.Object{kubeconfigSecret(t, "tenant", "")}, false},
		{"a LoadBalancer that needs no workload connection", []client.Object{static, kubeconfigSecret(t, "tenant", "")}, false},
		{"a same-named Cluster's LoadBalancer in another namespace", []client.Object{elsewhere, kubeconfigSecret(t, "tenant", "")}, false},
		{"remote Node targets, inline kubeconfig", []client.Object{remote, kubeconfigSecret(t, "tenant", "")}, true},
		{"remote Node targets, no Secret yet (the ClusterCache fails without dialing)", []client.Object{remote}, true},
		{"remote Node targets, tokenFile", []client.Object{remote, kubeconfigSecret(t, "tenant", tokenPath)}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			g := &workloadGate{cache: gateReader(t, tt.objs...), log: logr.Discard()}
			c := &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "tenant", Name: "edge"}}
			NewWithT(t).Expect(g.filter(c)).To(Equal(tt.want))
		})
	}
}

// The ClusterCache's SecretClient hands out no refused kubeconfig, and lists nothing.
func TestKubeconfigSecretsReader(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	key := client.ObjectKey{Namespace: "tenant", Name: "edge-kubeconfig"}

	r := kubeconfigSecrets{Reader: gateReader(t, kubeconfigSecret(t, "tenant", ""))}
	s := &corev1.Secret{}
	g.Expect(r.Get(ctx, key, s)).To(Succeed())
	g.Expect(s.Data).To(HaveKey(secret.KubeconfigDataName))

	r = kubeconfigSecrets{Reader: gateReader(t, kubeconfigSecret(t, "tenant", "/etc/token"))}
	s = &corev1.Secret{}
	err := r.Get(ctx, key, s)
	var refused *kubeconfigRefusal
	g.Expect(errors.As(err, &refused)).To(BeTrue(), "got %v", err)
	g.Expect(refused.Reason).To(Equal(lbv1.KubeconfigTokenFileReason))
	g.Expect(s.Data).To(BeEmpty(), "a refused Secret is blanked")

	g.Expect(r.List(ctx, &corev1.SecretList{})).NotTo(Succeed())
}

// Without a connection, GetClient says why a refused kubeconfig is refused (and does not wake
// the ClusterCache for it); otherwise it wakes the ClusterCache so the filter is asked again.
func TestWorkloadClustersGetClient(t *testing.T) {
	ctx := context.Background()
	key := client.ObjectKey{Namespace: "tenant", Name: "edge"}
	for _, tt := range []struct {
		name      string
		cc        *fakeClusterCache
		secret    *corev1.Secret
		refused   bool
		wantErr   error
		wantWoken int
	}{
		{"connected", &fakeClusterCache{c: workloadClient(t)}, kubeconfigSecret(t, "tenant", ""), false, nil, 0},
		{"not connected, inline kubeconfig", &fakeClusterCache{connErr: clustercache.ErrClusterNotConnected},
			kubeconfigSecret(t, "tenant", ""), false, clustercache.ErrClusterNotConnected, 1},
		{"not connected, no Secret", &fakeClusterCache{connErr: clustercache.ErrClusterNotConnected},
			nil, false, clustercache.ErrClusterNotConnected, 1},
		{"not connected, tokenFile", &fakeClusterCache{connErr: clustercache.ErrClusterNotConnected},
			kubeconfigSecret(t, "tenant", "/etc/token"), true, nil, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			var objs []client.Object
			if tt.secret != nil {
				objs = append(objs, tt.secret)
			}
			gate := &workloadGate{cache: gateReader(t, objs...), log: logr.Discard()}
			q := gate.newQueue("test-clustercache", nil)
			defer q.ShutDown()
			w := &workloadClusters{ClusterCache: tt.cc, gate: gate}
			c, err := w.GetClient(ctx, key)
			switch {
			case tt.refused:
				var r *kubeconfigRefusal
				g.Expect(errors.As(err, &r)).To(BeTrue(), "got %v", err)
				g.Expect(r.Reason).To(Equal(lbv1.KubeconfigTokenFileReason))
			case tt.wantErr != nil:
				g.Expect(err).To(MatchError(tt.wantErr))
			default:
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(c).NotTo(BeNil())
			}
			if tt.wantWoken == 0 {
				g.Consistently(q.Len, 200*time.Millisecond).Should(BeZero(), "the ClusterCache is not woken")
				return
			}
			g.Eventually(q.Len).Should(Equal(tt.wantWoken), "the ClusterCache is woken for the Cluster")
		})
	}
}

// The filter's remembered verdicts follow the Secret: each new version is judged again.
func TestWorkloadGateFilterFollowsSecretUpdates(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	s := kubeconfigSecret(t, "tenant", "")
	c := gateReader(t, nodeLB("edge", "tenant"), s)
	gate := &workloadGate{cache: c, log: logr.Discard()}
	cluster := &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "tenant", Name: "edge"}}
	g.Expect(gate.filter(cluster)).To(BeTrue())

	for _, tt := range []struct {
		tokenFile string
		want      bool
	}{{"/etc/token", false}, {"", true}} {
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(s), s)).To(Succeed())
		s.Data = kubeconfigSecret(t, "tenant", tt.tokenFile).Data
		g.Expect(c.Update(ctx, s)).To(Succeed())
		g.Expect(gate.filter(cluster)).To(Equal(tt.want), "tokenFile %q", tt.tokenFile)
	}
	g.Expect(c.Delete(ctx, s)).To(Succeed())
	g.Expect(gate.filter(cluster)).To(BeTrue(), "no Secret: the ClusterCache fails on its own, without dialing")
}
