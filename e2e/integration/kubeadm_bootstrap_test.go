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
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lbv1 "github.com/caplb/caplb/api/v1alpha1"
	"github.com/caplb/caplb/e2e/envtest"
	"github.com/caplb/caplb/e2e/harness"
	"github.com/caplb/caplb/e2e/lab"
	"github.com/caplb/caplb/e2e/lab/cloudinit"
	"github.com/caplb/caplb/e2e/testinfra"
	"github.com/caplb/caplb/providers/vip"
)

// CAPI's own kubeadm bootstrap provider (CABPK) renders the first control-plane Machine of a
// Cluster fronted by caplb from the shipped KubeadmControlPlane sample's kubeadmConfigSpec: the
// cloud-init data holds the agent's files with the bootstrap Secret's bytes, owner and mode, the
// endpoint caplb published as kubeadm's controlPlaneEndpoint, and the sample's commands before
// `kubeadm init`; and kubeadm accepts the configuration. (The real-control-plane lifecycle lab
// boots its machines from such data: e2e/lifecycle/cabpk.go.)
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
		g.Expect(file.Content).To(Equal(asCloudInitWrites(agentSecret.Data[sf.ContentFrom.Secret.Key])),
			"%s holds the bootstrap Secret's %s", sf.Path, sf.ContentFrom.Secret.Key)
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
	kcp, err := lab.SampleKubeadmControlPlane(file)
	g.Expect(err).NotTo(HaveOccurred())
	return kcp
}

// CAPI's own KubeadmControlPlane controller, from the shipped sample (one replica, the test
// infrastructure's machine template), waits for the endpoint caplb publishes, then creates a
// control-plane Machine whose KubeadmConfig carries the sample's files; CABPK renders them with the
// LoadBalancer Secret's bytes, and caplb counts KCP's Machine as a member. The Machine never gets
// a Node here (this API server is not its workload cluster): the Cluster stays uninitialized, so
// KCP goes no further than its first Machine.
func testKubeadmControlPlaneFirstMachine(t *testing.T, s *suite) {
	g := NewWithT(t)
	f := newFixture(t, s, harness.ClusterOptions{})
	kcp := sampleKCP(g, "cluster_kubeadm_arp_ipam.yaml")
	kcp.ObjectMeta = metav1.ObjectMeta{Namespace: f.ns, Name: "c-control-plane"}
	kcp.Spec.Replicas = ptr.To[int32](1)
	kcp.Spec.MachineTemplate.Spec.InfrastructureRef = clusterv1.ContractVersionedObjectReference{
		APIGroup: testinfra.Group, Kind: testinfra.MachineKind + "Template", Name: "c-control-plane"}
	files := kcp.Spec.KubeadmConfigSpec.Files
	for i := range files {
		files[i].ContentFrom.Secret.Name = f.cluster.Name + vip.SecretSuffix
	}
	tmpl := &unstructured.Unstructured{}
	tmpl.SetGroupVersionKind(testinfra.MachineGVK.GroupVersion().WithKind(testinfra.MachineKind + "Template"))
	tmpl.SetNamespace(f.ns)
	tmpl.SetName("c-control-plane")
	tmpl.Object["spec"] = map[string]any{"template": map[string]any{"spec": map[string]any{"noNode": true}}}
	g.Expect(s.env.Client.Create(f.ctx, tmpl)).To(Succeed())
	g.Expect(s.env.Client.Create(f.ctx, kcp)).To(Succeed())
	c := &clusterv1.Cluster{}
	g.Expect(s.env.Client.Get(f.ctx, client.ObjectKeyFromObject(f.cluster), c)).To(Succeed())
	orig := c.DeepCopy()
	c.Spec.ControlPlaneRef = clusterv1.ContractVersionedObjectReference{
		APIGroup: controlplanev1.GroupVersion.Group, Kind: "KubeadmControlPlane", Name: kcp.Name}
	g.Expect(s.env.Client.Patch(f.ctx, c, client.MergeFrom(orig))).To(Succeed())

	const vipAddr = "10.55.0.11"
	f.createLB(t, vipAddr, 0, withARP(vipAddr))
	var machine *clusterv1.Machine
	g.Eventually(func(g Gomega) {
		var ms clusterv1.MachineList
		g.Expect(s.env.Client.List(f.ctx, &ms, client.InNamespace(f.ns))).To(Succeed())
		g.Expect(ms.Items).To(HaveLen(1), "KCP creates its first Machine once the Cluster has an endpoint")
		machine = &ms.Items[0]
		g.Expect(metav1.IsControlledBy(machine, kcp)).To(BeTrue(), "the Machine is KCP's")
		g.Expect(machine.Spec.Bootstrap.ConfigRef.Kind).To(Equal("KubeadmConfig"))
	}, flowTimeout).Should(Succeed())
	f.waitLB(t, "KCP's Machine is a member", func(lb *lbv1.LoadBalancer) bool {
		return lb.Status.TotalTargets == 1 && harness.TargetState(lb, machine.Name) != ""
	})

	cfg := &bootstrapv1.KubeadmConfig{}
	g.Eventually(func(g Gomega) {
		g.Expect(s.env.Client.Get(f.ctx, types.NamespacedName{Namespace: f.ns, Name: machine.Spec.Bootstrap.ConfigRef.Name}, cfg)).To(Succeed())
		g.Expect(cfg.Status.DataSecretName).NotTo(BeEmpty(), "CABPK rendered no bootstrap data; conditions: %v", cfg.Status.Conditions)
	}, flowTimeout).Should(Succeed())
	data := &corev1.Secret{}
	g.Expect(s.env.Client.Get(f.ctx, types.NamespacedName{Namespace: f.ns, Name: cfg.Status.DataSecretName}, data)).To(Succeed())
	boot, err := cloudinit.Parse(data.Data["value"])
	g.Expect(err).NotTo(HaveOccurred())
	agentSecret := f.bootstrapSecret(g)
	for _, sf := range files {
		file := boot.File(sf.Path)
		g.Expect(file).NotTo(BeNil(), "KCP's Machine gets no %s", sf.Path)
		g.Expect(file.Content).To(Equal(asCloudInitWrites(agentSecret.Data[sf.ContentFrom.Secret.Key])), sf.Path)
	}
	g.Expect(string(boot.File("/run/kubeadm/kubeadm.yaml").Content)).To(ContainSubstring("controlPlaneEndpoint: " + vipAddr + ":6443"))
}

// asCloudInitWrites is content as cloud-init writes it from CABPK's data: from a YAML block
// scalar, which ends in one newline. The gossip key (44 bytes of base64 in the Secret) arrives as
// 45; the agent trims key files (modes/agent readKey, TestReadKey), and YAML files end in a
// newline anyway.
func asCloudInitWrites(content []byte) []byte {
	if bytes.HasSuffix(content, []byte("\n")) {
		return content
	}
	return append(bytes.Clone(content), '\n')
}
