package integration

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"

	lbv1 "github.com/caplb/caplb/api/v1alpha1"
	"github.com/caplb/caplb/config/samples"
	"github.com/caplb/caplb/e2e/envtest"
	"github.com/caplb/caplb/e2e/harness"
	"github.com/caplb/caplb/e2e/lab/cloudinit"
	"github.com/caplb/caplb/providers/vip"
)

// CAPI's own kubeadm bootstrap provider (CABPK) renders the first control-plane Machine of a
// Cluster fronted by caplb from the shipped KubeadmControlPlane sample's kubeadmConfigSpec: the
// cloud-init data holds the agent's files with the bootstrap Secret's bytes, owner and mode, the
// endpoint caplb published as kubeadm's controlPlaneEndpoint, and the sample's commands before
// `kubeadm init`; and kubeadm accepts the configuration. What a machine booting from it gets is
// what the lab machines are given.
func testKubeadmBootstrapRendersSample(t *testing.T, s *suite) {
	g := NewWithT(t)
	f := newFixture(t, s, harness.ClusterOptions{})
	const vipAddr = "10.55.0.10"
	f.createLB(t, vipAddr, 0, withARP(vipAddr))
	lb := f.waitLB(t, "the VIP published", func(lb *lbv1.LoadBalancer) bool {
		return lb.Status.Endpoint.Host == vipAddr
	})
	agentSecret := f.bootstrapSecret(g)

	kcp := sampleKCP(g, "cluster_kubeadm_arp_ipam.yaml")
	spec := kcp.Spec.KubeadmConfigSpec.DeepCopy()
	for i := range spec.Files {
		// The sample's Cluster is "prod"; the fixture's is "c": its Secret, same keys.
		g.Expect(spec.Files[i].ContentFrom.Secret.Name).To(HaveSuffix(vip.SecretSuffix))
		spec.Files[i].ContentFrom.Secret.Name = vip.SecretName(lb)
	}
	cfg := &bootstrapv1.KubeadmConfig{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "c-cp-kubeadm"}, Spec: *spec}
	g.Expect(s.env.Client.Create(f.ctx, cfg)).To(Succeed())
	_, err := s.env.CreateMachine(f.ctx, f.cluster, cfg.Name, harness.MachineOptions{
		KubeadmConfig: cfg.Name, Version: kcp.Spec.Version, NoNode: true})
	g.Expect(err).NotTo(HaveOccurred())

	g.Eventually(func(g Gomega) {
		g.Expect(s.env.Client.Get(f.ctx, types.NamespacedName{Namespace: f.ns, Name: cfg.Name}, cfg)).To(Succeed())
		g.Expect(cfg.Status.DataSecretName).NotTo(BeEmpty(), "CABPK rendered no bootstrap data; conditions: %v", cfg.Status.Conditions)
	}, flowTimeout).Should(Succeed())
	data := &corev1.Secret{}
	g.Expect(s.env.Client.Get(f.ctx, types.NamespacedName{Namespace: f.ns, Name: cfg.Status.DataSecretName}, data)).To(Succeed())
	g.Expect(string(data.Data["format"])).To(Equal("cloud-config"))
	boot, err := cloudinit.Parse(data.Data["value"])
	g.Expect(err).NotTo(HaveOccurred())

	for _, sf := range spec.Files {
		file := boot.File(sf.Path)
		g.Expect(file).NotTo(BeNil(), "CABPK wrote no %s", sf.Path)
		// cloud-init writes content from a YAML block scalar, which ends in one newline: the
		// gossip key (44 bytes of base64 in the Secret) arrives as 45; the agent trims key files
		// (modes/agent readKey, TestReadKey), and YAML files end in a newline anyway.
		want := agentSecret.Data[sf.ContentFrom.Secret.Key]
		if !bytes.HasSuffix(want, []byte("\n")) {
			want = append(bytes.Clone(want), '\n')
		}
		g.Expect(file.Content).To(Equal(want), "%s holds the bootstrap Secret's %s", sf.Path, sf.ContentFrom.Secret.Key)
		g.Expect(file.Mode.String()).To(Equal("-rw-------"), sf.Path)
		g.Expect(file.Owner).To(Equal("root:root"), sf.Path)
	}
	kubeadm := boot.File("/run/kubeadm/kubeadm.yaml")
	g.Expect(kubeadm).NotTo(BeNil())
	g.Expect(string(kubeadm.Content)).To(ContainSubstring("controlPlaneEndpoint: "+vipAddr+":6443"),
		"kubeadm gets the endpoint caplb published")
	// kubeadm itself (make testbin's, the version the sample names) accepts what CABPK wrote.
	bin, err := envtest.BinaryDir()
	g.Expect(err).NotTo(HaveOccurred())
	conf := filepath.Join(t.TempDir(), "kubeadm.yaml")
	g.Expect(os.WriteFile(conf, kubeadm.Content, 0o600)).To(Succeed())
	out, err := exec.CommandContext(f.ctx, filepath.Join(bin, "kubeadm"), "config", "validate", "--config", conf).CombinedOutput()
	g.Expect(err).NotTo(HaveOccurred(), "kubeadm config validate: %s", out)

	init := -1
	for i, c := range boot.Commands {
		if strings.HasPrefix(c, "kubeadm init --config /run/kubeadm/kubeadm.yaml") {
			init = i
		}
	}
	g.Expect(init).To(BeNumerically(">=", len(spec.PreKubeadmCommands)), "commands: %q", boot.Commands)
	g.Expect(boot.Commands[:init]).To(Equal(spec.PreKubeadmCommands), "the sample's commands run before kubeadm init")
}

// sampleKCP reads the KubeadmControlPlane of a shipped sample.
func sampleKCP(g Gomega, file string) *controlplanev1.KubeadmControlPlane {
	data, err := samples.FS.ReadFile(file)
	g.Expect(err).NotTo(HaveOccurred())
	objs, err := harness.Decode(data)
	g.Expect(err).NotTo(HaveOccurred())
	for _, o := range objs {
		if o.GetKind() == "KubeadmControlPlane" {
			kcp := &controlplanev1.KubeadmControlPlane{}
			g.Expect(runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, kcp)).To(Succeed())
			return kcp
		}
	}
	g.Expect(file).To(BeEmpty(), "sample %s has no KubeadmControlPlane", file)
	return nil
}
