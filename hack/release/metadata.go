package release

import (
	"fmt"
	"os"
	"path/filepath"

	"k8s.io/apimachinery/pkg/util/version"
	clusterctlv1 "sigs.k8s.io/cluster-api/cmd/clusterctl/api/v1alpha3"
	"sigs.k8s.io/yaml"
)

// Contract is the CAPI contract caplb implements.
const Contract = "v1beta2"

func parseVersion(v string) (*version.Version, error) {
	if v == "" || v[0] != 'v' {
		return nil, fmt.Errorf("release: version %q must be a semantic version with a leading v, e.g. v0.1.0", v)
	}
	sv, err := version.ParseSemantic(v)
	if err != nil {
		return nil, fmt.Errorf("release: version %q: %w", v, err)
	}
	return sv, nil
}

// Metadata returns <root>/metadata.yaml after checking what clusterctl checks at install time:
// that it parses as clusterctl Metadata and that the release series of o.Version exists and
// implements contract v1beta2. clusterctl refuses a release whose version is in no series, so a
// forgotten metadata.yaml bump fails here rather than on a user's `clusterctl init`.
func Metadata(o Options) ([]byte, error) {
	sv, err := parseVersion(o.Version)
	if err != nil {
		return nil, err
	}
	path := filepath.Join(o.Root, MetadataFile)
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading clusterctl metadata: %w", err)
	}
	md := &clusterctlv1.Metadata{}
	if err := yaml.UnmarshalStrict(data, md); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if md.Kind != "Metadata" || md.APIVersion != clusterctlv1.GroupVersion.String() {
		return nil, fmt.Errorf("%s: want apiVersion %s kind Metadata, got %s %s",
			path, clusterctlv1.GroupVersion, md.APIVersion, md.Kind)
	}
	rs := md.GetReleaseSeriesForVersion(sv)
	if rs == nil {
		return nil, fmt.Errorf("%s: no releaseSeries for %s (major %d, minor %d): add one with contract %s",
			path, o.Version, sv.Major(), sv.Minor(), Contract)
	}
	if rs.Contract != Contract {
		return nil, fmt.Errorf("%s: release series %d.%d declares contract %q; caplb implements %s",
			path, rs.Major, rs.Minor, rs.Contract, Contract)
	}
	return data, nil
}

// WorkloadRBACFile is the release asset users apply in a workload cluster whose Nodes a
// LoadBalancer targets remotely (config/workload/rbac.yaml, as it is).
const WorkloadRBACFile = "workload-rbac.yaml"

// Write renders the release into dir: addon-components.yaml, its one-file rendering for
// kubectl (caplb-standalone.yaml), metadata.yaml, the agent
// manifests, the workload-cluster RBAC of remote Node targets and the clusterctl templates (templates/cluster-template-*.yaml and
// clusterclass-*.yaml, copied as they are: clusterctl substitutes their variables). It returns
// the paths written.
func Write(o Options, dir string) ([]string, error) {
	comps, err := Components(o)
	if err != nil {
		return nil, err
	}
	md, err := Metadata(o)
	if err != nil {
		return nil, err
	}
	agent, err := AgentManifests(o, os.ReadFile)
	if err != nil {
		return nil, err
	}
	standalone, err := StandaloneComponents(o)
	if err != nil {
		return nil, err
	}
	files := map[string][]byte{ComponentsFile: comps, MetadataFile: md, StandaloneFile: standalone}
	for k, v := range agent {
		files[k] = v
	}
	if files[WorkloadRBACFile], err = os.ReadFile(filepath.Join(o.Root, "config", "workload", "rbac.yaml")); err != nil {
		return nil, err
	}
	tmpl, err := Templates(o.Root)
	if err != nil {
		return nil, err
	}
	for k, v := range tmpl {
		files[k] = v
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var written []string
	for name, data := range files {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o644); err != nil {
			return nil, fmt.Errorf("writing %s: %w", p, err)
		}
		written = append(written, p)
	}
	return written, nil
}

// Templates reads the clusterctl templates under root/templates, by file name.
func Templates(root string) (map[string][]byte, error) {
	out := map[string][]byte{}
	for _, pattern := range []string{"cluster-template-*.yaml", "clusterclass-*.yaml"} {
		paths, err := filepath.Glob(filepath.Join(root, "templates", pattern))
		if err != nil {
			return nil, err
		}
		for _, p := range paths {
			data, err := os.ReadFile(p)
			if err != nil {
				return nil, fmt.Errorf("reading template: %w", err)
			}
			out[filepath.Base(p)] = data
		}
	}
	return out, nil
}
