package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/caplb/caplb/cmd/internal/version"
)

// --version prints the program, the version and the commit, and runs nothing else.
func TestVersionFlag(t *testing.T) {
	for _, args := range [][]string{{"--version"}} {
		var out bytes.Buffer
		root := newRootCommand()
		root.SetOut(&out)
		root.SetArgs(args)
		if err := root.Execute(); err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		info := version.Get()
		want := "caplb " + info.Version + " (commit " + info.Commit + ","
		if !strings.HasPrefix(out.String(), want) {
			t.Errorf("%v printed %q, want it to start with %q", args, out.String(), want)
		}
	}
}
