package release

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// StandaloneFile is the one-file install for clusters without clusterctl: the components with
// every clusterctl variable set to its default, so that `kubectl apply -f` takes it as it is.
const StandaloneFile = "caplb-standalone.yaml"

// ChecksumsFile lists the SHA-256 of every other asset of a release, as sha256sum prints it.
const ChecksumsFile = "checksums.txt"

// clusterctlVariable is clusterctl's variable syntax: ${NAME} or ${NAME:=default}.
var clusterctlVariable = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)(:=([^}]*))?\}`)

// StandaloneComponents renders config/standalone (the components and the node-targets
// component) as caplb-standalone.yaml: for `kubectl apply`, with no variable left.
func StandaloneComponents(o Options) ([]byte, error) {
	comps, err := render(o, "standalone")
	if err != nil {
		return nil, err
	}
	return Standalone(comps, o.Version)
}

// Standalone renders components for `kubectl apply`: every ${NAME:=default} becomes its
// default. A variable without a default cannot be rendered (clusterctl would ask for it), so it
// is refused by name rather than left for kubectl to apply as text.
func Standalone(components []byte, version string) ([]byte, error) {
	var missing []string
	out := clusterctlVariable.ReplaceAllFunc(components, func(m []byte) []byte {
		sub := clusterctlVariable.FindSubmatch(m)
		if sub[2] == nil {
			missing = append(missing, string(sub[1]))
			return m
		}
		return sub[3]
	})
	if len(missing) > 0 {
		return nil, fmt.Errorf("components use clusterctl variables without a default (%s): give each a default (${NAME:=value}) in config/", strings.Join(missing, ", "))
	}
	// The components' own header speaks of clusterctl; this file is applied without it.
	var body [][]byte
	for _, l := range bytes.SplitAfter(out, []byte("\n")) {
		if !bytes.HasPrefix(l, []byte("#")) || len(body) > 0 {
			body = append(body, l)
		}
	}
	header := fmt.Sprintf("# caplb %s: every component in one file, for clusters without clusterctl (rendered by `make release`).\n"+
		"# Install: kubectl apply --server-side -f %s (docs/install.md, \"Without Cluster API\"); the webhook's certificate needs cert-manager.\n"+
		"# To change an image or a setting, edit this file or use the Helm chart.\n", version, StandaloneFile)
	return append([]byte(header), bytes.Join(body, nil)...), nil
}

// WriteChecksums writes ChecksumsFile into dir: the SHA-256 of every regular file in dir (not
// in its subdirectories, not the checksums themselves), sorted by name, in sha256sum's format,
// so that `sha256sum -c checksums.txt` checks a downloaded release.
func WriteChecksums(dir string) (string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return "", fmt.Errorf("checksums: %w", err)
	}
	var names []string
	for _, e := range entries {
		if e.Type().IsRegular() && e.Name() != ChecksumsFile {
			names = append(names, e.Name())
		}
	}
	if len(names) == 0 {
		return "", fmt.Errorf("checksums: %s holds no release assets: run `make release` first", dir)
	}
	sort.Strings(names)
	var b strings.Builder
	for _, n := range names {
		data, err := os.ReadFile(filepath.Join(dir, n))
		if err != nil {
			return "", fmt.Errorf("checksums: %w", err)
		}
		sum := sha256.Sum256(data)
		fmt.Fprintf(&b, "%s  %s\n", hex.EncodeToString(sum[:]), n)
	}
	p := filepath.Join(dir, ChecksumsFile)
	return p, os.WriteFile(p, []byte(b.String()), 0o644)
}
