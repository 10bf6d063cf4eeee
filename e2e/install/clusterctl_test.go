package install

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	clusterctlv1 "sigs.k8s.io/cluster-api/cmd/clusterctl/api/v1alpha3"
	"sigs.k8s.io/cluster-api/cmd/clusterctl/client/cluster"
	"sigs.k8s.io/cluster-api/cmd/clusterctl/client/config"
	"sigs.k8s.io/cluster-api/cmd/clusterctl/client/repository"
	"sigs.k8s.io/cluster-api/util/kubeconfig"

	"github.com/caplb/caplb/e2e/envtest"
	"github.com/caplb/caplb/e2e/harness"
	"github.com/caplb/caplb/hack/release"
)

// The release under test: a version in metadata.yaml's series and an image that only the
// release's default can have produced.
const (
	releaseVersion = "v0.1.0"
	managerImage   = "registry.example.test/caplb/caplb-manager:" + releaseVersion
	agentImage     = "registry.example.test/caplb/caplb-agent:" + releaseVersion
)

// writeLocalRepository renders the release (the same code as `make release`) into the layout of
// a clusterctl local repository, {base}/addon-caplb/{version}/, as docs/install.md tells an
// air-gapped user to lay it out, and returns the clusterctl.yaml that points at it.
func writeLocalRepository(t *testing.T, vars map[string]string) (clusterctlYAML string) {
	t.Helper()
	root, err := envtest.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	base := t.TempDir()
	dir := filepath.Join(base, release.ProviderLabel, releaseVersion)
	if _, err := release.Write(release.Options{
		Root: root, Version: releaseVersion, ManagerImage: managerImage, AgentImage: agentImage,
	}, dir); err != nil {
		t.Fatalf("rendering the release: %v", err)
	}
	cfg := fmt.Sprintf("providers:\n- name: %s\n  type: AddonProvider\n  url: file://%s\n",
		release.ProviderName, filepath.Join(dir, release.ComponentsFile))
	for k, v := range vars {
		cfg += fmt.Sprintf("%s: %q\n", k, v)
	}
	path := filepath.Join(base, "clusterctl.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// clusterctlComponents reads the caplb provider from the clusterctl.yaml the way `clusterctl init
// --addon caplb --target-namespace ns` does: the provider entry, its repository, the metadata of
// the version, and the components with variables substituted by clusterctl's YAML processor and
// every namespaced object moved into the target namespace.
func clusterctlComponents(ctx context.Context, t *testing.T, clusterctlYAML, targetNamespace string) (config.Client, repository.Components) {
	t.Helper()
	cfg, err := config.New(ctx, clusterctlYAML)
	if err != nil {
		t.Fatalf("reading %s: %v", clusterctlYAML, err)
	}
	provider, err := cfg.Providers().Get(release.ProviderName, clusterctlv1.AddonProviderType)
	if err != nil {
		t.Fatalf("clusterctl does not know the caplb add-on provider: %v", err)
	}
	if provider.ManifestLabel() != release.ProviderLabel {
		t.Fatalf("clusterctl's manifest label for caplb is %q, the release writes %q", provider.ManifestLabel(), release.ProviderLabel)
	}
	repo, err := repository.New(ctx, provider, cfg)
	if err != nil {
		t.Fatalf("opening the local repository: %v", err)
	}
	md, err := repo.Metadata(releaseVersion).Get(ctx)
	if err != nil {
		t.Fatalf("clusterctl rejects metadata.yaml: %v", err)
	}
	rs := md.GetReleaseSeriesForContract(release.Contract)
	if rs == nil {
		t.Fatalf("metadata.yaml has no release series for contract %s: %+v", release.Contract, md.ReleaseSeries)
	}
	comps, err := repo.Components().Get(ctx, repository.ComponentsOptions{
		Version: releaseVersion, TargetNamespace: targetNamespace,
	})
	if err != nil {
		t.Fatalf("clusterctl rejects addon-components.yaml: %v", err)
	}
	return cfg, comps
}

// installComponents creates the objects with clusterctl's own component client, as `clusterctl
// init` does after processing them.
func installComponents(ctx context.Context, t *testing.T, env *harness.Env, cfg config.Client, objs []unstructured.Unstructured) {
	t.Helper()
	kc := kubeconfig.FromEnvTestConfig(env.Config, &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Name: "management"}})
	path := filepath.Join(t.TempDir(), "admin.kubeconfig")
	if err := os.WriteFile(path, kc, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := cluster.New(cluster.Kubeconfig{Path: path}, cfg).ProviderComponents().Create(ctx, objs); err != nil {
		t.Fatalf("clusterctl creating the caplb components: %v", err)
	}
}
