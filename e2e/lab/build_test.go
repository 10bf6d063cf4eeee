package lab

import (
	"os"
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"
)

// TestSharedBuild: with SharedBinDirEnv set, a binary is built once and every later call gets
// the same file (make test's labs share one build).
func TestSharedBuild(t *testing.T) {
	g := NewWithT(t)
	shared := t.TempDir()
	t.Setenv(SharedBinDirEnv, shared)
	out := t.TempDir()
	g.Expect(BuildBinary("./e2e/lab/standin", filepath.Join(out, "a"))).To(Succeed())
	entries, err := os.ReadDir(shared)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(entries).To(HaveLen(1), "one cached binary")
	cached := filepath.Join(shared, entries[0].Name())
	before, err := os.Stat(cached)
	g.Expect(err).NotTo(HaveOccurred())

	g.Expect(BuildBinary("./e2e/lab/standin", filepath.Join(out, "b"))).To(Succeed())
	after, err := os.Stat(cached)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(after.ModTime()).To(Equal(before.ModTime()), "not built again")
	b, err := os.Stat(filepath.Join(out, "b"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(os.SameFile(b, after)).To(BeTrue(), "the second caller got the cached file (a link)")
	g.Expect(b.Mode().Perm()&0o100).NotTo(BeZero(), "executable")
}
