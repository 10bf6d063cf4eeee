package release

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// ImageSpec describes one FROM-scratch image: a single static binary and how to run it.
type ImageSpec struct {
	// Name is the image name without registry or tag (caplb-manager, caplb-agent).
	Name string
	// Binary is the path of the binary inside the image (/caplb, /caplb-agent).
	Binary string
	// Entrypoint and Cmd are the image's; Entrypoint is normally [Binary].
	Entrypoint, Cmd []string
	// User is "uid:gid". The manager runs as 65532 (distroless' nonroot); the agent as root,
	// because it configures addresses and sends raw ARP (its manifests grant only NET_ADMIN and
	// NET_RAW).
	User string
	// Description becomes org.opencontainers.image.description.
	Description string
}

// The two images caplb ships.
var (
	ManagerImageSpec = ImageSpec{
		Name: "caplb-manager", Binary: "/caplb", Entrypoint: []string{"/caplb"}, Cmd: []string{"manager"},
		User:        "65532:65532",
		Description: "caplb: control-plane load balancer provider for Cluster API (manager)",
	}
	AgentImageSpec = ImageSpec{
		Name: "caplb-agent", Binary: "/caplb-agent", Entrypoint: []string{"/caplb-agent"},
		User:        "0:0",
		Description: "caplb node agent: ARP/BGP virtual IP for the Kubernetes API",
	}
)

// ImageMeta is what every image's labels carry.
type ImageMeta struct {
	Version, Commit, Source string
	// Created is the image creation time; a fixed value (SOURCE_DATE_EPOCH) makes builds
	// reproducible.
	Created time.Time
}

// goarch maps GOARCH to the ELF machine a binary for it must have.
var goarch = map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}

// BuildImage returns a multi-platform OCI image index: one image per entry of binaries
// (GOARCH → path of a static linux binary built for it).
func BuildImage(spec ImageSpec, meta ImageMeta, binaries map[string]string) (v1.ImageIndex, error) {
	if len(binaries) == 0 {
		return nil, fmt.Errorf("image %s: no binaries", spec.Name)
	}
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, arch := range slices.Sorted(maps.Keys(binaries)) {
		img, err := buildPlatformImage(spec, meta, arch, binaries[arch])
		if err != nil {
			return nil, err
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{
			Add:        img,
			Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: arch}},
		})
	}
	return idx, nil
}

func buildPlatformImage(spec ImageSpec, meta ImageMeta, arch, binPath string) (v1.Image, error) {
	data, err := os.ReadFile(binPath)
	if err != nil {
		return nil, fmt.Errorf("image %s/%s: %w", spec.Name, arch, err)
	}
	if err := checkStaticELF(data, arch); err != nil {
		return nil, fmt.Errorf("image %s/%s: %s: %w", spec.Name, arch, binPath, err)
	}
	layer, err := binaryLayer(spec.Binary, data, meta.Created)
	if err != nil {
		return nil, err
	}
	img, err := mutate.AppendLayers(mutate.MediaType(empty.Image, types.OCIManifestSchema1), layer)
	if err != nil {
		return nil, err
	}
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", arch
	cf.Created = v1.Time{Time: meta.Created}
	cf.Config.Entrypoint = spec.Entrypoint
	cf.Config.Cmd = spec.Cmd
	cf.Config.User = spec.User
	cf.Config.WorkingDir = "/"
	cf.Config.Labels = map[string]string{
		"org.opencontainers.image.title":       spec.Name,
		"org.opencontainers.image.description": spec.Description,
		"org.opencontainers.image.version":     meta.Version,
		"org.opencontainers.image.revision":    meta.Commit,
		"org.opencontainers.image.source":      meta.Source,
		"org.opencontainers.image.created":     meta.Created.UTC().Format(time.RFC3339),
	}
	return mutate.ConfigFile(img, cf)
}

// checkStaticELF refuses a binary for the wrong architecture or one that needs a dynamic loader,
// which a FROM-scratch image does not have (the symptom would be an unhelpful "no such file or
// directory" at container start).
func checkStaticELF(data []byte, arch string) error {
	want, ok := goarch[arch]
	if !ok {
		return fmt.Errorf("unsupported architecture %q (supported: amd64, arm64)", arch)
	}
	f, err := elf.NewFile(bytes.NewReader(data))
	if err != nil {
		return fmt.Errorf("not an ELF binary: %w", err)
	}
	defer f.Close()
	if f.Machine != want {
		return fmt.Errorf("ELF machine %s, want %s for %s", f.Machine, want, arch)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("dynamically linked (build with CGO_ENABLED=0)")
		}
	}
	return nil
}

// binaryLayer is a one-file layer: the binary, mode 0755, owned by root, at a fixed time.
func binaryLayer(path string, data []byte, mtime time.Time) (v1.Layer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(&tar.Header{
		Name: path[1:], Mode: 0o755, Size: int64(len(data)), ModTime: mtime, Typeflag: tar.TypeReg,
		Format: tar.FormatPAX,
	}); err != nil {
		return nil, err
	}
	if _, err := tw.Write(data); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	b := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(b)), nil
	}, tarball.WithMediaType(types.OCILayer))
}

// WriteLayout writes idx as an OCI image layout at dir (replacing what is there), its manifest
// annotated with ref as org.opencontainers.image.ref.name, e.g. ghcr.io/caplb/caplb-manager:v0.1.0.
func WriteLayout(dir, ref string, idx v1.ImageIndex) error {
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return fmt.Errorf("creating OCI layout %s: %w", dir, err)
	}
	if err := p.AppendIndex(idx, layout.WithAnnotations(map[string]string{
		"org.opencontainers.image.ref.name": ref,
	})); err != nil {
		return fmt.Errorf("writing %s to %s: %w", ref, dir, err)
	}
	return nil
}

// ReadLayout reads back the single image index of an OCI layout written by WriteLayout.
func ReadLayout(dir string) (v1.ImageIndex, string, error) {
	p, err := layout.FromPath(dir)
	if err != nil {
		return nil, "", err
	}
	root, err := p.ImageIndex()
	if err != nil {
		return nil, "", err
	}
	m, err := root.IndexManifest()
	if err != nil {
		return nil, "", err
	}
	if len(m.Manifests) != 1 {
		return nil, "", fmt.Errorf("%s: %d manifests in index.json, want 1", dir, len(m.Manifests))
	}
	idx, err := root.ImageIndex(m.Manifests[0].Digest)
	if err != nil {
		return nil, "", err
	}
	return idx, m.Manifests[0].Annotations["org.opencontainers.image.ref.name"], nil
}

// ExtractFile returns the content of path (absolute) from img's layers, top layer first.
func ExtractFile(img v1.Image, path string) ([]byte, error) {
	layers, err := img.Layers()
	if err != nil {
		return nil, err
	}
	for i := len(layers) - 1; i >= 0; i-- {
		rc, err := layers[i].Uncompressed()
		if err != nil {
			return nil, err
		}
		tr := tar.NewReader(rc)
		for {
			h, err := tr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				rc.Close()
				return nil, err
			}
			if "/"+filepath.Clean(h.Name) == path {
				b, err := io.ReadAll(tr)
				rc.Close()
				return b, err
			}
		}
		rc.Close()
	}
	return nil, fmt.Errorf("%s not in the image", path)
}
