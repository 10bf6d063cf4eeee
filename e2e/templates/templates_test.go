// Package templates validates caplb's clusterctl templates (templates/) the way a user meets
// them: variables substituted by clusterctl's own YAML processor, every object sent to a real
// kube-apiserver (dry run) that serves the real CAPI, kubeadm and caplb CRDs.
package templates

import (
	"context"
	"fmt"
	"io/fs"
	"slices"
	"sort"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/cluster-api/cmd/clusterctl/client/yamlprocessor"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lbv1 "github.com/caplb/caplb/api/v1alpha1"
	"github.com/caplb/caplb/e2e/envtest"
	"github.com/caplb/caplb/e2e/harness"
	"github.com/caplb/caplb/templates"
)

// clusterctlVars are what `clusterctl generate cluster test --kubernetes-version v1.36.3
// --control-plane-machine-count 3` sets, plus each flavor's own required variables.
var clusterctlVars = map[string]string{
	"CLUSTER_NAME":                "test",
	"NAMESPACE":                   "default",
	"KUBERNETES_VERSION":          "v1.36.3",
	"CONTROL_PLANE_MACHINE_COUNT": "3",
	"WORKER_MACHINE_COUNT":        "0",
	"CONTROL_PLANE_ENDPOINT_HOST": "api.test.example.com",
	"VIP_POOL_ADDRESSES":          "10.0.0.240-10.0.0.249",
	"VIP_POOL_GATEWAY":            "10.0.0.1",
	"CONTROL_PLANE_VIP":           "192.0.2.100",
	"BGP_PEER_ADDRESS":            "10.0.0.1",
	"BGP_PEER_ASN":                "64500",
}

// unservedKinds have no CRD in any module this repository can use: the infrastructure
// provider's kinds (the templates name them by variable) and the in-cluster IPAM provider's
// pool. They are skipped by name, with a log line.
var unservedKinds = []string{"Metal3Cluster", "Metal3ClusterTemplate", "Metal3MachineTemplate", "InClusterIPPool"}

// startAPIServer starts the test control plane with CAPI's core, kubeadm control-plane and
// kubeadm bootstrap CRDs (envtest.CAPICRDPaths) and caplb's, and returns an admin client.
func startAPIServer(t *testing.T) client.Client {
	t.Helper()
	if testing.Short() {
		t.Skip("needs the test control plane (make testbin); skipped with -short")
	}
	env, err := envtest.Start(envtest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Error(err)
		}
	})
	c, err := client.New(env.Config, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// process runs clusterctl's YAML processor over a template: every variable without a default
// must be in vars (clusterctl would refuse to generate otherwise), and none may survive.
func process(t *testing.T, name string, vars map[string]string) []byte {
	t.Helper()
	data, err := fs.ReadFile(templates.FS, name)
	if err != nil {
		t.Fatal(err)
	}
	p := yamlprocessor.NewSimpleProcessor()
	declared, err := p.GetVariableMap(data)
	if err != nil {
		t.Fatalf("%s: reading variables: %v", name, err)
	}
	for v, def := range declared {
		if _, ok := vars[v]; !ok && def == nil {
			t.Fatalf("%s: variable %s has no default and the test does not set it", name, v)
		}
	}
	out, err := p.Process(data, func(v string) (string, error) {
		if val, ok := vars[v]; ok {
			return val, nil
		}
		return "", fmt.Errorf("variable %s not set", v)
	})
	if err != nil {
		t.Fatalf("%s: clusterctl's processor: %v", name, err)
	}
	if strings.Contains(string(out), "${") {
		t.Fatalf("%s: a variable survived processing:\n%s", name, out)
	}
	return out
}

// dryRunAll creates every object of manifest in namespace with dryRun=All and returns the kinds
// the API server validated.
func dryRunAll(ctx context.Context, t *testing.T, c client.Client, name, namespace string, manifest []byte) []string {
	t.Helper()
	objs, err := harness.Decode(manifest)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	var validated []string
	for _, o := range objs {
		if o.GetNamespace() == "" {
			o.SetNamespace(namespace)
		}
		err := c.Create(ctx, o, client.DryRunAll)
		switch {
		case err == nil:
			validated = append(validated, o.GetKind())
		case meta.IsNoMatchError(err) && slices.Contains(unservedKinds, o.GetKind()):
			t.Logf("%s: skipping %s %s: no CRD for it in this test (provider kind)", name, o.GetKind(), o.GetName())
		case apierrors.IsInvalid(err):
			t.Errorf("%s: %s %s rejected by the API server: %v", name, o.GetKind(), o.GetName(), err)
		default:
			t.Errorf("%s: %s %s: %v", name, o.GetKind(), o.GetName(), err)
		}
	}
	return validated
}

func createNamespace(ctx context.Context, t *testing.T, c client.Client, name string) {
	t.Helper()
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
		t.Fatal(err)
	}
}

// TestClusterTemplates processes every cluster-template-<flavor>.yaml with clusterctl's
// processor and validates each object against the real CRDs.
func TestClusterTemplates(t *testing.T) {
	c := startAPIServer(t)
	ctx := t.Context()
	names, err := fs.Glob(templates.FS, "cluster-template-*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(names)
	flavors := []string{}
	for _, n := range names {
		flavors = append(flavors, strings.TrimSuffix(strings.TrimPrefix(n, "cluster-template-"), ".yaml"))
	}
	for _, want := range []string{"static", "arp", "bgp"} {
		if !slices.Contains(flavors, want) {
			t.Errorf("no cluster-template-%s.yaml", want)
		}
	}
	for i, n := range names {
		t.Run(flavors[i], func(t *testing.T) {
			ns := "tmpl-" + flavors[i]
			createNamespace(ctx, t, c, ns)
			manifest := process(t, n, clusterctlVars)
			got := dryRunAll(ctx, t, c, n, ns, manifest)
			want := []string{"Cluster", "KubeadmControlPlane", "LoadBalancer"}
			switch {
			case strings.HasPrefix(flavors[i], "caplb-"):
				// A Cluster of a ClusterClass: the class's objects are in clusterclass-caplb-*.yaml;
				// TestClusterClasses renders its topology.
				want = []string{"Cluster"}
			case strings.HasSuffix(flavors[i], "-ingress"):
				want = append(want, "MachineDeployment", "KubeadmConfigTemplate")
				checkWorkerFiles(t, n, manifest)
			}
			for _, kind := range want {
				if !slices.Contains(got, kind) {
					t.Errorf("%s: no %s validated (got %v)", n, kind, got)
				}
			}
		})
	}
}

// checkWorkerFiles: the workers' KubeadmConfigTemplate writes the agent's files from the Secret the
// worker LoadBalancer renders (lbv1.AgentSecretName), and that LoadBalancer selects the
// MachineDeployment's Machines and never publishes the Cluster's endpoint.
func checkWorkerFiles(t *testing.T, name string, manifest []byte) {
	t.Helper()
	objs, err := harness.Decode(manifest)
	if err != nil {
		t.Fatal(err)
	}
	var secret, mdLabel, mdName string
	var files []any
	for _, o := range objs {
		switch o.GetKind() {
		case "LoadBalancer":
			lb := &lbv1.LoadBalancer{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, lb); err != nil {
				t.Fatal(err)
			}
			if lb.Spec.SelectsWorkerMachines() {
				secret = lbv1.AgentSecretName(lb)
				if lb.Spec.PublishesClusterEndpoint() {
					t.Errorf("%s: worker LoadBalancer %s publishes the Cluster's endpoint", name, lb.Name)
				}
				mdLabel = lb.Spec.Selector.MatchLabels["cluster.x-k8s.io/deployment-name"]
			}
		case "KubeadmConfigTemplate":
			files, _, _ = unstructured.NestedSlice(o.Object, "spec", "template", "spec", "files")
		case "MachineDeployment":
			if v, _, _ := unstructured.NestedString(o.Object, "spec", "template", "metadata", "labels", "cluster.x-k8s.io/deployment-name"); v != o.GetName() {
				t.Errorf("%s: MachineDeployment %s labels its Machines %q", name, o.GetName(), v)
			}
			mdName = o.GetName()
		}
	}
	if secret == "" || len(files) != 3 {
		t.Fatalf("%s: want a worker LoadBalancer and three files in the KubeadmConfigTemplate (got Secret %q, %d files)", name, secret, len(files))
	}
	if mdName != mdLabel {
		t.Errorf("%s: the worker LoadBalancer selects deployment %q, not MachineDeployment %q", name, mdLabel, mdName)
	}
	for _, f := range files {
		got, _, _ := unstructured.NestedString(f.(map[string]any), "contentFrom", "secret", "name")
		if got != secret {
			t.Errorf("%s: a worker file comes from Secret %q, the worker LoadBalancer renders %q", name, got, secret)
		}
	}
}
