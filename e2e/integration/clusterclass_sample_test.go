package integration

import (
	"fmt"
	"io/fs"
	"maps"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	"sigs.k8s.io/cluster-api/cmd/clusterctl/client/yamlprocessor"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	agentv1 "github.com/caplb/caplb/api/agent/v1alpha1"
	lbv1 "github.com/caplb/caplb/api/v1alpha1"
	"github.com/caplb/caplb/controllers"
	"github.com/caplb/caplb/e2e/harness"
	"github.com/caplb/caplb/providers/vip"
	"github.com/caplb/caplb/templates"
)

// The shipped ClusterClass example's LoadBalancerClasses, as clusterctl would process them, give
// the Clusters the caplb-* cluster templates make (labelled as those templates label them) their
// own VIPs from the class's pool:
//   - prod (cluster-template-caplb-arp.yaml): the control plane's VIP, published to the Cluster
//     before any Machine, and the Secret <cluster>-caplb-agent the ClusterClass's patch points the
//     control plane at; no ingress LoadBalancer;
//   - stage (cluster-template-caplb-arp-ingress.yaml): the same, and the worker LoadBalancer
//     stage-caplb-arp-ingress: its own VIP on 443, never the Cluster's endpoint, and its own
//     Secret, named in status.bootstrapSecretName, which is the Secret CAPI's patch engine writes
//     into the ingress MachineDeployment's bootstrap files for this Cluster.
//
// (The topology controller and the IPAM provider are not run: the test plays the pool, and renders
// the topology's patches with harness.RenderTopology.)
func testClusterClassSample(t *testing.T, s *suite) {
	g := NewWithT(t)
	ctx := t.Context()
	ns, err := s.env.CreateNamespace(ctx, "ccsample")
	g.Expect(err).NotTo(HaveOccurred())

	vars := map[string]string{"VIP_POOL_ADDRESSES": "10.40.0.10-10.40.0.19", "VIP_POOL_GATEWAY": "10.40.0.1",
		"KUBERNETES_VERSION": "v1.36.3", "CONTROL_PLANE_MACHINE_COUNT": "3", "WORKER_MACHINE_COUNT": "2"}
	classObjs := processTemplate(g, "clusterclass-caplb-arp.yaml", vars)
	cc := &clusterv1.ClusterClass{}
	var classes []string
	for _, o := range classObjs {
		switch o.GetKind() {
		case "LoadBalancerClass":
			o.SetNamespace(ns)
			g.Expect(s.env.Client.Create(ctx, o)).To(Succeed())
			classes = append(classes, o.GetName())
		case "ClusterClass":
			g.Expect(runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, cc)).To(Succeed())
		}
	}
	const cpClass, ingressClass = "caplb-arp", "caplb-arp-ingress"
	g.Expect(classes).To(ConsistOf(cpClass, ingressClass))

	next := 10 // the pool's next address, 10.40.0.<next>
	playPool := func(lbName, clusterName string) string {
		claim := &ipamv1.IPAddressClaim{}
		g.Eventually(func(g Gomega) {
			g.Expect(s.env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: lbName}, claim)).To(Succeed())
		}, flowTimeout).Should(Succeed(), "the claim of %s", lbName)
		g.Expect(claim.Spec.PoolRef.Name).To(Equal("caplb-arp-vips"))
		g.Expect(claim.Spec.ClusterName).To(Equal(clusterName))
		addr := fmt.Sprintf("10.40.0.%d", next)
		next++
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
		return addr
	}
	secretRendered := func(name string) {
		sec := &corev1.Secret{}
		g.Eventually(func(g Gomega) {
			g.Expect(s.env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, sec)).To(Succeed())
			for _, k := range []string{agentv1.SecretConfigKey, agentv1.SecretGossipKeyKey, agentv1.SecretManifestKey} {
				g.Expect(sec.Data).To(HaveKey(k))
			}
		}, flowTimeout).Should(Succeed(), "the bootstrap Secret %s", name)
	}

	for _, tc := range []struct {
		name, template string
		ingress        bool
	}{
		{"prod", "cluster-template-caplb-arp.yaml", false},
		{"stage", "cluster-template-caplb-arp-ingress.yaml", true},
	} {
		tv := maps.Clone(vars)
		tv["CLUSTER_NAME"] = tc.name
		var tmpl *clusterv1.Cluster
		for _, o := range processTemplate(g, tc.template, tv) {
			if o.GetKind() == "Cluster" {
				tmpl = &clusterv1.Cluster{}
				g.Expect(runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, tmpl)).To(Succeed())
			}
		}
		g.Expect(tmpl).NotTo(BeNil(), "%s makes no Cluster", tc.template)
		// The Cluster as the template labels it (the test's Cluster has no topology: nothing runs it).
		c, err := s.env.CreateCluster(ctx, ns, tc.name, harness.ClusterOptions{Labels: tmpl.Labels})
		g.Expect(err).NotTo(HaveOccurred())

		cpLB := controllers.LoadBalancerName(tc.name, cpClass)
		cpAddr := playPool(cpLB, tc.name)
		_, err = s.env.WaitLB(ctx, ns, cpLB, flowTimeout, "the VIP published", func(lb *lbv1.LoadBalancer) bool {
			return lb.Status.Endpoint == lbv1.APIEndpoint{Host: cpAddr, Port: 6443} &&
				harness.ConditionIs(lb, lbv1.ClusterEndpointCondition, metav1.ConditionTrue)
		})
		g.Expect(err).NotTo(HaveOccurred())
		cur := &clusterv1.Cluster{}
		g.Expect(s.env.Client.Get(ctx, client.ObjectKeyFromObject(c), cur)).To(Succeed())
		g.Expect(cur.Spec.ControlPlaneEndpoint).To(Equal(clusterv1.APIEndpoint{Host: cpAddr, Port: 6443}))
		secretRendered(tc.name + vip.SecretSuffix)
		if !tc.ingress {
			continue
		}

		// The Secret the ClusterClass's patch gives the ingress MachineDeployment of this Cluster.
		tmpl.Namespace = ns
		rendered, err := harness.RenderTopology(ctx, contractClient(g), cc, classObjs, tmpl)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(rendered.BootstrapTemplates).To(HaveKey("ingress"))
		kct := &bootstrapv1.KubeadmConfigTemplate{}
		g.Expect(runtime.DefaultUnstructuredConverter.FromUnstructured(rendered.BootstrapTemplates["ingress"].Object, kct)).To(Succeed())
		g.Expect(kct.Spec.Template.Spec.Files).To(HaveLen(3))
		patched := kct.Spec.Template.Spec.Files[0].ContentFrom.Secret.Name

		inLB := controllers.LoadBalancerName(tc.name, ingressClass)
		inAddr := playPool(inLB, tc.name)
		lb, err := s.env.WaitLB(ctx, ns, inLB, flowTimeout, "the ingress VIP", func(lb *lbv1.LoadBalancer) bool {
			c := harness.Condition(lb, lbv1.ClusterEndpointCondition)
			return lb.Status.Endpoint == lbv1.APIEndpoint{Host: inAddr, Port: 443} && lb.Status.BootstrapSecretName != "" &&
				c != nil && c.Reason == lbv1.NotPublisherReason
		})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(lb.Spec.SelectsWorkerMachines()).To(BeTrue())
		g.Expect(lb.Spec.Selector.MatchLabels).To(HaveKeyWithValue(clusterv1.ClusterTopologyMachineDeploymentNameLabel, "ingress"))
		g.Expect(lb.Status.BootstrapSecretName).To(Equal(patched))
		g.Expect(patched).To(Equal(inLB + lbv1.AgentSecretSuffix))
		secretRendered(patched)
		g.Expect(s.env.Client.Get(ctx, client.ObjectKeyFromObject(c), cur)).To(Succeed())
		g.Expect(cur.Spec.ControlPlaneEndpoint).To(Equal(clusterv1.APIEndpoint{Host: cpAddr, Port: 6443}), "the ingress VIP is never the Cluster's endpoint")
	}

	// The ingress class matched stage only: prod, without the label, has no ingress LoadBalancer.
	// (stage's is not Ready: it has no Machines here.)
	g.Eventually(func(g Gomega) {
		lbc := &lbv1.LoadBalancerClass{}
		g.Expect(s.env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: ingressClass}, lbc)).To(Succeed())
		g.Expect(lbc.Status.ObservedGeneration).To(Equal(lbc.Generation))
		g.Expect(lbc.Status.MatchedClusters).To(Equal(int32(1)))
	}, flowTimeout).Should(Succeed())
	lbs := &lbv1.LoadBalancerList{}
	g.Expect(s.env.Client.List(ctx, lbs, client.InNamespace(ns), client.MatchingLabels{lbv1.ClassLabel: ingressClass})).To(Succeed())
	g.Expect(lbs.Items).To(HaveLen(1))
	g.Expect(lbs.Items[0].Name).To(Equal(controllers.LoadBalancerName("stage", ingressClass)))
}

// processTemplate runs clusterctl's processor over a template and decodes it.
func processTemplate(g Gomega, name string, vars map[string]string) []*unstructured.Unstructured {
	data, err := fs.ReadFile(templates.FS, name)
	g.Expect(err).NotTo(HaveOccurred())
	out, err := yamlprocessor.NewSimpleProcessor().Process(data, func(v string) (string, error) {
		if val, ok := vars[v]; ok {
			return val, nil
		}
		return "", fmt.Errorf("variable %s not set", v)
	})
	g.Expect(err).NotTo(HaveOccurred())
	objs, err := harness.Decode(out)
	g.Expect(err).NotTo(HaveOccurred())
	return objs
}

// contractClient serves CAPI's patch engine the one thing it reads: the KubeadmControlPlane CRD's
// contract label, as CAPI's release manifests set it (the suite's CRDs, from CAPI's sources, have
// none, and the shared API server is left as it is).
func contractClient(g Gomega) client.Client {
	sch := runtime.NewScheme()
	g.Expect(apiextensionsv1.AddToScheme(sch)).To(Succeed())
	crd := &apiextensionsv1.CustomResourceDefinition{ObjectMeta: metav1.ObjectMeta{
		Name:   "kubeadmcontrolplanes.controlplane.cluster.x-k8s.io",
		Labels: map[string]string{clusterv1.GroupVersion.Group + "/" + clusterv1.GroupVersion.Version: "v1beta2"},
	}}
	return fake.NewClientBuilder().WithScheme(sch).WithObjects(crd).Build()
}
