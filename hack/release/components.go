// Package release renders caplb's clusterctl provider release: addon-components.yaml (kustomize's
// Go API over config/default, so no kubectl is needed) and metadata.yaml. `make release` runs it
// through hack/mkrelease; the install test (e2e/install) renders the same bytes and installs them
// the way clusterctl does.
package release

import (
	"bytes"
	"fmt"
	"path/filepath"
	"strings"

	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/api/resmap"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	kyaml "sigs.k8s.io/kustomize/kyaml/yaml"
)

const (
	// ProviderName is the name clusterctl knows caplb by (`clusterctl init --addon caplb`).
	ProviderName = "caplb"
	// ProviderLabel is clusterctl's manifest label for an add-on provider named caplb: the
	// directory name of a local repository and the cluster.x-k8s.io/provider label.
	ProviderLabel = "addon-caplb"
	// ComponentsFile and MetadataFile are the file names clusterctl looks for in a release.
	ComponentsFile = "addon-components.yaml"
	MetadataFile   = "metadata.yaml"
	// ManagerContainer is the controller container's name; clusterctl expects "manager".
	ManagerContainer = "manager"
	// ManagerImageVariable is the clusterctl variable that overrides the manager image.
	ManagerImageVariable = "CAPLB_MANAGER_IMAGE"
	// AgentImageVariable overrides the node agent image the manager renders into bootstrap
	// Secrets (--agent-image).
	AgentImageVariable = "CAPLB_AGENT_IMAGE"
)

// Options says what to render.
type Options struct {
	// Root is the repository root (config/ and metadata.yaml live there).
	Root string
	// Version is the release version, e.g. v0.1.0; its major.minor must be a release series
	// of metadata.yaml.
	Version string
	// ManagerImage is the default manager image reference (registry/caplb-manager:tag).
	ManagerImage string
	// AgentImage is the agent image reference written into the agent manifests.
	AgentImage string
}

func (o Options) validate() error {
	if o.Root == "" {
		return fmt.Errorf("release: Root (the repository root) is empty")
	}
	if _, err := parseVersion(o.Version); err != nil {
		return err
	}
	for name, img := range map[string]string{"ManagerImage": o.ManagerImage, "AgentImage": o.AgentImage} {
		if img == "" || strings.ContainsAny(img, " ${}") || !strings.Contains(img, ":") {
			return fmt.Errorf("release: %s %q must be a plain image reference with a tag, e.g. ghcr.io/caplb/caplb-manager:v0.1.0", name, img)
		}
	}
	return nil
}

// Components renders config/default into the clusterctl components YAML: kustomize's output,
// with the manager image set to ${CAPLB_MANAGER_IMAGE:=<o.ManagerImage>}. It checks what
// clusterctl relies on: exactly one Namespace and a Deployment whose controller container is
// named "manager".
func Components(o Options) ([]byte, error) {
	return render(o, "default")
}

// render builds config/<kustomization> as Components describes.
func render(o Options, kustomization string) ([]byte, error) {
	if err := o.validate(); err != nil {
		return nil, err
	}
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	dir := filepath.Join(o.Root, "config", kustomization)
	rm, err := k.Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		return nil, fmt.Errorf("kustomize build %s: %w", dir, err)
	}
	if err := setManagerImage(rm, fmt.Sprintf("${%s:=%s}", ManagerImageVariable, o.ManagerImage)); err != nil {
		return nil, err
	}
	out, err := rm.AsYaml()
	if err != nil {
		return nil, fmt.Errorf("serialising components: %w", err)
	}
	placeholder := []byte("${" + AgentImageVariable + ":=caplb-agent}")
	if n := bytes.Count(out, placeholder); n != 1 {
		return nil, fmt.Errorf("config/manager: want exactly one --agent-image=%s argument, found %d", placeholder, n)
	}
	out = bytes.Replace(out, placeholder, []byte(fmt.Sprintf("${%s:=%s}", AgentImageVariable, o.AgentImage)), 1)
	header := fmt.Sprintf("# caplb %s: clusterctl add-on provider components (rendered by `make release` from config/default).\n"+
		"# Install: clusterctl init --addon %s (docs/install.md; the webhook's certificate needs cert-manager, which clusterctl installs). Variables: %s, %s, CAPLB_CONCURRENCY, CAPLB_LOG_LEVEL.\n", o.Version, ProviderName, ManagerImageVariable, AgentImageVariable)
	return append([]byte(header), out...), nil
}

// setManagerImage finds the single Namespace and the manager Deployment and sets the image.
func setManagerImage(rm resmap.ResMap, image string) error {
	var namespaces, managers int
	for _, r := range rm.Resources() {
		switch r.GetKind() {
		case "Namespace":
			namespaces++
		case "Deployment":
			containers, err := r.Pipe(kyaml.Lookup("spec", "template", "spec", "containers"))
			if err != nil || containers == nil {
				return fmt.Errorf("Deployment %s has no containers: %v", r.GetName(), err)
			}
			c, err := containers.Pipe(kyaml.MatchElement("name", ManagerContainer))
			if err != nil {
				return fmt.Errorf("Deployment %s: %w", r.GetName(), err)
			}
			if c == nil {
				continue
			}
			managers++
			if err := c.PipeE(kyaml.SetField("image", kyaml.NewStringRNode(image))); err != nil {
				return fmt.Errorf("setting the manager image: %w", err)
			}
		}
	}
	if namespaces != 1 {
		return fmt.Errorf("config/default renders %d Namespaces; clusterctl needs exactly one", namespaces)
	}
	if managers != 1 {
		return fmt.Errorf("config/default renders %d Deployments with a container named %q; clusterctl needs exactly one",
			managers, ManagerContainer)
	}
	return nil
}

// AgentManifests returns the agent's Kubernetes manifests (config/agent/daemonset.yaml and
// static-pod.yaml) with their image set to o.AgentImage, keyed by release file name.
func AgentManifests(o Options, read func(string) ([]byte, error)) (map[string][]byte, error) {
	if err := o.validate(); err != nil {
		return nil, err
	}
	out := map[string][]byte{}
	for src, dst := range map[string]string{"daemonset.yaml": "agent-daemonset.yaml", "static-pod.yaml": "agent-static-pod.yaml"} {
		path := filepath.Join(o.Root, "config", "agent", src)
		data, err := read(path)
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", path, err)
		}
		fixed, n := replaceImages(data, "caplb-agent", o.AgentImage)
		if n == 0 {
			return nil, fmt.Errorf("%s names no caplb-agent image", path)
		}
		out[dst] = fixed
	}
	return out, nil
}

// replaceImages rewrites every `image:` line whose repository ends in /<name> (or is <name>),
// keeping the file's comments and layout, which a YAML round trip would not.
func replaceImages(data []byte, name, image string) ([]byte, int) {
	lines := bytes.Split(data, []byte("\n"))
	n := 0
	for i, l := range lines {
		s := string(l)
		key := strings.Index(s, "image:")
		if key < 0 || strings.TrimSpace(s[:key]) != "" && strings.TrimSpace(s[:key]) != "-" {
			continue
		}
		ref := strings.TrimSpace(s[key+len("image:"):])
		repo := ref
		if j := strings.LastIndex(ref, ":"); j > strings.LastIndex(ref, "/") {
			repo = ref[:j]
		}
		if repo != name && !strings.HasSuffix(repo, "/"+name) {
			continue
		}
		lines[i] = []byte(s[:key] + "image: " + image)
		n++
	}
	return bytes.Join(lines, []byte("\n")), n
}
