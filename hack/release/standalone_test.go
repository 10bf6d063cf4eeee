package release

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	"sigs.k8s.io/cluster-api/cmd/clusterctl/client/yamlprocessor"
	utilyaml "sigs.k8s.io/cluster-api/util/yaml"
)

// TestStandalone: the one-file install is exactly what clusterctl would apply with every
// variable at its default, with no variable left for kubectl to apply as text.
func TestStandalone(t *testing.T) {
	g := NewWithT(t)
	o := testOptions(t)
	comps, err := render(o, "standalone")
	g.Expect(err).NotTo(HaveOccurred())
	out, err := StandaloneComponents(o)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(out)).NotTo(ContainSubstring("${"))
	g.Expect(string(out)).To(HavePrefix("# caplb v0.1.0: every component in one file"))

	byClusterctl, err := yamlprocessor.NewSimpleProcessor().Process(comps, func(string) (string, error) { return "", os.ErrNotExist })
	g.Expect(err).NotTo(HaveOccurred())
	want, err := utilyaml.ToUnstructured(byClusterctl)
	g.Expect(err).NotTo(HaveOccurred())
	got, err := utilyaml.ToUnstructured(out)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got).To(Equal(want), "the same objects clusterctl would apply with the defaults")
	g.Expect(string(out)).To(ContainSubstring("image: " + o.ManagerImage))
	g.Expect(string(out)).To(ContainSubstring("--agent-image=" + o.AgentImage))

	// Without CAPI the manager serves its own cluster's Nodes: the node-targets component is in.
	g.Expect(string(out)).To(ContainSubstring("--node-targets-namespace=caplb-system"))
	nodes := false
	for _, u := range got {
		if u.GetKind() == "ClusterRole" && strings.Contains(fmt.Sprint(u.Object["rules"]), "nodes") {
			nodes = true
		}
	}
	g.Expect(nodes).To(BeTrue(), "a ClusterRole grants the Node verbs")
	// And everything of the clusterctl components is in it too.
	def, err := Components(o)
	g.Expect(err).NotTo(HaveOccurred())
	defObjs, err := utilyaml.ToUnstructured(def)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(len(got)).To(BeNumerically(">", len(defObjs)))
}

func TestStandaloneRefusesAVariableWithoutDefault(t *testing.T) {
	g := NewWithT(t)
	_, err := Standalone([]byte("a: ${GOOD:=1}\nb: ${NO_DEFAULT}\n"), "v0.1.0")
	g.Expect(err).To(MatchError(ContainSubstring("NO_DEFAULT")))
	g.Expect(err).NotTo(MatchError(ContainSubstring("GOOD")))
}

// TestWriteChecksums: checksums.txt covers every asset Write produced, in sha256sum's format.
func TestWriteChecksums(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	written, err := Write(testOptions(t), dir)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(written).To(ContainElement(filepath.Join(dir, StandaloneFile)))
	p, err := WriteChecksums(dir)
	g.Expect(err).NotTo(HaveOccurred())
	f, err := os.Open(p)
	g.Expect(err).NotTo(HaveOccurred())
	defer f.Close()
	seen := map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		sum, name, ok := strings.Cut(sc.Text(), "  ")
		g.Expect(ok).To(BeTrue(), "line %q", sc.Text())
		data, err := os.ReadFile(filepath.Join(dir, name))
		g.Expect(err).NotTo(HaveOccurred())
		h := sha256.Sum256(data)
		g.Expect(sum).To(Equal(hex.EncodeToString(h[:])), name)
		seen[filepath.Join(dir, name)] = true
	}
	for _, w := range written {
		g.Expect(seen).To(HaveKey(w))
	}
	g.Expect(seen).NotTo(HaveKey(p))

	_, err = WriteChecksums(t.TempDir())
	g.Expect(err).To(MatchError(ContainSubstring("make release")))
}
