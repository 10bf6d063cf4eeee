package templates

import (
	"io/fs"
	"maps"
	"path"
	"slices"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	kcpv1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentv1 "github.com/caplb/caplb/api/agent/v1alpha1"
	lbv1 "github.com/caplb/caplb/api/v1alpha1"
	"github.com/caplb/caplb/controllers"
	"github.com/caplb/caplb/e2e/harness"
	"github.com/caplb/caplb/providers/vip"
	"github.com/caplb/caplb/templates"
)

// agentFiles are the node agent's files (path → key of its bootstrap Secret), as every bootstrap
// config must write them.
var agentFiles = map[string]string{
	agentv1.ConfigPath:    agentv1.SecretConfigKey,
	agentv1.GossipKeyPath: agentv1.SecretGossipKeyKey,
	path.Join(vip.Flavors[vip.FlavorKubeadm].ManifestDir, vip.ManifestFile): agentv1.SecretManifestKey,
}

// TestClusterClasses validates every clusterclass-<name>.yaml against the real CRDs, then, for
// each Cluster of the class the cluster templates make (cluster-template-<name>*.yaml, Cluster
// "prod"), runs CAPI's own ClusterClass patch engine (harness.RenderTopology) and checks what the
// topology controller would create:
//   - the patched KubeadmControlPlane and each MachineDeployment's KubeadmConfigTemplate are
//     admitted by the API server;
//   - the control plane writes the agent's three files, under the keys caplb writes, to the paths
//     the agent reads, from prod-caplb-agent (the Secret a control plane's LoadBalancer renders);
//   - each topology MachineDeployment is selected by exactly one LoadBalancerClass that also
//     selects the Cluster; that class's LoadBalancer prod-<class> is a worker LoadBalancer that
//     never publishes, and the MachineDeployment's files come from its Secret,
//     prod-<class>-caplb-agent, and from nowhere else;
//   - no worker LoadBalancerClass selects a Cluster without its MachineDeployment (a VIP with no
//     members);
//   - a VIP template allocates from a pool.
func TestClusterClasses(t *testing.T) {
	c := startAPIServer(t)
	ctx := t.Context()
	labelContract(t, c, "kubeadmcontrolplanes.controlplane.cluster.x-k8s.io", "v1beta2")
	names, err := fs.Glob(templates.FS, "clusterclass-*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(names) == 0 {
		t.Fatal("no clusterclass-*.yaml")
	}
	for _, n := range names {
		class := strings.TrimSuffix(strings.TrimPrefix(n, "clusterclass-"), ".yaml")
		t.Run(class, func(t *testing.T) {
			ns := "cc-" + class
			createNamespace(ctx, t, c, ns)
			manifest := process(t, n, clusterctlVars)
			got := dryRunAll(ctx, t, c, n, ns, manifest)
			for _, kind := range []string{"ClusterClass", "KubeadmControlPlaneTemplate", "LoadBalancerClass"} {
				if !slices.Contains(got, kind) {
					t.Fatalf("%s: no %s validated (got %v)", n, kind, got)
				}
			}
			objs, err := harness.Decode(manifest)
			if err != nil {
				t.Fatal(err)
			}
			cc := &clusterv1.ClusterClass{}
			var lbcs []*lbv1.LoadBalancerClass
			for _, o := range objs {
				switch o.GetKind() {
				case "ClusterClass":
					fromUnstructured(t, o, cc)
				case "LoadBalancerClass":
					lbc := &lbv1.LoadBalancerClass{}
					fromUnstructured(t, o, lbc)
					lbcs = append(lbcs, lbc)
					if v := lbc.Spec.Template.Spec.Backend.VIP(); v != nil && v.AddressFrom == nil {
						t.Errorf("%s: LoadBalancerClass %s's VIP backend has no addressFrom", n, lbc.Name)
					}
				}
			}
			clusters := clustersOfClass(t, cc.Name)
			if len(clusters) == 0 {
				t.Fatalf("no cluster-template-*.yaml makes a Cluster of ClusterClass %s", cc.Name)
			}
			for tmpl, cluster := range clusters {
				t.Run(strings.TrimSuffix(tmpl, ".yaml"), func(t *testing.T) {
					cluster.Namespace = ns
					checkTopology(t, c, cc, objs, lbcs, cluster)
				})
			}
		})
	}
}

// labelContract labels a CRD with the CAPI contract its version serves, as CAPI's release
// manifests do (the CRDs the test server loads come from CAPI's sources, without the label); CAPI's
// patch engine reads it.
func labelContract(t *testing.T, c client.Client, crd, version string) {
	t.Helper()
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(apiextensionsv1.SchemeGroupVersion.WithKind("CustomResourceDefinition"))
	m.SetName(crd)
	if err := c.Get(t.Context(), client.ObjectKeyFromObject(m), m); err != nil {
		t.Fatal(err)
	}
	orig := m.DeepCopy()
	m.Labels = map[string]string{clusterv1.GroupVersion.Group + "/" + clusterv1.GroupVersion.Version: version}
	if err := c.Patch(t.Context(), m, client.MergeFrom(orig)); err != nil {
		t.Fatal(err)
	}
}

// clustersOfClass processes every cluster-template-*.yaml for a Cluster "prod" with two workers
// per MachineDeployment and returns, by template, the Clusters whose topology uses class.
func clustersOfClass(t *testing.T, class string) map[string]*clusterv1.Cluster {
	t.Helper()
	names, err := fs.Glob(templates.FS, "cluster-template-*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	vars := maps.Clone(clusterctlVars)
	vars["CLUSTER_NAME"], vars["WORKER_MACHINE_COUNT"] = "prod", "2"
	out := map[string]*clusterv1.Cluster{}
	for _, n := range names {
		objs, err := harness.Decode(process(t, n, vars))
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range objs {
			if o.GetKind() != "Cluster" {
				continue
			}
			cl := &clusterv1.Cluster{}
			fromUnstructured(t, o, cl)
			if cl.Spec.Topology.ClassRef.Name == class {
				out[n] = cl
			}
		}
	}
	return out
}

func checkTopology(t *testing.T, c client.Client, cc *clusterv1.ClusterClass, objs []*unstructured.Unstructured, lbcs []*lbv1.LoadBalancerClass, cluster *clusterv1.Cluster) {
	ctx := t.Context()
	rendered, err := harness.RenderTopology(ctx, c, cc, objs, cluster)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, rendered.ControlPlane.DeepCopy(), client.DryRunAll); err != nil {
		t.Fatalf("the patched %s is rejected: %v", rendered.ControlPlane.GetKind(), err)
	}
	kcp := &kcpv1.KubeadmControlPlane{}
	fromUnstructured(t, rendered.ControlPlane, kcp)
	checkFiles(t, "the control plane", kcp.Spec.KubeadmConfigSpec.Files, cluster.Name+vip.SecretSuffix)

	selected := map[string]bool{} // worker classes selecting a MachineDeployment of the Cluster
	if len(rendered.BootstrapTemplates) != len(cluster.Spec.Topology.Workers.MachineDeployments) {
		t.Errorf("%d MachineDeployments, %d bootstrap templates rendered", len(cluster.Spec.Topology.Workers.MachineDeployments), len(rendered.BootstrapTemplates))
	}
	for md, bt := range rendered.BootstrapTemplates {
		if err := c.Create(ctx, bt.DeepCopy(), client.DryRunAll); err != nil {
			t.Fatalf("MachineDeployment %s: the patched %s is rejected: %v", md, bt.GetKind(), err)
		}
		// The labels CAPI's topology controller puts on the MachineDeployment's Machines.
		machine := labels.Set{clusterv1.ClusterNameLabel: cluster.Name, clusterv1.ClusterTopologyOwnedLabel: "",
			clusterv1.ClusterTopologyMachineDeploymentNameLabel: md}
		var lbs []*lbv1.LoadBalancer
		for _, lbc := range lbcs {
			if !matches(t, &lbc.Spec.ClusterSelector, cluster.Labels) {
				continue
			}
			lb := &lbv1.LoadBalancer{Spec: lbc.Spec.Template.Spec.LoadBalancerSpecFor(cluster.Name)}
			lb.Name, lb.Namespace = controllers.LoadBalancerName(cluster.Name, lbc.Name), cluster.Namespace
			if lb.Spec.Selector != nil && matches(t, lb.Spec.Selector, machine) {
				lbs = append(lbs, lb)
				selected[lbc.Name] = true
			}
		}
		if len(lbs) != 1 {
			t.Errorf("MachineDeployment %s: %d LoadBalancerClasses select the Cluster and its Machines, want 1", md, len(lbs))
			continue
		}
		lb := lbs[0]
		if !lb.Spec.SelectsWorkerMachines() || lb.Spec.PublishesClusterEndpoint() {
			t.Errorf("MachineDeployment %s: LoadBalancer %s is not a worker LoadBalancer that never publishes", md, lb.Name)
		}
		secret := lbv1.AgentSecretName(lb)
		if want := lb.Name + lbv1.AgentSecretSuffix; secret != want {
			t.Errorf("LoadBalancer %s renders Secret %s, want %s", lb.Name, secret, want)
		}
		kct := &bootstrapv1.KubeadmConfigTemplate{}
		fromUnstructured(t, bt, kct)
		checkFiles(t, "MachineDeployment "+md, kct.Spec.Template.Spec.Files, secret)
	}
	for _, lbc := range lbcs {
		spec := lbc.Spec.Template.Spec.LoadBalancerSpecFor(cluster.Name)
		if spec.SelectsWorkerMachines() && matches(t, &lbc.Spec.ClusterSelector, cluster.Labels) && !selected[lbc.Name] {
			t.Errorf("worker LoadBalancerClass %s selects Cluster %s, which has no MachineDeployment it selects", lbc.Name, cluster.Name)
		}
	}
}

// checkFiles: files write exactly the agent's files, each from secret.
func checkFiles(t *testing.T, who string, files []bootstrapv1.File, secret string) {
	t.Helper()
	got := map[string]string{} // path → secret key
	for _, f := range files {
		if f.ContentFrom.Secret.Name == "" {
			continue
		}
		if f.ContentFrom.Secret.Name != secret {
			t.Errorf("%s: file %s comes from Secret %s, want %s", who, f.Path, f.ContentFrom.Secret.Name, secret)
		}
		got[f.Path] = f.ContentFrom.Secret.Key
	}
	if !maps.Equal(got, agentFiles) {
		t.Errorf("%s: files (path → key) %v, want %v", who, got, agentFiles)
	}
}

func matches(t *testing.T, sel *metav1.LabelSelector, set labels.Set) bool {
	t.Helper()
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		t.Fatal(err)
	}
	return s.Matches(set)
}

func fromUnstructured(t *testing.T, u *unstructured.Unstructured, into any) {
	t.Helper()
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, into); err != nil {
		t.Fatalf("%s %s: %v", u.GetKind(), u.GetName(), err)
	}
}
