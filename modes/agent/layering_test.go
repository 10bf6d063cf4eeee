package agent

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestAgentNamesDataPlanesOnce: the loop reaches its data planes through
// dataplane.Dataplane only; modes/arp and modes/bgp are named in one file,
// where they are constructed.
func TestAgentNamesDataPlanesOnce(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") || f == "dataplanes.go" {
			continue
		}
		parsed, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range parsed.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			if path == "github.com/caplb/caplb/modes/arp" || path == "github.com/caplb/caplb/modes/bgp" {
				t.Errorf("%s imports %s: construct data planes in dataplanes.go and use dataplane.Dataplane elsewhere", f, path)
			}
		}
	}
}
