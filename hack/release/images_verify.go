package release

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"
)

// VerifyImage reads the OCI layout at dir back and checks what a runtime will see: the reference,
// one image per wanted architecture with a matching platform and config, the spec's entrypoint,
// command and user, the version label; and, for the architecture this machine runs, that the
// binary in the image is static and prints the version with --version. It returns what it ran.
func VerifyImage(dir, wantRef string, spec ImageSpec, archs []string, version string) (string, error) {
	idx, ref, err := ReadLayout(dir)
	if err != nil {
		return "", err
	}
	if ref != wantRef {
		return "", fmt.Errorf("%s: reference %q, want %q", dir, ref, wantRef)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		return "", err
	}
	var got []string
	var ran string
	for _, d := range m.Manifests {
		if d.Platform == nil {
			return "", fmt.Errorf("%s: manifest %s has no platform", dir, d.Digest)
		}
		arch := d.Platform.Architecture
		got = append(got, arch)
		img, err := idx.Image(d.Digest)
		if err != nil {
			return "", err
		}
		cf, err := img.ConfigFile()
		if err != nil {
			return "", err
		}
		c := cf.Config
		switch {
		case d.Platform.OS != "linux" || cf.OS != "linux" || cf.Architecture != arch:
			return "", fmt.Errorf("%s/%s: platform %s/%s, config %s/%s", dir, arch, d.Platform.OS, arch, cf.OS, cf.Architecture)
		case !slices.Equal(c.Entrypoint, spec.Entrypoint) || !slices.Equal(c.Cmd, spec.Cmd):
			return "", fmt.Errorf("%s/%s: entrypoint %q cmd %q, want %q %q", dir, arch, c.Entrypoint, c.Cmd, spec.Entrypoint, spec.Cmd)
		case c.User != spec.User:
			return "", fmt.Errorf("%s/%s: user %q, want %q", dir, arch, c.User, spec.User)
		case c.Labels["org.opencontainers.image.version"] != version:
			return "", fmt.Errorf("%s/%s: version label %q, want %q", dir, arch, c.Labels["org.opencontainers.image.version"], version)
		}
		bin, err := ExtractFile(img, spec.Binary)
		if err != nil {
			return "", fmt.Errorf("%s/%s: %w", dir, arch, err)
		}
		if err := checkStaticELF(bin, arch); err != nil {
			return "", fmt.Errorf("%s/%s: %s: %w", dir, arch, spec.Binary, err)
		}
		if arch == runtime.GOARCH && runtime.GOOS == "linux" {
			out, err := runVersion(bin, spec.Binary)
			if err != nil {
				return "", fmt.Errorf("%s/%s: %w", dir, arch, err)
			}
			if !strings.Contains(out, version) {
				return "", fmt.Errorf("%s/%s: %s --version printed %q, want the version %s", dir, arch, spec.Binary, out, version)
			}
			ran = strings.TrimSpace(out)
		}
	}
	slices.Sort(got)
	want := slices.Sorted(slices.Values(archs))
	if !slices.Equal(got, want) {
		return "", fmt.Errorf("%s: architectures %v, want %v", dir, got, want)
	}
	return ran, nil
}

// runVersion runs the image's binary with --version, as `docker run IMAGE --version` would
// (the entrypoint is the binary), in an empty environment.
func runVersion(bin []byte, name string) (string, error) {
	dir, err := os.MkdirTemp("", "caplb-image-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, filepath.Base(name))
	if err := os.WriteFile(path, bin, 0o755); err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, "--version")
	cmd.Env = []string{}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("%s --version: %w: %s", name, err, out)
	}
	return string(out), nil
}
