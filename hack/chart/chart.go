package chart

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	kubefake "helm.sh/helm/v3/pkg/kube/fake"
	"helm.sh/helm/v3/pkg/storage"
	"helm.sh/helm/v3/pkg/storage/driver"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// KubeVersion is the Kubernetes version rendering assumes (the test API server's, e2e/testbin).
const KubeVersion = "v1.36.3"

// Dir is the chart's directory relative to the repository root.
const Dir = "charts/caplb"

// Load reads the chart from root/charts/caplb.
func Load(root string) (*chart.Chart, error) {
	c, err := loader.Load(filepath.Join(root, Dir))
	if err != nil {
		return nil, fmt.Errorf("load chart %s: %w", Dir, err)
	}
	return c, nil
}

// SetVersion sets the chart's version from a release version: vX.Y.Z gives version X.Y.Z (helm
// wants SemVer without the v) and appVersion vX.Y.Z, the image tag the templates default to.
func SetVersion(c *chart.Chart, version string) error {
	if !strings.HasPrefix(version, "v") || len(version) < 2 {
		return fmt.Errorf("chart version %q: want a release version with a leading v, e.g. v0.1.0", version)
	}
	c.Metadata.Version = strings.TrimPrefix(version, "v")
	c.Metadata.AppVersion = version
	if err := c.Validate(); err != nil {
		return fmt.Errorf("chart version %q: %w", version, err)
	}
	return nil
}

// registryLine is values.yaml's image.registry line, the one place image references come from.
var registryLine = regexp.MustCompile(`(?m)^  registry: \S+$`)

// SetRegistry makes registry the default of image.registry (make release's REGISTRY), in the
// parsed values and in the packaged values.yaml, whose comments helm keeps (it packages the raw file).
func SetRegistry(c *chart.Chart, registry string) error {
	if registry == "" || strings.ContainsAny(registry, " :@") {
		return fmt.Errorf("registry %q: want a registry and path without a tag, e.g. ghcr.io/caplb", registry)
	}
	image, ok := c.Values["image"].(map[string]any)
	if !ok {
		return fmt.Errorf("values.yaml has no image map")
	}
	image["registry"] = registry
	for _, f := range c.Raw {
		if f.Name != chartutil.ValuesfileName {
			continue
		}
		if n := len(registryLine.FindAll(f.Data, -1)); n != 1 {
			return fmt.Errorf("values.yaml: want exactly one image.registry line, found %d", n)
		}
		f.Data = registryLine.ReplaceAll(f.Data, []byte("  registry: "+registry))
		return nil
	}
	return fmt.Errorf("the chart has no raw values.yaml")
}

// Package writes <name>-<version>.tgz into dir, as `helm package` does, and returns its path.
func Package(c *chart.Chart, dir string) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("package chart: %w", err)
	}
	path, err := chartutil.Save(c, dir)
	if err != nil {
		return "", fmt.Errorf("package chart: %w", err)
	}
	return path, nil
}

// Render renders the chart as `helm template --namespace ns` would (no cluster: lookup finds
// nothing), schema validation included, and returns the objects in file order.
func Render(c *chart.Chart, namespace string, values map[string]any) ([]*unstructured.Unstructured, error) {
	cfg := &action.Configuration{
		Releases:     storage.Init(driver.NewMemory()),
		KubeClient:   &kubefake.PrintingKubeClient{Out: io.Discard},
		Capabilities: chartutil.DefaultCapabilities,
		Log:          func(string, ...any) {},
	}
	install := action.NewInstall(cfg)
	install.DryRun = true
	install.ClientOnly = true
	install.Replace = true
	install.ReleaseName = "caplb"
	install.Namespace = namespace
	// helm's default is v1.20 without a cluster; the chart needs matchConditions (1.30+).
	install.KubeVersion = &chartutil.KubeVersion{Version: KubeVersion, Major: "1", Minor: "36"}
	install.APIVersions = chartutil.VersionSet{"monitoring.coreos.com/v1", "cert-manager.io/v1"}
	rel, err := install.Run(c, values)
	if err != nil {
		return nil, fmt.Errorf("render chart: %w", err)
	}
	return Decode(rel.Manifest)
}

// Decode splits a multi-document YAML stream into objects, skipping empty documents.
func Decode(manifest string) ([]*unstructured.Unstructured, error) {
	var objs []*unstructured.Unstructured
	r := utilyaml.NewYAMLReader(bufio.NewReader(strings.NewReader(manifest)))
	for i := 0; ; i++ {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return objs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		var m map[string]any
		if err := yaml.Unmarshal(doc, &m); err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		if len(m) > 0 {
			objs = append(objs, &unstructured.Unstructured{Object: m})
		}
	}
}

// Key names an object as kind/namespace/name (namespace empty for cluster-scoped objects).
func Key(o *unstructured.Unstructured) string {
	return o.GetKind() + "/" + o.GetNamespace() + "/" + o.GetName()
}

// Index maps objects by Key.
func Index(objs []*unstructured.Unstructured) map[string]*unstructured.Unstructured {
	m := map[string]*unstructured.Unstructured{}
	for _, o := range objs {
		m[Key(o)] = o
	}
	return m
}

// Keys lists the keys of objs, sorted.
func Keys(objs []*unstructured.Unstructured) []string {
	var keys []string
	for _, o := range objs {
		keys = append(keys, Key(o))
	}
	sort.Strings(keys)
	return keys
}
