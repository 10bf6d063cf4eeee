package lab

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// BuildBinary runs `go build -o out pkg` from this module's root (pkg is a
// package path such as "github.com/caplb/caplb/cmd/caplb" or "./cmd/caplb").
func BuildBinary(pkg, out string) error { return build(pkg, out, nil) }

// BuildStaticBinary is BuildBinary with cgo off: a static binary, as in the agent's image
// (distroless), for the lab's kubelet (podrun), which runs it in a root holding nothing else.
func BuildStaticBinary(pkg, out string) error { return build(pkg, out, []string{"CGO_ENABLED=0"}) }

func build(pkg, out string, env []string) error {
	root, err := ModuleRoot()
	if err != nil {
		return err
	}
	cmd := exec.Command("go", "build", "-o", out, pkg)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), env...)
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %w: %s", pkg, err, b)
	}
	return nil
}

// ModuleRoot is the directory of this module's go.mod.
func ModuleRoot() (string, error) {
	b, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(b))
	if mod == "" || mod == "/dev/null" {
		return "", fmt.Errorf("not inside the caplb module")
	}
	return filepath.Dir(mod), nil
}

// Binaries are the two programs every lab node runs: the agent (`caplb-agent`) and the stand-in
// API server.
type Binaries struct{ Agent, Standin string }

// BuildBinaries builds the agent and the stand-in into a fresh temporary directory, once per
// test process (the suites' TestMain). The returned cleanup removes the directory.
func BuildBinaries() (Binaries, func(), error) {
	dir, err := os.MkdirTemp("", "caplb-lab-bin-")
	if err != nil {
		return Binaries{}, func() {}, fmt.Errorf("temporary directory for lab binaries: %w", err)
	}
	cleanup := func() { os.RemoveAll(dir) }
	b := Binaries{Agent: filepath.Join(dir, "caplb-agent"), Standin: filepath.Join(dir, "standin")}
	for pkg, out := range map[string]string{"./cmd/caplb-agent": b.Agent, "./e2e/lab/standin": b.Standin} {
		if err := BuildBinary(pkg, out); err != nil {
			cleanup()
			return Binaries{}, func() {}, err
		}
	}
	return b, cleanup, nil
}
