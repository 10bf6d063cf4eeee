package envtest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
)

// These must match hack/testbin.sh and e2e/testbin/go.mod; TestVersionsInSync
// guards against drift.
const (
	// K8sVersion is the kube-apiserver version built by `make testbin`.
	K8sVersion = "v1.36.3"
	// EtcdVersion is the etcd version built by `make testbin`.
	EtcdVersion = "v3.6.14"

	// KubeVIPOldVersion and KubeVIPNewVersion are the kube-vip releases `make testbin` builds (kube-vip-<version> in
	// BinaryDir), the system e2e/lifecycle's takeover lab moves a cluster off: the v0.x line
	// CAPV's templates ship, and the newest v1.x the module proxy served.
	KubeVIPOldVersion = "v0.9.1"
	KubeVIPNewVersion = "v1.2.2"

	modulePath     = "github.com/caplb/caplb"
	capiModulePath = "sigs.k8s.io/cluster-api"
)

// binaries are the executables envtest needs; kubectl is optional for
// controller-runtime and deliberately not built.
var binaries = []string{"kube-apiserver", "etcd"}

// BinaryDir returns the directory holding kube-apiserver and etcd:
// $KUBEBUILDER_ASSETS when set (the variable controller-runtime itself
// honours, so an explicit choice always wins), else the cache directory
// populated by `make testbin`. It fails if either binary is missing there.
func BinaryDir() (string, error) {
	dir := os.Getenv("KUBEBUILDER_ASSETS")
	source := "$KUBEBUILDER_ASSETS"
	if dir == "" {
		var err error
		if dir, err = CacheBinaryDir(); err != nil {
			return "", err
		}
		source = "testbin cache"
	}
	var missing []string
	for _, name := range binaries {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil || fi.IsDir() || fi.Mode().Perm()&0o111 == 0 {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		return "", fmt.Errorf("control-plane binaries %s missing in %s (%s): run `make testbin` to build them",
			strings.Join(missing, ", "), dir, source)
	}
	return dir, nil
}

// CacheBinaryDir is where hack/testbin.sh installs the binaries:
// ${CAPLB_CACHE:-$HOME/.cache/caplb}/testbin/k8s-<ver>-etcd-<ver>. It does
// not check that they exist.
func CacheBinaryDir() (string, error) {
	root := os.Getenv("CAPLB_CACHE")
	if root == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("locating testbin cache (set CAPLB_CACHE or HOME): %w", err)
		}
		root = filepath.Join(home, ".cache", "caplb")
	}
	return filepath.Join(root, "testbin", "k8s-"+K8sVersion+"-etcd-"+EtcdVersion), nil
}

// CAPICRDPaths returns the directories holding the CRD YAMLs of the Cluster
// API core, kubeadm control-plane and kubeadm bootstrap providers, taken from the module cache
// at the sigs.k8s.io/cluster-api version the root go.mod pins, so the CRDs
// always match the Go types we compile against.
func CAPICRDPaths() ([]string, error) {
	dir, err := capiModuleDir()
	if err != nil {
		return nil, err
	}
	paths := []string{
		filepath.Join(dir, "core", "config", "crd", "bases"),
		filepath.Join(dir, "controlplane", "kubeadm", "config", "crd", "bases"),
		// KubeadmConfig(Template): the workers' bootstrap in samples and templates.
		filepath.Join(dir, "bootstrap", "kubeadm", "config", "crd", "bases"),
	}
	for _, p := range paths {
		fi, err := os.Stat(p)
		if err != nil {
			return nil, fmt.Errorf("CAPI CRD directory missing from module %s: %w", capiModulePath, err)
		}
		if !fi.IsDir() {
			return nil, fmt.Errorf("CAPI CRD path %s is not a directory", p)
		}
	}
	return paths, nil
}

// capiModuleDir asks the go command for the cluster-api module directory.
// `go mod download -json` is used rather than `go list -m`, because in a
// fresh clone the test binary's imports do not include this module (only
// sigs.k8s.io/cluster-api/api), so it may not be extracted yet; download is
// a no-op when it is, and verifies go.sum when it is not.
func capiModuleDir() (string, error) {
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("locating %s needs the go command on PATH: %w", capiModulePath, err)
	}
	cmd := exec.Command(goBin, "mod", "download", "-json", capiModulePath)
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	// On failure go still prints JSON with an Error field; prefer that.
	var mod struct {
		Path, Version, Dir, Error string
	}
	if jerr := json.Unmarshal(out, &mod); jerr == nil && mod.Error != "" {
		return "", fmt.Errorf("go mod download %s in %s: %s", capiModulePath, root, mod.Error)
	}
	if err != nil {
		return "", fmt.Errorf("go mod download %s in %s: %w: %s",
			capiModulePath, root, err, strings.TrimSpace(stderr.String()))
	}
	if err := json.Unmarshal(out, &mod); err != nil {
		return "", fmt.Errorf("parsing go mod download output for %s: %w", capiModulePath, err)
	}
	if mod.Dir == "" {
		return "", fmt.Errorf("go mod download reported no directory for %s@%s", capiModulePath, mod.Version)
	}
	return mod.Dir, nil
}

var moduleLine = regexp.MustCompile(`(?m)^module\s+"?` + regexp.QuoteMeta(modulePath) + `"?\s*(//.*)?$`)

// RepoRoot returns the root of the caplb checkout: the nearest directory,
// walking up from the working directory, whose go.mod declares our module.
// Nested modules (e2e/testbin) are skipped. If the working directory is
// outside the checkout (e.g. a demo binary run from elsewhere), the
// directory of this source file is tried as well.
func RepoRoot() (string, error) {
	var starts []string
	if wd, err := os.Getwd(); err == nil {
		starts = append(starts, wd)
	}
	// Without -trimpath this is an absolute path into the checkout.
	if _, file, _, ok := runtime.Caller(0); ok && filepath.IsAbs(file) {
		starts = append(starts, filepath.Dir(file))
	}
	for _, start := range starts {
		if root, ok := findRoot(start); ok {
			return root, nil
		}
	}
	return "", fmt.Errorf("no go.mod declaring module %s found above %s", modulePath, strings.Join(starts, " or "))
}

func findRoot(dir string) (string, bool) {
	for {
		data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && moduleLine.Match(data) {
			return dir, true
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", false
		}
		dir = parent
	}
}

// KubeVIPBinary is the path of the kube-vip release version in dir (BinaryDir), checked to exist.
func KubeVIPBinary(dir, version string) (string, error) {
	p := filepath.Join(dir, "kube-vip-"+version)
	if fi, err := os.Stat(p); err != nil || fi.Mode().Perm()&0o111 == 0 {
		return "", fmt.Errorf("kube-vip %s missing in %s: run `make testbin` to build it", version, dir)
	}
	return p, nil
}
