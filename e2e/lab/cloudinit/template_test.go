package cloudinit

import (
	"testing"

	. "github.com/onsi/gomega"
)

func TestRender(t *testing.T) {
	meta := MetaData{"local_hostname": "prod-cp-1", "local_ipv4": "10.0.0.11"}
	for _, tc := range []struct {
		name, data, want, err string
	}{
		{name: "the node's name and address, with and without spaces and jinja's trim marks",
			data: "## template: jinja\n#cloud-config\nname: '{{ ds.meta_data.local_hostname }}'\naddr: {{ds.meta_data.local_ipv4}} {{- ds.meta_data.local_ipv4 -}}\n",
			want: "## template: jinja\n#cloud-config\nname: 'prod-cp-1'\naddr: 10.0.0.11 10.0.0.11\n"},
		{name: "no header: cloud-init renders nothing",
			data: "#cloud-config\nname: '{{ ds.meta_data.local_hostname }}'\n",
			want: "#cloud-config\nname: '{{ ds.meta_data.local_hostname }}'\n"},
		{name: "a key the datasource lacks",
			data: "## template: jinja\n#cloud-config\nid: {{ ds.meta_data.instance_id }}\n",
			err:  "ds.meta_data.instance_id, which the lab's datasource does not have (it has local_hostname, local_ipv4)"},
		{name: "other jinja",
			data: "## template: jinja\n#cloud-config\n{% if v1.distro == 'ubuntu' %}\nx: 1\n",
			err:  "line 3: template syntax other than"},
		{name: "other variables",
			data: "## template: jinja\n#cloud-config\nregion: {{ v1.region }}\n",
			err:  "line 3: template syntax other than"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			got, err := Render([]byte(tc.data), meta)
			if tc.err != "" {
				g.Expect(err).To(MatchError(ContainSubstring(tc.err)))
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(string(got)).To(Equal(tc.want))
		})
	}
}

// What CABPK renders parses once rendered (the header line is a YAML comment).
func TestRenderThenParse(t *testing.T) {
	g := NewWithT(t)
	data, err := Render([]byte(rendered), MetaData{})
	g.Expect(err).NotTo(HaveOccurred())
	c, err := Parse(data)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(c.Files).To(HaveLen(3))
}

func TestKubeadm(t *testing.T) {
	files := []File{{Path: "/run/kubeadm/kubeadm.yaml"}, {Path: "/run/kubeadm/kubeadm-join-config.yaml"}}
	for _, tc := range []struct {
		name     string
		commands []string
		want     KubeadmStep
		err      string
	}{
		{name: "init after a preKubeadmCommand",
			commands: []string{"echo pre", "kubeadm init --config /run/kubeadm/kubeadm.yaml  && echo success > /run/cluster-api/bootstrap-success.complete"},
			want:     KubeadmStep{Config: "/run/kubeadm/kubeadm.yaml", Index: 1}},
		{name: "join with verbosity",
			commands: []string{"kubeadm join --config /run/kubeadm/kubeadm-join-config.yaml -v 5 && echo success > /run/cluster-api/bootstrap-success.complete", "echo post"},
			want:     KubeadmStep{Join: true, Config: "/run/kubeadm/kubeadm-join-config.yaml"}},
		{name: "none", commands: []string{"echo pre"}, err: "found 0"},
		{name: "two", commands: []string{"kubeadm init --config /run/kubeadm/kubeadm.yaml", "kubeadm join --config /run/kubeadm/kubeadm-join-config.yaml"}, err: "found 2"},
		{name: "a flag the lab does not run", commands: []string{"kubeadm init --config /run/kubeadm/kubeadm.yaml --skip-phases=addon/coredns"}, err: `argument "--skip-phases=addon/coredns"`},
		{name: "something else after it", commands: []string{"kubeadm init --config /run/kubeadm/kubeadm.yaml && reboot"}, err: "only CABPK's sentinel"},
		{name: "a file not written", commands: []string{"kubeadm init --config /tmp/k.yaml"}, err: "/tmp/k.yaml, which write_files does not write"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			got, err := (&Config{Files: files, Commands: tc.commands}).Kubeadm()
			if tc.err != "" {
				g.Expect(err).To(MatchError(ContainSubstring(tc.err)))
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(got).To(Equal(tc.want))
		})
	}
}
