//go:build linux

package lifecycle

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"

	"github.com/caplb/caplb/e2e/lab"
)

// The KubeadmConfigs the lab makes are the sample's kubeadmConfigSpec as KCP splits it (init for
// the first Machine, a control-plane join for the others) plus the infrastructure's part.
func TestCABPKConfig(t *testing.T) {
	for _, backend := range []Backend{ARP, BGP} {
		for _, join := range []bool{false, true} {
			g := NewWithT(t)
			l := &Lab{opts: Options{Backend: backend}, Namespace: "ns", ClusterName: "prod"}
			cfg, version, err := l.cabpkConfig("prod-cp-1", join)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(version).To(Equal("v1.36.3"))
			g.Expect(cfg.Labels).To(HaveKeyWithValue("cluster.x-k8s.io/cluster-name", "prod"))
			spec := cfg.Spec
			sample, err := lab.SampleKubeadmControlPlane(sampleFile(backend))
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(spec.Files).To(Equal(sample.Spec.KubeadmConfigSpec.Files), "the sample's agent files")
			g.Expect(spec.PreKubeadmCommands).To(Equal(sample.Spec.KubeadmConfigSpec.PreKubeadmCommands))
			g.Expect(spec.ClusterConfiguration.APIServer.ExtraArgs).To(ContainElement(HaveField("Name", "goaway-chance")), "the sample's API server flags")
			g.Expect(spec.ClusterConfiguration.ControllerManager.ExtraArgs).To(ContainElement(
				bootstrapv1.Arg{Name: "controllers", Value: ptr(labControllerManagerFlags)}))
			reg := spec.InitConfiguration.NodeRegistration
			if join {
				g.Expect(spec.InitConfiguration.IsDefined()).To(BeFalse(), "a join has no InitConfiguration")
				reg = spec.JoinConfiguration.NodeRegistration
				g.Expect(spec.JoinConfiguration.ControlPlane).NotTo(BeNil(), "a control-plane join")
				g.Expect(spec.JoinConfiguration.ControlPlane.LocalAPIEndpoint.AdvertiseAddress).To(Equal(advertiseFromDatasource))
			} else {
				g.Expect(spec.JoinConfiguration.IsDefined()).To(BeFalse(), "an init has no JoinConfiguration")
				g.Expect(spec.InitConfiguration.LocalAPIEndpoint.AdvertiseAddress).To(Equal(advertiseFromDatasource))
			}
			g.Expect(reg.Name).To(Equal(nodeNameFromDatasource))
			g.Expect(reg.CRISocket).To(Equal(containerdSocket))
		}
	}
}

// bootFromCloudInit writes what CABPK rendered, as cloud-init would, and refuses what a lab
// machine cannot do instead of skipping it.
func TestBootFromCloudInit(t *testing.T) {
	const data = `## template: jinja
#cloud-config
write_files:
-   path: /run/kubeadm/kubeadm.yaml
    owner: root:root
    permissions: '0640'
    content: |
      name: '{{ ds.meta_data.local_hostname }}'
      advertiseAddress: '{{ ds.meta_data.local_ipv4 }}'
%s
runcmd:
%s
`
	const kubeadmCmd = "  - 'kubeadm init --config /run/kubeadm/kubeadm.yaml  && echo success > /run/cluster-api/bootstrap-success.complete'"
	for _, tc := range []struct {
		name, format, extraFile, commands, err string
	}{
		{name: "rendered and written", commands: "  - 'pre'\n" + kubeadmCmd},
		{name: "not cloud-config", format: "ignition", commands: kubeadmCmd, err: `format "ignition", want cloud-config`},
		{name: "a command that is not the sample's", commands: "  - 'other'\n" + kubeadmCmd, err: "are not the sample's preKubeadmCommands"},
		{name: "a postKubeadmCommand", commands: "  - 'pre'\n" + kubeadmCmd + "\n  - 'post'", err: "commands after kubeadm"},
		{name: "a file for another user", commands: "  - 'pre'\n" + kubeadmCmd,
			extraFile: "-   path: /home/u/x\n    owner: u:u\n    content: x", err: `owned by "u:u"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			format := "cloud-config"
			if tc.format != "" {
				format = tc.format
			}
			secret := &corev1.Secret{Data: map[string][]byte{"format": []byte(format),
				"value": []byte(fmt.Sprintf(data, tc.extraFile, tc.commands))}}
			secret.Name = "prod-cp-1"
			n := &Node{Name: "prod-cp-1", Addr: netip.MustParseAddr("10.44.0.11"), Root: t.TempDir()}
			d := &nodeDeps{cabpk: true, samplePreKubeadm: []string{"pre"}}
			step, err := d.bootFromCloudInit(n, secret)
			if tc.err != "" {
				g.Expect(err).To(MatchError(ContainSubstring(tc.err)))
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(step.Join).To(BeFalse())
			b, err := os.ReadFile(filepath.Join(n.Root, "/run/kubeadm/kubeadm.yaml"))
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(string(b)).To(Equal("name: 'prod-cp-1'\nadvertiseAddress: '10.44.0.11'\n"))
			fi, err := os.Stat(filepath.Join(n.Root, "/run/kubeadm/kubeadm.yaml"))
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(fi.Mode().Perm()).To(Equal(os.FileMode(0o640)))
		})
	}
}
