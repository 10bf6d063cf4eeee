// Command mkimages builds caplb's container images without a container engine (`make images`):
// for each architecture it cross-compiles the static binary (CGO_ENABLED=0) and packs it alone
// into a FROM-scratch image with go-containerregistry, writes one multi-platform OCI image layout
// per image (caplb-manager, caplb-agent), then reads each back and checks it (entrypoint, user,
// architectures, and that this machine's binary in the image runs --version).
//
// Push with any OCI tool, e.g. `crane push _out/images/caplb-manager ghcr.io/caplb/caplb-manager:v0.1.0`
// or `skopeo copy --all oci:_out/images/caplb-manager docker://...`.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/caplb/caplb/hack/release"
)

func main() {
	out := flag.String("out", "_out/images", "directory for the OCI image layouts")
	registry := flag.String("registry", "ghcr.io/caplb", "registry and path the image references start with")
	version := flag.String("version", "", "image tag and version label, e.g. v0.1.0")
	commit := flag.String("commit", "unknown", "VCS revision for the revision label")
	ldflags := flag.String("ldflags", "", "extra -ldflags for go build (the version variables)")
	platforms := flag.String("platforms", "linux/amd64,linux/arm64", "comma-separated platforms (linux only)")
	source := flag.String("source", "https://github.com/caplb/caplb", "source label")
	epoch := flag.String("source-date-epoch", "0", "creation time (Unix seconds), for reproducible images")
	flag.Parse()
	if err := run(*out, *registry, *version, *commit, *ldflags, *platforms, *source, *epoch); err != nil {
		fmt.Fprintln(os.Stderr, "mkimages:", err)
		os.Exit(1)
	}
}

func run(out, registry, version, commit, ldflags, platforms, source, epoch string) error {
	if version == "" {
		return fmt.Errorf("-version is required")
	}
	secs, err := strconv.ParseInt(epoch, 10, 64)
	if err != nil {
		return fmt.Errorf("-source-date-epoch %q: %w", epoch, err)
	}
	var archs []string
	for _, p := range strings.Split(platforms, ",") {
		os, arch, ok := strings.Cut(strings.TrimSpace(p), "/")
		if !ok || os != "linux" {
			return fmt.Errorf("platform %q: want linux/<arch>", p)
		}
		archs = append(archs, arch)
	}
	meta := release.ImageMeta{Version: version, Commit: commit, Source: source, Created: time.Unix(secs, 0).UTC()}
	for _, im := range []struct {
		spec release.ImageSpec
		pkg  string
	}{{release.ManagerImageSpec, "./cmd/caplb"}, {release.AgentImageSpec, "./cmd/caplb-agent"}} {
		bins := map[string]string{}
		for _, arch := range archs {
			bin := filepath.Join(out, "bin", arch, filepath.Base(im.spec.Binary))
			if err := goBuild(im.pkg, bin, arch, ldflags); err != nil {
				return err
			}
			bins[arch] = bin
		}
		idx, err := release.BuildImage(im.spec, meta, bins)
		if err != nil {
			return err
		}
		ref := registry + "/" + im.spec.Name + ":" + version
		dir := filepath.Join(out, im.spec.Name)
		if err := release.WriteLayout(dir, ref, idx); err != nil {
			return err
		}
		ran, err := release.VerifyImage(dir, ref, im.spec, archs, version)
		if err != nil {
			return fmt.Errorf("verifying %s: %w", ref, err)
		}
		digest, _ := idx.Digest()
		fmt.Printf("wrote %s (%s, %s) %s\n  --version: %s\n", dir, ref, strings.Join(archs, ", "), digest, ran)
	}
	return nil
}

func goBuild(pkg, out, arch, ldflags string) error {
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w "+ldflags, "-o", out, pkg)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go build %s for linux/%s: %w", pkg, arch, err)
	}
	return nil
}
