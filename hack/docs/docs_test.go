package docs

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// external are mentions that name something outside this repository on purpose, keyed by
// "kind what" as a Finding reports them. Each must still be found in the docs: a stale entry
// fails the test, so the list cannot grow silently.
var external = map[string]string{
	"path internal/controllers/machine": "cluster-api's Machine controller, cited for its reconcile order",
	"flag --node-ip":                    "kubelet's, set by the samples",
	"flag --goaway-chance":              "kube-apiserver's",
	"flag --bind-address":               "kube-apiserver's",
	"flag --target-namespace":           "clusterctl's",
	"flag --master-ipv4-cidr":           "gcloud's, for a private GKE cluster",
	"flag --all":                        "skopeo copy's",
	"flag --config-file":                "kube-vip's",
	"flag --bgppeers":                   "kube-vip's, which its manager ignores",
	"flag --create-namespace":           "helm install's",
}

// TestDocsMentionOnlyWhatExists checks every make target, repository path, relative link,
// test name and caplb flag the user docs mention against the repository.
func TestDocsMentionOnlyWhatExists(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	repo, err := LoadRepo(root)
	if err != nil {
		t.Fatal(err)
	}
	files, err := Files(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 3 || len(repo.MakeTargets) == 0 || len(repo.TestFuncs) == 0 || len(repo.Flags) < 5 {
		t.Fatalf("read too little to check anything: %d docs, %d make targets, %d tests, %d flags",
			len(files), len(repo.MakeTargets), len(repo.TestFuncs), len(repo.Flags))
	}
	findings, err := Check(repo, files)
	if err != nil {
		t.Fatal(err)
	}
	used := map[string]bool{}
	for _, f := range findings {
		key := f.Kind + " " + f.What
		if _, ok := external[key]; ok {
			used[key] = true
			continue
		}
		t.Error(f)
	}
	for key := range external {
		if !used[key] {
			t.Errorf("allowlist entry %q matches no mention any more: remove it from external", key)
		}
	}
}

// TestCheckFindsEachKind runs the checker on a made-up repository whose one document gets each
// kind of mention right once and wrong once, so that a check that silently stops matching fails.
func TestCheckFindsEachKind(t *testing.T) {
	root := t.TempDir()
	write := func(p, s string) {
		t.Helper()
		p = filepath.Join(root, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("Makefile", "build: ## b\n\tgo build\nVAR := x\n")
	write("mk/x.mk", ".PHONY: demo\ndemo bench: build\n")
	write("modes/a/a.go", "package a\n")
	write("modes/a/a_test.go", "package a\nfunc TestGood(t *testing.T) { t.Run(\"Sub\", nil) }\n")
	write("cmd/x/main.go", `package main
func f() { fs.StringVar(&x, "good-flag", "", ""); fs.IntVarP(&v, "v", "v", 0, "") }
`)
	write("docs/other.md", "# Other page\n\n## A `code` heading\n")
	write("docs/page.md", strings.Join([]string{
		"# Page", // 1
		"Run `make build` and `make demo bench`.",   // 2
		"Not `make nosuch`.",                        // 3
		"See `modes/a/a.go` and `modes/a/gone.go`.", // 4
		"[ok](other.md#a-code-heading) [bad](x.md)", // 5
		"[bad anchor](other.md#nope)",               // 6
		"`go test -run TestGood/Sub ./modes/a/`",    // 7
		"`TestMissing` and `-run TestGood/NoSub`",   // 8
		"`caplb manager --good-flag --bad-flag`",    // 9
		"```sh",                                     // 10
		"make wrong # make comment",                 // 11
		"```",                                       // 12
		"`--zap-log-level` and `--other-flag`; `clusterctl delete --addon caplb --include-crd`", // 13
		"A span that wraps `make",      // 14
		"gone2` onto the next line.",   // 15
		"`modes/b.Func` `_out/x.json`", // 16
	}, "\n"))
	repo, err := LoadRepo(root)
	if err != nil {
		t.Fatal(err)
	}
	files, err := Files(root)
	if err != nil {
		t.Fatal(err)
	}
	findings, err := Check(repo, files)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range findings {
		got = append(got, f.String())
	}
	want := []string{
		`docs/page.md:3: make "nosuch"`,
		`docs/page.md:4: path "modes/a/gone.go"`,
		`docs/page.md:5: link "x.md"`,
		`docs/page.md:6: anchor "other.md#nope"`,
		`docs/page.md:8: test "TestMissing"`,
		`docs/page.md:8: test "TestGood/NoSub"`,
		`docs/page.md:9: flag "--bad-flag"`,
		`docs/page.md:11: make "wrong"`,
		`docs/page.md:13: flag "--other-flag"`,
		`docs/page.md:14: make "gone2"`,
		`docs/page.md:16: path "modes/b"`,
	}
	if len(got) != len(want) {
		t.Errorf("got %d findings, want %d:\n%s", len(got), len(want), strings.Join(got, "\n"))
	}
	for _, w := range want {
		found := false
		for _, g := range got {
			found = found || strings.HasPrefix(g, w+" ")
		}
		if !found {
			t.Errorf("missing finding %s; got:\n%s", w, strings.Join(got, "\n"))
		}
	}
}
