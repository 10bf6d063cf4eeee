package lab

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
)

// BuildBinary runs `go build -o out pkg` from this module's root (pkg is a
// package path such as "github.com/caplb/caplb/cmd/caplb" or "./cmd/caplb").
func BuildBinary(pkg, out string) error {
	root, err := ModuleRoot()
	if err != nil {
		return err
	}
	cmd := exec.Command("go", "build", "-o", out, pkg)
	cmd.Dir = root
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
