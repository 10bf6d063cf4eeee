package providers

import (
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
)

const module = "github.com/caplb/caplb/"

// The manager side and the node side meet only through api/: providers/ renders what the nodes
// read with the schemas under api/, and never imports node-side code (modes/), so a node-side
// change cannot silently change what the manager writes. api/ imports nothing of ours but api/.
// Tests may reach further (e2e/envtest); the shipped code may not.
func TestLayering(t *testing.T) {
	for _, tc := range []struct {
		dir       string
		forbidden []string
	}{
		{"../providers", []string{"modes/", "controllers/", "cmd/", "e2e/"}},
		{"../api", []string{"modes/", "controllers/", "providers/", "cmd/", "e2e/"}},
		{"../controllers", []string{"modes/", "cmd/", "e2e/"}},
	} {
		t.Run(tc.dir, func(t *testing.T) {
			g := NewWithT(t)
			var seen int
			err := filepath.WalkDir(tc.dir, func(path string, d fs.DirEntry, err error) error {
				if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
					return err
				}
				f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
				if err != nil {
					return err
				}
				seen++
				for _, imp := range f.Imports {
					p, _ := strconv.Unquote(imp.Path.Value)
					for _, bad := range tc.forbidden {
						g.Expect(strings.HasPrefix(p, module+bad)).To(BeFalse(), "%s imports %s", path, p)
					}
				}
				return nil
			})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(seen).To(BeNumerically(">", 5), "the walk found the sources")
		})
	}
}
