// Package repo holds checks on the repository itself rather than on any one package.
package repo

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// executableMagic are the first bytes of the binary formats a `go build` can leave behind.
var executableMagic = [][]byte{
	[]byte("\x7fELF"),        // Linux and the BSDs
	{0xcf, 0xfa, 0xed, 0xfe}, // Mach-O 64-bit
	{0xfe, 0xed, 0xfa, 0xcf}, // Mach-O 64-bit, big-endian
	[]byte("MZ"),             // Windows PE
	[]byte("\x00asm"),        // WebAssembly
}

// TestNoBuildOutputTracked fails when a compiled binary is committed: a `go build ./e2e/bench/arp`
// at the root once left a 36 MB ELF file in the tree. Scripts (a #! line) may be executable.
func TestNoBuildOutputTracked(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git not installed: cannot list the tracked files")
	}
	out, err := exec.Command("git", "-C", root, "ls-files", "-s", "-z").Output()
	if err != nil {
		t.Skipf("not a git checkout (%v): nothing tracked to check", err)
	}
	for _, entry := range bytes.Split(out, []byte{0}) {
		// "<mode> <object> <stage>\t<path>"
		meta, path, ok := strings.Cut(string(entry), "\t")
		if !ok {
			continue
		}
		if msg := buildOutput(filepath.Join(root, path), strings.HasPrefix(meta, "100755")); msg != "" {
			t.Errorf("%s is tracked but %s: remove it (git rm --cached %s) and add it to .gitignore", path, msg, path)
		}
	}
}

// buildOutput says why the file at path looks like a build output, or "" when it does not.
func buildOutput(path string, executable bool) string {
	f, err := os.Open(path)
	if err != nil {
		return "" // deleted in the work tree: git status shows it, not this test
	}
	defer f.Close()
	head := make([]byte, 4)
	n, _ := f.Read(head)
	head = head[:n]
	for _, magic := range executableMagic {
		if bytes.HasPrefix(head, magic) && (len(magic) > 2 || executable) {
			return "a compiled binary"
		}
	}
	if executable && !bytes.HasPrefix(head, []byte("#!")) {
		return "executable without a #! line"
	}
	return ""
}
