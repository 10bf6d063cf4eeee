package cloudinit

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"os"
	"testing"

	. "github.com/onsi/gomega"
)

// rendered is shaped as CABPK v1.14's control-plane init template writes it.
const rendered = `## template: jinja
#cloud-config

write_files:
-   path: /etc/kubernetes/pki/ca.crt
    owner: root:root
    permissions: '0640'
    content: |
      CERT
-   path: /etc/caplb/agent.yaml
    encoding: "base64"
    owner: root:root
    permissions: '0600'
    content: |
      a2luZDogQWdlbnQK
-   path: /run/kubeadm/kubeadm.yaml
    owner: root:root
    permissions: '0640'
    content: |
      ---
      controlPlaneEndpoint: 10.0.0.1:6443
runcmd:
  - "echo pre"
  - 'kubeadm init --config /run/kubeadm/kubeadm.yaml  && echo success > /run/cluster-api/bootstrap-success.complete'
`

func TestParse(t *testing.T) {
	g := NewWithT(t)
	c, err := Parse([]byte(rendered))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(c.Files).To(HaveLen(3))
	g.Expect(c.File("/etc/caplb/agent.yaml")).To(Equal(&File{Path: "/etc/caplb/agent.yaml", Owner: "root:root", Mode: 0o600,
		Content: []byte("kind: Agent\n")}))
	g.Expect(c.File("/etc/kubernetes/pki/ca.crt").Mode).To(Equal(os.FileMode(0o640)))
	g.Expect(string(c.File("/run/kubeadm/kubeadm.yaml").Content)).To(Equal("---\ncontrolPlaneEndpoint: 10.0.0.1:6443\n"))
	g.Expect(c.File("/nowhere")).To(BeNil())
	g.Expect(c.Commands).To(Equal([]string{"echo pre",
		"kubeadm init --config /run/kubeadm/kubeadm.yaml  && echo success > /run/cluster-api/bootstrap-success.complete"}))
}

func TestDecode(t *testing.T) {
	var gz bytes.Buffer
	w := gzip.NewWriter(&gz)
	_, _ = w.Write([]byte("zipped"))
	_ = w.Close()
	for _, tc := range []struct {
		encoding, content, want, err string
	}{
		{"", "plain", "plain", ""},
		{"b64", base64.StdEncoding.EncodeToString([]byte("x")), "x", ""},
		{"gzip+base64", base64.StdEncoding.EncodeToString(gz.Bytes()), "zipped", ""},
		{"gzip", gz.String(), "zipped", ""},
		{"base64", "!!", "", "illegal base64"},
		{"rot13", "x", "", `encoding "rot13": unknown`},
	} {
		t.Run(tc.encoding, func(t *testing.T) {
			g := NewWithT(t)
			got, err := decode(tc.encoding, tc.content)
			if tc.err != "" {
				g.Expect(err).To(MatchError(ContainSubstring(tc.err)))
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(string(got)).To(Equal(tc.want))
		})
	}
}

func TestParseRefuses(t *testing.T) {
	for _, tc := range []struct{ name, data, err string }{
		{"not cloud-config", "#!/bin/sh\necho hi\n", "not #cloud-config data"},
		{"a key a lab machine cannot honour", "#cloud-config\nwrite_files: []\ndisk_setup: {}\n", `"disk_setup" is not something`},
		{"a relative path", "#cloud-config\nwrite_files:\n- path: etc/x\n  content: x\n", "write_files[0] (etc/x): path must be absolute"},
		{"bad permissions", "#cloud-config\nwrite_files:\n- path: /x\n  permissions: 'rw'\n  content: x\n", `permissions "rw"`},
		{"a command list", "#cloud-config\nruncmd:\n- [ls, -l]\n", "runcmd[0]: want a shell command string"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			_, err := Parse([]byte(tc.data))
			g.Expect(err).To(MatchError(ContainSubstring(tc.err)))
		})
	}
}
