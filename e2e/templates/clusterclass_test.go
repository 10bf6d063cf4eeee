package templates

import (
	"bytes"
	"encoding/json"
	"io/fs"
	"path"
	"slices"
	"strings"
	"testing"
	"text/template"

	jsonpatch "github.com/evanphx/json-patch/v5"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	kcpv1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	agentv1 "github.com/caplb/caplb/api/agent/v1alpha1"
	lbv1 "github.com/caplb/caplb/api/v1alpha1"
	"github.com/caplb/caplb/e2e/harness"
	"github.com/caplb/caplb/providers/vip"
	"github.com/caplb/caplb/templates"
)

// TestClusterClasses validates every clusterclass-<name>.yaml against the real CRDs, then plays
// CAPI's topology patch for a Cluster named "prod" (the Go template with .builtin.cluster.name,
// then the JSON patch) and validates the patched KubeadmControlPlaneTemplate too: its files must
// pull the agent's three files from prod-caplb-agent, under the keys caplb writes, to the
// paths the agent reads. A LoadBalancerClass must come with the class, with an arp/bgp template
// that allocates from a pool.
func TestClusterClasses(t *testing.T) {
	c := startAPIServer(t)
	ctx := t.Context()
	names, err := fs.Glob(templates.FS, "clusterclass-*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(names) == 0 {
		t.Fatal("no clusterclass-*.yaml")
	}
	for _, n := range names {
		t.Run(strings.TrimSuffix(n, ".yaml"), func(t *testing.T) {
			ns := "cc-" + strings.TrimSuffix(strings.TrimPrefix(n, "clusterclass-"), ".yaml")
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
			cc, kcpt, lbc := &clusterv1.ClusterClass{}, &unstructured.Unstructured{}, &lbv1.LoadBalancerClass{}
			for _, o := range objs {
				switch o.GetKind() {
				case "ClusterClass":
					fromUnstructured(t, o, cc)
				case "KubeadmControlPlaneTemplate":
					kcpt = o
				case "LoadBalancerClass":
					fromUnstructured(t, o, lbc)
				}
			}
			if v := lbc.Spec.Template.Spec.Backend.VIP(); v != nil && v.AddressFrom == nil {
				t.Errorf("%s: the LoadBalancerClass's VIP backend has no addressFrom", n)
			}
			patched := applyControlPlanePatches(t, cc, kcpt, "prod")
			patched.SetNamespace(ns)
			patched.SetName("prod-control-plane")
			if err := c.Create(ctx, patched, client.DryRunAll); err != nil {
				t.Fatalf("%s: the patched KubeadmControlPlaneTemplate is rejected: %v", n, err)
			}
			tmpl := &kcpv1.KubeadmControlPlaneTemplate{}
			fromUnstructured(t, patched, tmpl)
			files := map[string]string{} // path → secret key
			for _, f := range tmpl.Spec.Template.Spec.KubeadmConfigSpec.Files {
				if f.ContentFrom.Secret.Name != "" {
					if f.ContentFrom.Secret.Name != "prod"+vip.SecretSuffix {
						t.Errorf("file %s comes from Secret %s, want prod%s", f.Path, f.ContentFrom.Secret.Name, vip.SecretSuffix)
					}
					files[f.Path] = f.ContentFrom.Secret.Key
				}
			}
			want := map[string]string{
				agentv1.ConfigPath:    agentv1.SecretConfigKey,
				agentv1.GossipKeyPath: agentv1.SecretGossipKeyKey,
				path.Join(vip.Flavors[vip.FlavorKubeadm].ManifestDir, vip.ManifestFile): agentv1.SecretManifestKey,
			}
			for p, k := range want {
				if files[p] != k {
					t.Errorf("file %s: from key %q, want %q (files: %v)", p, files[p], k, files)
				}
			}
		})
	}
}

func fromUnstructured(t *testing.T, u *unstructured.Unstructured, into any) {
	t.Helper()
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, into); err != nil {
		t.Fatalf("%s %s: %v", u.GetKind(), u.GetName(), err)
	}
}

// applyControlPlanePatches applies the ClusterClass's inline JSON patches that select the
// control-plane template, as CAPI's topology controller does for a Cluster named cluster: each
// valueFrom.template is a Go template over the builtin variables, rendered then read as YAML.
func applyControlPlanePatches(t *testing.T, cc *clusterv1.ClusterClass, kcpt *unstructured.Unstructured, cluster string) *unstructured.Unstructured {
	t.Helper()
	doc, err := kcpt.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	builtin := map[string]any{"builtin": map[string]any{"cluster": map[string]any{"name": cluster}}}
	applied := 0
	for _, p := range cc.Spec.Patches {
		for _, d := range p.Definitions {
			if d.Selector.Kind != kcpt.GetKind() || d.Selector.MatchResources.ControlPlane == nil || !*d.Selector.MatchResources.ControlPlane {
				continue
			}
			var ops []map[string]any
			for _, jp := range d.JSONPatches {
				op := map[string]any{"op": jp.Op, "path": jp.Path}
				switch {
				case jp.Value != nil:
					var v any
					if err := json.Unmarshal(jp.Value.Raw, &v); err != nil {
						t.Fatal(err)
					}
					op["value"] = v
				case jp.ValueFrom != nil && jp.ValueFrom.Template != "":
					tpl, err := template.New(p.Name).Option("missingkey=error").Parse(jp.ValueFrom.Template)
					if err != nil {
						t.Fatalf("patch %s: template: %v", p.Name, err)
					}
					var buf bytes.Buffer
					if err := tpl.Execute(&buf, builtin); err != nil {
						t.Fatalf("patch %s: template: %v", p.Name, err)
					}
					var v any
					if err := yaml.Unmarshal(buf.Bytes(), &v); err != nil {
						t.Fatalf("patch %s: rendered template is not YAML: %v\n%s", p.Name, err, buf.String())
					}
					op["value"] = v
				default:
					t.Fatalf("patch %s: %s %s has no value this test can render", p.Name, jp.Op, jp.Path)
				}
				ops = append(ops, op)
			}
			raw, err := json.Marshal(ops)
			if err != nil {
				t.Fatal(err)
			}
			patch, err := jsonpatch.DecodePatch(raw)
			if err != nil {
				t.Fatalf("patch %s: %v", p.Name, err)
			}
			if doc, err = patch.Apply(doc); err != nil {
				t.Fatalf("patch %s does not apply to %s: %v", p.Name, kcpt.GetName(), err)
			}
			applied++
		}
	}
	if applied == 0 {
		t.Fatalf("ClusterClass %s has no patch for the control-plane template", cc.Name)
	}
	out := &unstructured.Unstructured{}
	if err := out.UnmarshalJSON(doc); err != nil {
		t.Fatal(err)
	}
	return out
}
