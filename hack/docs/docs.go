// Package docs checks that the user documentation names only things that exist: make targets,
// repository paths, relative links and their anchors, test names and the caplb binaries' flags.
// Docs drift silently when code moves; this turns each drift into a failing test that names the
// file and line. The extraction is deliberately simple (backticked spans, fenced code lines and
// link targets) so that it stays predictable: what it cannot read, it does not check.
package docs

import (
	"bufio"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"unicode"
)

// Finding is one thing a document mentions that the repository lacks.
type Finding struct {
	File string // relative to the repository root, slash-separated
	Line int
	Kind string // "make", "path", "link", "anchor", "test", "flag"
	What string // the mention as written (cleaned)
}

func (f Finding) String() string {
	return fmt.Sprintf("%s:%d: %s %q %s", f.File, f.Line, f.Kind, f.What, kindHelp[f.Kind])
}

var kindHelp = map[string]string{
	"make":   "is not a target of Makefile or mk/*.mk",
	"path":   "does not exist in the repository (nor relative to the document)",
	"link":   "is a relative link to nothing",
	"anchor": "is a link to a heading that does not exist",
	"test":   "is not a Test/Benchmark/Fuzz func (nor, after a /, a string) in any _test.go file",
	"flag":   "is not a flag of caplb or caplb-agent (cmd/, modes/*/command.go)",
}

// Repo is what the documents are checked against, read once from the repository.
type Repo struct {
	Root        string
	MakeTargets map[string]bool
	TopLevel    map[string]bool // names directly under Root: a path starting with one is ours
	TestFuncs   []string        // Test*, Benchmark*, Fuzz* funcs declared in _test.go files
	TestSources string          // every _test.go file, concatenated: subtest names are strings in it
	Flags       map[string]bool // long flags of the caplb binaries, without "--"
}

// skipDirs are never walked: VCS data, build outputs, vendored code.
var skipDirs = map[string]bool{".git": true, "_out": true, "vendor": true, "node_modules": true}

// LoadRepo reads make targets, top-level names, test funcs and flags under root.
func LoadRepo(root string) (*Repo, error) {
	r := &Repo{Root: root, MakeTargets: map[string]bool{}, TopLevel: map[string]bool{}, Flags: map[string]bool{}}
	entries, err := os.ReadDir(root)
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), ".") && !skipDirs[e.Name()] {
			r.TopLevel[e.Name()] = true
		}
	}
	makefiles, _ := filepath.Glob(filepath.Join(root, "mk", "*.mk"))
	makefiles = append(makefiles, filepath.Join(root, "Makefile"))
	for _, mf := range makefiles {
		if err := r.readMakefile(mf); err != nil {
			return nil, err
		}
	}
	var tests strings.Builder
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p != root && (skipDirs[d.Name()] || strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") {
			return nil
		}
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		isTest := strings.HasSuffix(p, "_test.go")
		isFlagSource := !isTest && (strings.HasPrefix(rel, "cmd/") || (strings.HasPrefix(rel, "modes/") && strings.HasSuffix(rel, "/command.go")))
		if !isTest && !isFlagSource {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if isTest {
			tests.Write(b)
			tests.WriteByte('\n')
			for _, m := range testFuncRE.FindAllSubmatch(b, -1) {
				r.TestFuncs = append(r.TestFuncs, string(m[1]))
			}
		} else {
			for _, m := range flagDefRE.FindAllSubmatch(b, -1) {
				r.Flags[string(m[1])] = true
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	r.TestSources = tests.String()
	// Registered by libraries rather than by a *Var call in our code: cobra's --help and
	// --version, controller-runtime's --kubeconfig (ctrlconfig.RegisterFlags), CAPI's util/flags
	// (capiflags.AddManagerOptions in cmd/caplb/manager.go).
	for _, f := range []string{"help", "version", "kubeconfig",
		"diagnostics-address", "insecure-diagnostics", "tls-min-version", "tls-cipher-suites", "tls-curve-preferences"} {
		r.Flags[f] = true
	}
	return r, nil
}

var (
	testFuncRE = regexp.MustCompile(`(?m)^func ((?:Test|Benchmark|Fuzz)\w*)\(`)
	// fs.StringVar(&x, "name", ...), IntVarP(&x, "name", "n", ...), fs.Bool("name", ...).
	flagDefRE = regexp.MustCompile(`\b(?:String|Bool|Int|Int64|Uint|Float32|Float64|Duration|StringSlice|StringArray)(?:Var)?P?\(\s*(?:&[^,]+,\s*)?"([a-z][a-z0-9-]*)"`)
	// A rule line: "a b: deps" but not "A := x", "A ?= x", a recipe line or a comment.
	makeRuleRE = regexp.MustCompile(`^([A-Za-z0-9_.][A-Za-z0-9_. -]*?)\s*::?(?:[^=]|$)`)
)

func (r *Repo) readMakefile(p string) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		m := makeRuleRE.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		for _, t := range strings.Fields(m[1]) {
			if !strings.HasPrefix(t, ".") {
				r.MakeTargets[t] = true
			}
		}
	}
	return sc.Err()
}

// Files lists the documents to check: README.md, CONTRIBUTING.md and every .md under docs/,
// relative to root and slash-separated.
func Files(root string) ([]string, error) {
	var out []string
	for _, f := range []string{"README.md", "CONTRIBUTING.md"} {
		if _, err := os.Stat(filepath.Join(root, f)); err == nil {
			out = append(out, f)
		}
	}
	err := filepath.WalkDir(filepath.Join(root, "docs"), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(p, ".md") {
			rel, _ := filepath.Rel(root, p)
			out = append(out, filepath.ToSlash(rel))
		}
		return nil
	})
	sort.Strings(out)
	return out, err
}

// mention is a piece of a document to check: a backticked span, a fenced code line or a link
// target, with the line it starts on.
type mention struct {
	line int
	text string
	link bool // a link target, not code
}

var (
	fenceRE = regexp.MustCompile("^\\s*(```|~~~)")
	// Inline code: double-backtick spans first (they may hold single backticks).
	codeSpanRE = regexp.MustCompile("``[^`](?:[^`]|`[^`])*?``|`[^`]+`")
	linkRE     = regexp.MustCompile(`\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)`)
	refLinkRE  = regexp.MustCompile(`(?m)^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)`)
	headingRE  = regexp.MustCompile(`^\s{0,3}#{1,6}\s+(.*?)\s*#*\s*$`)
	htmlIDRE   = regexp.MustCompile(`<a\s+(?:name|id)="([^"]+)"`)
)

// parsed is one document split into what is checked, plus its anchors.
type parsed struct {
	mentions []mention
	anchors  map[string]bool
}

// parse splits a Markdown document into code lines, inline code spans and link targets.
// Prose is joined across lines (a span or link may wrap), keeping each piece's first line.
func parse(content string) parsed {
	p := parsed{anchors: map[string]bool{}}
	var prose strings.Builder
	var lineAt []int // lineAt[i]: line of prose byte i
	inFence := false
	slugs := map[string]int{}
	for i, l := range strings.Split(content, "\n") {
		n := i + 1
		if fenceRE.MatchString(l) {
			inFence = !inFence
			prose.WriteString("\n")
			lineAt = append(lineAt, n)
			continue
		}
		if inFence {
			p.mentions = append(p.mentions, mention{line: n, text: l})
			prose.WriteString("\n")
			lineAt = append(lineAt, n)
			continue
		}
		if m := headingRE.FindStringSubmatch(l); m != nil {
			s := slug(m[1])
			if c := slugs[s]; c > 0 {
				p.anchors[fmt.Sprintf("%s-%d", s, c)] = true
			} else {
				p.anchors[s] = true
			}
			slugs[s]++
		}
		for _, m := range htmlIDRE.FindAllStringSubmatch(l, -1) {
			p.anchors[m[1]] = true
		}
		prose.WriteString(l + "\n")
		for j := 0; j <= len(l); j++ {
			lineAt = append(lineAt, n)
		}
	}
	text := prose.String()
	// Code spans, then blank them out so that a link inside code is not taken as a link.
	blanked := []byte(text)
	for _, loc := range codeSpanRE.FindAllStringIndex(text, -1) {
		span := strings.Trim(text[loc[0]:loc[1]], "`")
		p.mentions = append(p.mentions, mention{line: lineAt[loc[0]], text: strings.ReplaceAll(span, "\n", " ")})
		for k := loc[0]; k < loc[1]; k++ {
			if blanked[k] != '\n' {
				blanked[k] = ' '
			}
		}
	}
	for _, re := range []*regexp.Regexp{linkRE, refLinkRE} {
		for _, m := range re.FindAllSubmatchIndex(blanked, -1) {
			p.mentions = append(p.mentions, mention{line: lineAt[m[2]], text: string(blanked[m[2]:m[3]]), link: true})
		}
	}
	sort.SliceStable(p.mentions, func(i, j int) bool { return p.mentions[i].line < p.mentions[j].line })
	return p
}

// slug is GitHub's anchor for a heading: inline markup dropped, lower case, punctuation removed,
// spaces to hyphens.
func slug(h string) string {
	h = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`).ReplaceAllString(h, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(h) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// Check returns what the documents (paths relative to r.Root) mention that r lacks.
func Check(r *Repo, files []string) ([]Finding, error) {
	docs := map[string]parsed{}
	read := func(f string) (parsed, error) {
		if d, ok := docs[f]; ok {
			return d, nil
		}
		b, err := os.ReadFile(filepath.Join(r.Root, filepath.FromSlash(f)))
		if err != nil {
			return parsed{}, err
		}
		d := parse(string(b))
		docs[f] = d
		return d, nil
	}
	var out []Finding
	for _, f := range files {
		d, err := read(f)
		if err != nil {
			return nil, err
		}
		for _, m := range d.mentions {
			add := func(kind, what string) { out = append(out, Finding{File: f, Line: m.line, Kind: kind, What: what}) }
			if m.link {
				kind, what := r.checkLink(f, m.text, read)
				if kind != "" {
					add(kind, what)
				}
				continue
			}
			for _, t := range makeTargets(m.text) {
				if !r.MakeTargets[t] {
					add("make", t)
				}
			}
			for _, p := range repoPaths(m.text, r.TopLevel) {
				if !r.exists(f, p) {
					add("path", p)
				}
			}
			for _, t := range testNames(m.text) {
				if !r.hasTest(t) {
					add("test", t)
				}
			}
			for _, fl := range caplbFlags(m.text) {
				if !r.Flags[fl] && !strings.HasPrefix(fl, "zap-") { // zap's flags: zap.Options.BindFlags
					add("flag", "--"+fl)
				}
			}
		}
	}
	return out, nil
}

// exists reports whether p names a file or directory from the root or from doc's directory.
func (r *Repo) exists(doc, p string) bool {
	for _, base := range []string{"", path.Dir(doc)} {
		if _, err := os.Stat(filepath.Join(r.Root, filepath.FromSlash(path.Join(base, p)))); err == nil {
			return true
		}
	}
	return false
}

// checkLink checks a link target of doc: a relative file must exist and an anchor into a
// Markdown file must name one of its headings.
func (r *Repo) checkLink(doc, target string, read func(string) (parsed, error)) (kind, what string) {
	if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
		return "", ""
	}
	file, anchor, _ := strings.Cut(target, "#")
	file, _, _ = strings.Cut(file, "?")
	rel := doc
	if file != "" {
		if strings.HasPrefix(file, "/") {
			rel = strings.TrimPrefix(path.Clean(file), "/")
		} else {
			rel = path.Clean(path.Join(path.Dir(doc), file))
		}
		if strings.HasPrefix(rel, "../") {
			return "link", target // outside the repository: GitHub renders it broken
		}
		if _, err := os.Stat(filepath.Join(r.Root, filepath.FromSlash(rel))); err != nil {
			return "link", target
		}
	}
	if anchor == "" || !strings.HasSuffix(rel, ".md") {
		return "", ""
	}
	d, err := read(rel)
	if err != nil || !d.anchors[strings.ToLower(anchor)] {
		return "anchor", target
	}
	return "", ""
}

func (r *Repo) hasTest(name string) bool {
	top, sub, _ := strings.Cut(name, "/")
	re, err := regexp.Compile(top)
	if err != nil {
		return true // not a pattern we can judge
	}
	found := false
	for _, f := range r.TestFuncs {
		if re.MatchString(f) {
			found = true
			break
		}
	}
	if !found {
		return false
	}
	// Subtests are named by strings (t.Run("Name", ...)); a plain name must appear in a test file.
	for _, s := range strings.Split(sub, "/") {
		if s != "" && plainNameRE.MatchString(s) && !strings.Contains(r.TestSources, s) {
			return false
		}
	}
	return true
}

var plainNameRE = regexp.MustCompile(`^[A-Za-z0-9_]+$`)

var makeRE = regexp.MustCompile(`(?:^|[\s;&|(])make\s+(.*)`)

// makeTargets returns the targets of every `make ...` command in s: the words after make up to
// the first that is neither a target nor a VAR=value or -option (a pipe, a comment, prose).
func makeTargets(s string) []string {
	if i := strings.Index(s, " #"); i >= 0 {
		s = s[:i] // a shell comment: prose, not a command
	}
	if strings.HasPrefix(strings.TrimSpace(s), "#") {
		return nil
	}
	var out []string
	for _, m := range makeRE.FindAllStringSubmatch(s, -1) {
		for _, w := range strings.Fields(m[1]) {
			if strings.Contains(w, "=") || strings.HasPrefix(w, "-") {
				continue
			}
			w = strings.TrimRight(w, ",.;:)")
			if !targetWordRE.MatchString(w) {
				break
			}
			out = append(out, w)
		}
	}
	return out
}

var targetWordRE = regexp.MustCompile(`^[a-z][a-z0-9_-]*$`)

// pathExts are file kinds worth checking even when the path does not start at a top-level name
// of the repository (then it may be relative to the document).
var pathExts = map[string]bool{".go": true, ".md": true, ".yaml": true, ".yml": true, ".mk": true, ".json": true, ".sh": true}

var pathWordRE = regexp.MustCompile(`^[A-Za-z0-9_.@+-]+(?:/[A-Za-z0-9_.@+-]+)*/?$`)

// repoPaths returns the words of s that look like paths in this repository: relative, with a
// slash, and starting with a top-level name of the repository or ending in a known extension.
// Placeholders (<x>, $X, *, {a,b}, ...) and absolute paths are not checked.
func repoPaths(s string, top map[string]bool) []string {
	var out []string
	for _, w := range strings.FieldsFunc(s, func(r rune) bool {
		return unicode.IsSpace(r) || r == '=' || r == '"' || r == '\'' || r == '`' || r == ','
	}) {
		w = strings.TrimLeft(w, "([")
		w = strings.TrimRight(w, ".,;:)]")
		w, _, _ = strings.Cut(w, "#")
		w = strings.TrimSuffix(w, "/...")
		if i := strings.LastIndex(w, ":"); i >= 0 && plainNumberRE.MatchString(w[i+1:]) {
			w = w[:i] // file.go:123
		}
		w = strings.TrimPrefix(w, "./")
		if m := goIdentRE.FindStringSubmatch(w); m != nil {
			w = m[1] // providers/vip.RenderAgentConfig: the package's directory
		}
		if strings.HasPrefix(w, "_out/") {
			continue // build outputs: written by make, not tracked
		}
		if !strings.Contains(w, "/") || strings.Contains(w, "...") || strings.Contains(w, "//") || !pathWordRE.MatchString(w) {
			continue
		}
		first, _, _ := strings.Cut(w, "/")
		if top[first] || pathExts[path.Ext(w)] {
			out = append(out, w)
		}
	}
	return out
}

var (
	plainNumberRE = regexp.MustCompile(`^[0-9]+$`)
	goIdentRE     = regexp.MustCompile(`^(.*/[a-z0-9_]+)\.[A-Z][A-Za-z0-9_]*$`)
)

var (
	testWordRE = regexp.MustCompile(`\b((?:Test|Benchmark|Fuzz)[A-Z0-9_][A-Za-z0-9_]*)`)
	runFlagRE  = regexp.MustCompile(`(?:^|[\s'"])-(?:test\.)?run[= ]+(['"]?)([^\s'"]+)`)
)

// testNames returns the test funcs s cites: every Test*/Benchmark*/Fuzz* word, and each
// alternative of a -run pattern (with its subtest path).
func testNames(s string) []string {
	seen := map[string]bool{}
	var out []string
	add := func(n string) {
		if n != "" && !seen[n] {
			seen[n] = true
			out = append(out, n)
		}
	}
	for _, m := range runFlagRE.FindAllStringSubmatch(s, -1) {
		for _, alt := range strings.Split(strings.Trim(m[2], "^$()"), "|") {
			add(strings.Trim(alt, "^$()"))
		}
	}
	for _, m := range testWordRE.FindAllStringSubmatch(s, -1) {
		if !seenPrefix(seen, m[1]) {
			add(m[1])
		}
	}
	return out
}

// seenPrefix reports whether n is the top of a -run pattern already taken (TestA of TestA/Sub).
func seenPrefix(seen map[string]bool, n string) bool {
	for s := range seen {
		if top, _, _ := strings.Cut(s, "/"); top == n {
			return true
		}
	}
	return false
}

var (
	// caplb as the command: at the start, after a shell separator, sudo or a directory
	// (_out/bin/caplb), not as an argument (clusterctl delete --addon caplb).
	caplbCmdRE  = regexp.MustCompile(`(?:^\s*|[;&|(]\s*|\bsudo\s+|\$\s+|/)caplb(?:-agent)?(?:\s|$)`)
	flagWordRE  = regexp.MustCompile(`(?:^|[\s/])--([a-z][a-z0-9-]*)`)
	onlyFlagsRE = regexp.MustCompile(`^--[a-z][a-z0-9-]*\*?(?:[= ][^\s/]+)?(?:\s*/\s*--[a-z][a-z0-9-]*\*?)*$`)
)

// caplbFlags returns the long flags s gives a caplb binary: those of a caplb or caplb-agent
// command (up to the next pipe or ;), and a span that is nothing but flags (`--namespace`),
// which the docs only write for caplb's own.
func caplbFlags(s string) []string {
	var out []string
	t := strings.TrimSpace(s)
	if onlyFlagsRE.MatchString(t) {
		for _, m := range flagWordRE.FindAllStringSubmatch(t, -1) {
			out = append(out, m[1])
		}
		return out
	}
	loc := caplbCmdRE.FindStringIndex(s)
	if loc == nil {
		return nil
	}
	cmd := s[loc[0]:]
	if i := strings.IndexAny(cmd, "|;#"); i >= 0 {
		cmd = cmd[:i]
	}
	for _, m := range flagWordRE.FindAllStringSubmatch(cmd, -1) {
		out = append(out, m[1])
	}
	return out
}
