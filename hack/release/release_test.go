package release

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/cluster-api/cmd/clusterctl/client/yamlprocessor"
	utilyaml "sigs.k8s.io/cluster-api/util/yaml"
)

func testOptions(t *testing.T) Options {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	return Options{Root: root, Version: "v0.1.0", ManagerImage: "example.test/caplb/caplb-manager:v0.1.0",
		AgentImage: "example.test/caplb/caplb-agent:v0.1.0"}
}

// The rendered components are what clusterctl expects: one Namespace, a manager container, the
// image and flags as clusterctl variables with defaults (so `clusterctl init` needs none set).
func TestComponents(t *testing.T) {
	g := NewWithT(t)
	o := testOptions(t)
	out, err := Components(o)
	g.Expect(err).NotTo(HaveOccurred())

	p := yamlprocessor.NewSimpleProcessor()
	vars, err := p.GetVariableMap(out)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(vars).To(HaveKeyWithValue(ManagerImageVariable, HaveValue(Equal(o.ManagerImage))))
	g.Expect(vars).To(HaveKey("CAPLB_CONCURRENCY"))
	g.Expect(vars).To(HaveKey("CAPLB_LOG_LEVEL"))
	for name, def := range vars {
		g.Expect(def).NotTo(BeNil(), "variable %s has no default: clusterctl init would fail without it", name)
	}
	processed, err := p.Process(out, func(string) (string, error) { return "", os.ErrNotExist })
	g.Expect(err).NotTo(HaveOccurred())
	objs, err := utilyaml.ToUnstructured(processed)
	g.Expect(err).NotTo(HaveOccurred())
	kinds := map[string]int{}
	for _, o := range objs {
		kinds[o.GetKind()]++
		g.Expect(o.GetLabels()).To(HaveKeyWithValue("cluster.x-k8s.io/provider", ProviderLabel), "%s %s", o.GetKind(), o.GetName())
	}
	g.Expect(kinds).To(HaveKeyWithValue("Namespace", 1))
	g.Expect(kinds).To(HaveKeyWithValue("Deployment", 1))
	g.Expect(kinds).To(HaveKeyWithValue("CustomResourceDefinition", 2))
	// The validating webhook and what serves it (webhook_test.go checks how they fit).
	g.Expect(kinds).To(HaveKeyWithValue("ValidatingWebhookConfiguration", 1))
	g.Expect(kinds).To(HaveKeyWithValue("Service", 1))
	g.Expect(kinds).To(HaveKeyWithValue("Certificate", 1))
	g.Expect(kinds).To(HaveKeyWithValue("Issuer", 1))
	g.Expect(string(processed)).To(ContainSubstring("image: " + o.ManagerImage))
	g.Expect(string(processed)).NotTo(ContainSubstring("caplb-system\n  namespace:"))
}

func TestOptionsRejected(t *testing.T) {
	for name, mod := range map[string]func(*Options){
		"no v":            func(o *Options) { o.Version = "0.1.0" },
		"not semver":      func(o *Options) { o.Version = "v1" },
		"image variable":  func(o *Options) { o.ManagerImage = "${X}" },
		"image no tag":    func(o *Options) { o.AgentImage = "example.test/caplb-agent" },
		"no root":         func(o *Options) { o.Root = "" },
		"empty image ref": func(o *Options) { o.ManagerImage = "" },
	} {
		t.Run(name, func(t *testing.T) {
			o := testOptions(t)
			mod(&o)
			_, err := Components(o)
			NewWithT(t).Expect(err).To(HaveOccurred())
		})
	}
}

// metadata.yaml must cover the version being released with contract v1beta2.
func TestMetadata(t *testing.T) {
	g := NewWithT(t)
	o := testOptions(t)
	md, err := Metadata(o)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(md)).To(ContainSubstring("contract: v1beta2"))

	o.Version = "v99.3.0"
	_, err = Metadata(o)
	g.Expect(err).To(MatchError(ContainSubstring("no releaseSeries for v99.3.0")))

	dir := t.TempDir()
	g.Expect(os.WriteFile(filepath.Join(dir, MetadataFile), []byte(
		"apiVersion: clusterctl.cluster.x-k8s.io/v1alpha3\nkind: Metadata\nreleaseSeries:\n- {major: 0, minor: 1, contract: v1beta1}\n"), 0o644)).To(Succeed())
	o.Root, o.Version = dir, "v0.1.2"
	_, err = Metadata(o)
	g.Expect(err).To(MatchError(ContainSubstring(`declares contract "v1beta1"`)))
}

func TestAgentManifests(t *testing.T) {
	g := NewWithT(t)
	o := testOptions(t)
	files, err := AgentManifests(o, os.ReadFile)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(files).To(HaveLen(2))
	for name, data := range files {
		g.Expect(string(data)).To(ContainSubstring("image: "+o.AgentImage), name)
		g.Expect(string(data)).NotTo(ContainSubstring(":latest"), name)
	}
}

func TestReplaceImages(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		n        int
	}{
		{"      image: ghcr.io/caplb/caplb-agent:latest", "      image: x/caplb-agent:v1", 1},
		{"  - image: caplb-agent", "  - image: x/caplb-agent:v1", 1},
		{"    image: registry:5000/caplb-agent", "    image: x/caplb-agent:v1", 1},
		{"    image: ghcr.io/other/not-caplb-agent:v1", "    image: ghcr.io/other/not-caplb-agent:v1", 0},
		{"# the image: caplb-agent in a comment", "# the image: caplb-agent in a comment", 0},
	} {
		got, n := replaceImages([]byte(tc.in), "caplb-agent", "x/caplb-agent:v1")
		if string(got) != tc.want || n != tc.n {
			t.Errorf("replaceImages(%q) = %q, %d; want %q, %d", tc.in, got, n, tc.want, tc.n)
		}
	}
	if !strings.Contains(string(must(replaceImages([]byte("a\nimage: caplb-agent\nb"), "caplb-agent", "y:1"))), "a\nimage: y:1\nb") {
		t.Error("replaceImages must keep the other lines")
	}
}

func must(b []byte, _ int) []byte { return b }

// Every image reference under config/ is one the release sets from REGISTRY and VERSION: the
// manager's placeholder (components) or the agent's in the manifests AgentManifests rewrites. A
// new manifest with an image of its own would escape `make release VERSION=...` and ship a stale
// reference; this test names it.
func TestEveryConfigImageIsReleased(t *testing.T) {
	o := testOptions(t)
	rewritten := map[string]string{
		filepath.Join("config", "manager", "manager.yaml"):  "caplb-manager",
		filepath.Join("config", "agent", "daemonset.yaml"):  "caplb-agent",
		filepath.Join("config", "agent", "static-pod.yaml"): "caplb-agent",
	}
	err := filepath.WalkDir(filepath.Join(o.Root, "config"), func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !(strings.HasSuffix(path, ".yaml") || strings.HasSuffix(path, ".yml")) {
			return err
		}
		rel, _ := filepath.Rel(o.Root, path)
		if strings.HasPrefix(rel, filepath.Join("config", "crd")+string(filepath.Separator)) {
			return nil // schemas: "image:" there is a property name (spec.backend.<kind>.agent.image)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for i, line := range strings.Split(string(data), "\n") {
			s := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(line), "- "))
			ref, ok := strings.CutPrefix(s, "image:")
			if !ok {
				continue
			}
			ref = strings.TrimSpace(ref)
			name, ok := rewritten[rel]
			if !ok {
				t.Errorf("%s:%d: image %q is not set by `make release`; add the file to hack/release", rel, i+1, ref)
				continue
			}
			repo, tag := ref, ""
			if j := strings.LastIndex(ref, ":"); j > strings.LastIndex(ref, "/") {
				repo, tag = ref[:j], ref[j+1:]
			}
			if repo != name && !strings.HasSuffix(repo, "/"+name) {
				t.Errorf("%s:%d: image %q, want the %s image", rel, i+1, ref, name)
			}
			// Unreleased manifests are applied as they are too (kubectl apply -k): a tag that
			// moves (latest, or none) would run whatever was pushed last.
			if strings.Contains(repo, "/") && (tag == "" || tag == "latest") {
				t.Errorf("%s:%d: image %q: pin a version tag, not %q", rel, i+1, ref, tag)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// The manifests and the images agree on how the binaries start: the manager Deployment leaves
// the image's entrypoint (/caplb) alone and passes `manager` first, as the image's own command
// does, and runs as the image's user; the agent manifests run the image's binary. (A Dockerfile
// with ENTRYPOINT ["/caplb", "manager"] under args [manager, ...] would start `caplb manager
// manager`, which exits.)
func TestManifestsMatchImages(t *testing.T) {
	g := NewWithT(t)
	o := testOptions(t)
	out, err := Components(o)
	g.Expect(err).NotTo(HaveOccurred())
	processed, err := yamlprocessor.NewSimpleProcessor().Process(out, func(string) (string, error) { return "", os.ErrNotExist })
	g.Expect(err).NotTo(HaveOccurred())
	objs, err := utilyaml.ToUnstructured(processed)
	g.Expect(err).NotTo(HaveOccurred())
	found := false
	for _, obj := range objs {
		if obj.GetKind() != "Deployment" {
			continue
		}
		d := &appsv1.Deployment{}
		g.Expect(runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, d)).To(Succeed())
		for _, c := range d.Spec.Template.Spec.Containers {
			if c.Name != ManagerContainer {
				continue
			}
			found = true
			g.Expect(c.Command).To(BeEmpty(), "the image's entrypoint %v starts the manager", ManagerImageSpec.Entrypoint)
			g.Expect(c.Args).NotTo(BeEmpty())
			g.Expect(c.Args[0]).To(Equal(ManagerImageSpec.Cmd[0]))
			uid, _, _ := strings.Cut(ManagerImageSpec.User, ":")
			g.Expect(c.SecurityContext).NotTo(BeNil())
			g.Expect(c.SecurityContext.RunAsUser).To(HaveValue(BeEquivalentTo(mustAtoi(t, uid))))
		}
	}
	g.Expect(found).To(BeTrue())

	files, err := AgentManifests(o, os.ReadFile)
	g.Expect(err).NotTo(HaveOccurred())
	for name, data := range files {
		objs, err := utilyaml.ToUnstructured(data)
		g.Expect(err).NotTo(HaveOccurred(), name)
		for _, obj := range objs {
			containers, _, _ := unstructured.NestedSlice(obj.Object, "spec", "template", "spec", "containers")
			if obj.GetKind() == "Pod" {
				containers, _, _ = unstructured.NestedSlice(obj.Object, "spec", "containers")
			}
			g.Expect(containers).NotTo(BeEmpty(), name)
			for _, c := range containers {
				cmd, _, _ := unstructured.NestedStringSlice(c.(map[string]any), "command")
				g.Expect(cmd).NotTo(BeEmpty(), name)
				g.Expect(cmd[0]).To(Equal(AgentImageSpec.Binary), name)
			}
		}
	}
}

func mustAtoi(t *testing.T, s string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// The release carries the clusterctl templates and the ClusterClass, byte for byte, under the names
// clusterctl looks for (`clusterctl generate cluster --flavor <flavor>` reads
// cluster-template-<flavor>.yaml).
func TestWriteIncludesTemplates(t *testing.T) {
	g := NewWithT(t)
	o := testOptions(t)
	dir := t.TempDir()
	_, err := Write(o, dir)
	g.Expect(err).NotTo(HaveOccurred())
	names := []string{"clusterclass-caplb-arp.yaml"}
	for _, flavor := range []string{"static", "arp", "bgp", "arp-ingress", "caplb-arp", "caplb-arp-ingress"} {
		names = append(names, "cluster-template-"+flavor+".yaml")
	}
	for _, name := range names {
		got, err := os.ReadFile(filepath.Join(dir, name))
		g.Expect(err).NotTo(HaveOccurred(), "release lacks %s", name)
		want, err := os.ReadFile(filepath.Join(o.Root, "templates", name))
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(got).To(Equal(want))
	}
}

// The release carries the RBAC a workload cluster of remote Node targets needs, byte for byte.
func TestWriteIncludesWorkloadRBAC(t *testing.T) {
	g := NewWithT(t)
	o := testOptions(t)
	dir := t.TempDir()
	_, err := Write(o, dir)
	g.Expect(err).NotTo(HaveOccurred())
	got, err := os.ReadFile(filepath.Join(dir, WorkloadRBACFile))
	g.Expect(err).NotTo(HaveOccurred())
	want, err := os.ReadFile(filepath.Join(o.Root, "config", "workload", "rbac.yaml"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got).To(Equal(want))
}
