package lab

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// SharedBinDirEnv names a directory in which one test run (make test) builds each lab binary
// once: every lab package then links or copies it from there instead of building it again.
// Unset, each call builds.
const SharedBinDirEnv = "CAPLB_LAB_BINDIR"

// BuildBinary runs `go build -o out pkg` from this module's root (pkg is a package path such as
// "github.com/caplb/caplb/cmd/caplb" or "./cmd/caplb"), with cgo off: a static binary, as in the
// agent's image (distroless), which the lab's kubelet (podrun) can run in a root holding nothing
// else, and one build every lab can share.
func BuildBinary(pkg, out string) error {
	dir := os.Getenv(SharedBinDirEnv)
	if dir == "" {
		return build(pkg, out)
	}
	cached := filepath.Join(dir, strings.NewReplacer("/", "_", ".", "_").Replace(pkg))
	if _, err := os.Stat(cached); err != nil {
		// Built beside and renamed: a binary interrupted mid-build is never taken as done, and
		// two test processes building it at once (make test runs some packages in parallel)
		// each rename a whole binary.
		tmp := fmt.Sprintf("%s.building.%d", cached, os.Getpid())
		if err := build(pkg, tmp); err != nil {
			return err
		}
		if err := os.Rename(tmp, cached); err != nil {
			return fmt.Errorf("lab binaries: %w", err)
		}
	}
	if err := os.Link(cached, out); err == nil {
		return nil
	}
	return copyExecutable(cached, out)
}

// BuildStaticBinary is BuildBinary; the name says what the caller relies on.
func BuildStaticBinary(pkg, out string) error { return BuildBinary(pkg, out) }

func build(pkg, out string) error {
	root, err := ModuleRoot()
	if err != nil {
		return err
	}
	cmd := exec.Command("go", "build", "-o", out, pkg)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %w: %s", pkg, err, b)
	}
	return nil
}

func copyExecutable(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return fmt.Errorf("lab binaries: %w", err)
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o755)
	if err != nil {
		return fmt.Errorf("lab binaries: %w", err)
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return fmt.Errorf("lab binaries: copying %s: %w", from, err)
	}
	return out.Close()
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
