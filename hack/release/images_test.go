package release

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

// buildFake cross-compiles the stand-in binary (testdata/fakebin) for linux/arch.
func buildFake(t *testing.T, dir, arch, version string) string {
	t.Helper()
	out := filepath.Join(dir, arch, "fakebin")
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w -X main.version="+version, "-o", out, "./testdata/fakebin")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building fakebin for %s: %v\n%s", arch, err, b)
	}
	return out
}

// An image built from static binaries for two architectures reads back with the platform,
// entrypoint, user and labels it was given, and the host's binary in it runs --version.
func TestBuildAndVerifyImage(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("images carry linux binaries; the --version check runs them")
	}
	g := NewWithT(t)
	dir := t.TempDir()
	const version = "v9.9.9"
	bins := map[string]string{"amd64": buildFake(t, dir, "amd64", version), "arm64": buildFake(t, dir, "arm64", version)}
	spec := ImageSpec{Name: "fake", Binary: "/fakebin", Entrypoint: []string{"/fakebin"}, Cmd: []string{"serve"}, User: "65532:65532"}
	meta := ImageMeta{Version: version, Commit: "abc", Source: "https://example.test", Created: time.Unix(1700000000, 0)}
	idx, err := BuildImage(spec, meta, bins)
	g.Expect(err).NotTo(HaveOccurred())
	layoutDir := filepath.Join(dir, "layout")
	const ref = "registry.example.test/fake:v9.9.9"
	g.Expect(WriteLayout(layoutDir, ref, idx)).To(Succeed())

	ran, err := VerifyImage(layoutDir, ref, spec, []string{"arm64", "amd64"}, version)
	g.Expect(err).NotTo(HaveOccurred())
	if runtime.GOARCH == "amd64" || runtime.GOARCH == "arm64" {
		g.Expect(ran).To(Equal("fakebin " + version))
	}

	// The same inputs give the same digest: builds are reproducible.
	again, err := BuildImage(spec, meta, bins)
	g.Expect(err).NotTo(HaveOccurred())
	d1, _ := idx.Digest()
	d2, _ := again.Digest()
	g.Expect(d2).To(Equal(d1))

	// Each check can fail.
	for name, tc := range map[string]struct {
		ref     string
		spec    ImageSpec
		archs   []string
		version string
		want    string
	}{
		"reference":    {"registry.example.test/fake:v1", spec, []string{"amd64", "arm64"}, version, "reference"},
		"user":         {ref, withUser(spec, "0:0"), []string{"amd64", "arm64"}, version, "user"},
		"entrypoint":   {ref, withEntrypoint(spec, "/other"), []string{"amd64", "arm64"}, version, "entrypoint"},
		"architecture": {ref, spec, []string{"amd64"}, version, "architectures"},
		"version":      {ref, spec, []string{"amd64", "arm64"}, "v1.0.0", "version label"},
	} {
		_, err := VerifyImage(layoutDir, tc.ref, tc.spec, tc.archs, tc.version)
		g.Expect(err).To(MatchError(ContainSubstring(tc.want)), name)
	}
}

func withUser(s ImageSpec, u string) ImageSpec { s.User = u; return s }
func withEntrypoint(s ImageSpec, e string) ImageSpec {
	s.Entrypoint = []string{e}
	return s
}

// A binary for the wrong architecture, or one needing a dynamic loader that a scratch image
// lacks, is refused at build time.
func TestBuildImageRefusesWrongBinaries(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	amd := buildFake(t, dir, "amd64", "v1")
	spec := ImageSpec{Name: "fake", Binary: "/fakebin", Entrypoint: []string{"/fakebin"}, User: "0:0"}
	_, err := BuildImage(spec, ImageMeta{}, map[string]string{"arm64": amd})
	g.Expect(err).To(MatchError(ContainSubstring("ELF machine")))
	_, err = BuildImage(spec, ImageMeta{}, map[string]string{"riscv64": amd})
	g.Expect(err).To(MatchError(ContainSubstring("unsupported architecture")))
	notELF := filepath.Join(dir, "script")
	g.Expect(os.WriteFile(notELF, []byte("#!/bin/sh\n"), 0o755)).To(Succeed())
	_, err = BuildImage(spec, ImageMeta{}, map[string]string{"amd64": notELF})
	g.Expect(err).To(MatchError(ContainSubstring("not an ELF")))
	// The host's own /bin/true is a dynamically linked ELF for the host's architecture.
	if runtime.GOOS == "linux" && (runtime.GOARCH == "amd64" || runtime.GOARCH == "arm64") {
		_, err = BuildImage(spec, ImageMeta{}, map[string]string{runtime.GOARCH: "/bin/true"})
		g.Expect(err).To(MatchError(ContainSubstring("dynamically linked")))
	}
}
