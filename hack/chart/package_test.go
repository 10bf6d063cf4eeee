package chart

import (
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"
	"helm.sh/helm/v3/pkg/chart/loader"
)

// TestPackage: the packaged chart carries the release version and registry, and the archive
// renders with the images from that registry pinned to that version.
func TestPackage(t *testing.T) {
	g := NewWithT(t)
	c := load(t)
	g.Expect(SetVersion(c, "0.2.0")).To(MatchError(ContainSubstring("leading v")))
	g.Expect(SetVersion(c, "v0.2.0")).To(Succeed())
	g.Expect(SetRegistry(c, "registry.example/caplb:v1")).To(MatchError(ContainSubstring("without a tag")))
	g.Expect(SetRegistry(c, "registry.example/caplb")).To(Succeed())
	path, err := Package(c, t.TempDir())
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(filepath.Base(path)).To(Equal("caplb-0.2.0.tgz"))
	pkg, err := loader.Load(path)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(pkg.Metadata.AppVersion).To(Equal("v0.2.0"))
	g.Expect(pkg.Schema).NotTo(BeEmpty(), "values.schema.json is packaged")
	objs, err := Render(pkg, ns, agentValues())
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(images(objs)).To(ConsistOf("registry.example/caplb/caplb-manager:v0.2.0", "registry.example/caplb/caplb-agent:v0.2.0"))
	args := managerArgs(t, objs)
	g.Expect(args).To(ContainElement("--agent-image=registry.example/caplb/caplb-agent:v0.2.0"))
	var raw string
	for _, f := range pkg.Raw {
		if f.Name == "values.yaml" {
			raw = string(f.Data)
		}
	}
	g.Expect(raw).To(ContainSubstring("  registry: registry.example/caplb\n"), "the packaged values.yaml names the registry")
	g.Expect(raw).To(ContainSubstring("# The images' registry"), "and keeps its comments")
}
