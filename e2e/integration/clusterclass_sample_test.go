package integration

import (
	"fmt"
	"io/fs"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	"sigs.k8s.io/cluster-api/cmd/clusterctl/client/yamlprocessor"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentv1 "github.com/caplb/caplb/api/agent/v1alpha1"
	lbv1 "github.com/caplb/caplb/api/v1alpha1"
	"github.com/caplb/caplb/e2e/harness"
	"github.com/caplb/caplb/providers/vip"
	"github.com/caplb/caplb/templates"
)

// The shipped ClusterClass example's LoadBalancerClass, as clusterctl would process it, gives
// two Clusters of the class (labelled as cluster-template-caplb-arp.yaml labels them) their own
// VIP from the class's pool — published to each Cluster before any Machine — and the per-Cluster
// Secret <cluster>-caplb-agent with the keys the ClusterClass's patch points the control plane
// at. (The topology controller and the IPAM provider are not run: the test plays the pool.)
func testClusterClassSample(t *testing.T, s *suite) {
	g := NewWithT(t)
	ctx := t.Context()
	ns, err := s.env.CreateNamespace(ctx, "ccsample")
	g.Expect(err).NotTo(HaveOccurred())

	data, err := fs.ReadFile(templates.FS, "clusterclass-caplb-arp.yaml")
	g.Expect(err).NotTo(HaveOccurred())
	vars := map[string]string{"VIP_POOL_ADDRESSES": "10.40.0.10-10.40.0.19", "VIP_POOL_GATEWAY": "10.40.0.1"}
	out, err := yamlprocessor.NewSimpleProcessor().Process(data, func(v string) (string, error) {
		if val, ok := vars[v]; ok {
			return val, nil
		}
		return "", fmt.Errorf("variable %s not set", v)
	})
	g.Expect(err).NotTo(HaveOccurred())
	objs, err := harness.Decode(out)
	g.Expect(err).NotTo(HaveOccurred())
	applied := false
	for _, o := range objs {
		if o.GetKind() == "LoadBalancerClass" {
			o.SetNamespace(ns)
			g.Expect(s.env.Client.Create(ctx, o)).To(Succeed())
			applied = true
		}
	}
	g.Expect(applied).To(BeTrue(), "the example has no LoadBalancerClass")

	label := map[string]string{"loadbalancer.cluster.x-k8s.io/class-name": "caplb-arp"}
	for i, name := range []string{"prod", "stage"} {
		c, err := s.env.CreateCluster(ctx, ns, name, harness.ClusterOptions{Labels: label})
		g.Expect(err).NotTo(HaveOccurred())
		lbName := name + "-caplb-arp"
		claim := &ipamv1.IPAddressClaim{}
		g.Eventually(func(g Gomega) {
			g.Expect(s.env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: lbName}, claim)).To(Succeed())
		}, flowTimeout).Should(Succeed(), "the claim of %s", lbName)
		g.Expect(claim.Spec.PoolRef.Name).To(Equal("caplb-arp-vips"))
		g.Expect(claim.Spec.ClusterName).To(Equal(name))

		// Play the pool.
		addr := fmt.Sprintf("10.40.0.%d", 10+i)
		ip := &ipamv1.IPAddress{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: lbName + "-addr"},
			Spec: ipamv1.IPAddressSpec{
				ClaimRef: ipamv1.IPAddressClaimReference{Name: claim.Name},
				PoolRef:  claim.Spec.PoolRef, Address: addr, Prefix: ptr.To(int32(24)), Gateway: "10.40.0.1",
			},
		}
		g.Expect(s.env.Client.Create(ctx, ip)).To(Succeed())
		claim.Status.AddressRef = ipamv1.IPAddressReference{Name: ip.Name}
		g.Expect(s.env.Client.Status().Update(ctx, claim)).To(Succeed())

		_, err = s.env.WaitLB(ctx, ns, lbName, flowTimeout, "the VIP published", func(lb *lbv1.LoadBalancer) bool {
			return lb.Status.Endpoint == lbv1.APIEndpoint{Host: addr, Port: 6443} &&
				harness.ConditionIs(lb, lbv1.ClusterEndpointCondition, metav1.ConditionTrue)
		})
		g.Expect(err).NotTo(HaveOccurred())
		cur := &clusterv1.Cluster{}
		g.Expect(s.env.Client.Get(ctx, client.ObjectKeyFromObject(c), cur)).To(Succeed())
		g.Expect(cur.Spec.ControlPlaneEndpoint).To(Equal(clusterv1.APIEndpoint{Host: addr, Port: 6443}))

		sec := &corev1.Secret{}
		g.Eventually(func(g Gomega) {
			g.Expect(s.env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name + vip.SecretSuffix}, sec)).To(Succeed())
			for _, k := range []string{agentv1.SecretConfigKey, agentv1.SecretGossipKeyKey, agentv1.SecretManifestKey} {
				g.Expect(sec.Data).To(HaveKey(k))
			}
		}, flowTimeout).Should(Succeed(), "the bootstrap Secret of %s", name)
	}
}
