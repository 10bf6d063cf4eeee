// Package cloudinit reads the bootstrap data CAPI's kubeadm bootstrap provider (CABPK) renders
// for a Machine — a #cloud-config document — as a lab machine boots from it: the files to
// write (write_files) and the commands to run (runcmd), in order. It reads the subset CABPK
// writes (kubeadm's configuration, certificates, spec.files with their owner and mode,
// pre/post-kubeadm commands, the kubeadm command itself) and refuses anything else it would
// otherwise have to ignore silently.
package cloudinit

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"sigs.k8s.io/yaml"
)

// cloudConfigLine is on one of the first two lines of CABPK's data (after a jinja template
// header).
const cloudConfigLine = "#cloud-config"

// File is one write_files entry, decoded.
type File struct {
	Path string
	// Owner is "user:group" as written (CABPK's default root:root).
	Owner string
	// Mode is the file's permissions (0644 when the entry names none, as cloud-init).
	Mode    os.FileMode
	Content []byte
	Append  bool
}

// Config is a machine's bootstrap data: its files and its commands (runcmd), in order.
type Config struct {
	Files    []File
	Commands []string
}

// File returns the entry for path, or nil.
func (c *Config) File(path string) *File {
	for i := range c.Files {
		if c.Files[i].Path == path {
			return &c.Files[i]
		}
	}
	return nil
}

type rawFile struct {
	Path        string `json:"path"`
	Owner       string `json:"owner,omitempty"`
	Permissions string `json:"permissions,omitempty"`
	Encoding    string `json:"encoding,omitempty"`
	Content     string `json:"content"`
	Append      bool   `json:"append,omitempty"`
}

type rawConfig struct {
	WriteFiles []rawFile `json:"write_files"`
	RunCmd     []any     `json:"runcmd"`
}

// knownKeys are the top-level keys CABPK may render that a lab machine can honour or that do
// not concern it; anything else is refused.
var knownKeys = map[string]bool{"write_files": true, "runcmd": true}

// Parse reads CABPK's cloud-init bootstrap data.
func Parse(data []byte) (*Config, error) {
	body := string(data)
	if !strings.Contains(firstLines(body, 2), cloudConfigLine) {
		return nil, fmt.Errorf("cloudinit: not #cloud-config data (first lines %q)", firstLines(body, 2))
	}
	var keys map[string]any
	if err := yaml.Unmarshal(data, &keys); err != nil {
		return nil, fmt.Errorf("cloudinit: %w", err)
	}
	for k := range keys {
		if !knownKeys[k] {
			return nil, fmt.Errorf("cloudinit: %q is not something a lab machine does (only write_files and runcmd)", k)
		}
	}
	var raw rawConfig
	if err := yaml.Unmarshal(data, &raw); err != nil {
		return nil, fmt.Errorf("cloudinit: %w", err)
	}
	out := &Config{}
	for i, f := range raw.WriteFiles {
		file, err := decodeFile(f)
		if err != nil {
			return nil, fmt.Errorf("cloudinit: write_files[%d] (%s): %w", i, f.Path, err)
		}
		out.Files = append(out.Files, file)
	}
	for i, c := range raw.RunCmd {
		s, ok := c.(string)
		if !ok {
			return nil, fmt.Errorf("cloudinit: runcmd[%d]: want a shell command string, got %T", i, c)
		}
		out.Commands = append(out.Commands, s)
	}
	return out, nil
}

func decodeFile(f rawFile) (File, error) {
	if !strings.HasPrefix(f.Path, "/") {
		return File{}, fmt.Errorf("path must be absolute")
	}
	mode := os.FileMode(0o644)
	if f.Permissions != "" {
		m, err := strconv.ParseUint(f.Permissions, 8, 32)
		if err != nil {
			return File{}, fmt.Errorf("permissions %q: %w", f.Permissions, err)
		}
		mode = os.FileMode(m)
	}
	content, err := decode(f.Encoding, f.Content)
	if err != nil {
		return File{}, err
	}
	return File{Path: f.Path, Owner: f.Owner, Mode: mode, Content: content, Append: f.Append}, nil
}

// decode undoes write_files' encodings (cloud-init's names).
func decode(encoding, content string) ([]byte, error) {
	switch encoding {
	case "", "text/plain":
		return []byte(content), nil
	case "b64", "base64":
		return base64.StdEncoding.DecodeString(content)
	case "gz", "gzip", "gz+b64", "gzip+base64", "gz+base64", "gzip+b64":
		b := []byte(content)
		if strings.HasSuffix(encoding, "b64") || strings.HasSuffix(encoding, "base64") {
			d, err := base64.StdEncoding.DecodeString(content)
			if err != nil {
				return nil, fmt.Errorf("encoding %s: %w", encoding, err)
			}
			b = d
		}
		r, err := gzip.NewReader(bytes.NewReader(b))
		if err != nil {
			return nil, fmt.Errorf("encoding %s: %w", encoding, err)
		}
		return io.ReadAll(r)
	}
	return nil, fmt.Errorf("encoding %q: unknown (want base64, gzip+base64 or none)", encoding)
}

func firstLines(s string, n int) string {
	lines := strings.SplitN(s, "\n", n+1)
	return strings.Join(lines[:min(n, len(lines))], "\n")
}
