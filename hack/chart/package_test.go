package chart

import (
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"
	"helm.sh/helm/v3/pkg/chart/loader"
)

// TestPackage: the packaged chart carries the release version, and the archive renders with the
// images pinned to that version.
func TestPackage(t *testing.T) {
	g := NewWithT(t)
	c := load(t)
	g.Expect(SetVersion(c, "0.2.0")).To(MatchError(ContainSubstring("leading v")))
	g.Expect(SetVersion(c, "v0.2.0")).To(Succeed())
	path, err := Package(c, t.TempDir())
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(filepath.Base(path)).To(Equal("caplb-0.2.0.tgz"))
	pkg, err := loader.Load(path)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(pkg.Metadata.AppVersion).To(Equal("v0.2.0"))
	g.Expect(pkg.Schema).NotTo(BeEmpty(), "values.schema.json is packaged")
	objs, err := Render(pkg, ns, agentValues())
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(images(objs)).To(ConsistOf("ghcr.io/caplb/caplb-manager:v0.2.0", "ghcr.io/caplb/caplb-agent:v0.2.0"))
	args := managerArgs(t, objs)
	g.Expect(args).To(ContainElement("--agent-image=ghcr.io/caplb/caplb-agent:v0.2.0"))
}
