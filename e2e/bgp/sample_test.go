//go:build linux

package bgp_test

import (
	"os"
	"path/filepath"
	"testing"

	agentv1 "github.com/caplb/caplb/api/agent/v1alpha1"

	. "github.com/onsi/gomega"

	"github.com/caplb/caplb/e2e/lab"
)

// The shipped sample must stay a valid agent configuration in bgp mode.
func TestSampleBGPConfigParses(t *testing.T) {
	g := NewWithT(t)
	root, err := lab.ModuleRoot()
	g.Expect(err).NotTo(HaveOccurred())
	b, err := os.ReadFile(filepath.Join(root, "config", "agent", "agent-bgp.yaml"))
	g.Expect(err).NotTo(HaveOccurred())
	cfg, err := agentv1.Parse(b)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(cfg.Mode).To(Equal(agentv1.ModeBGP))
	g.Expect(cfg.BGP).NotTo(BeNil())
	g.Expect(cfg.BGP.Peers).To(HaveLen(1))
	g.Expect(cfg.BGP.Peers[0].HoldTime.Duration.String()).To(Equal("9s"))
}
