//go:build linux

package realcp

import (
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	agentv1 "github.com/caplb/caplb/api/agent/v1alpha1"
	"github.com/caplb/caplb/e2e/lab"
	"github.com/caplb/caplb/e2e/lab/kubeadm"
)

// The machines' agent files are the manager's rendering for the sample's LoadBalancer, written
// as the sample's bootstrap writes them; the lab changes only the Node API (withoutNodeAPI).
func TestRenderedBootstrap(t *testing.T) {
	g := NewWithT(t)
	c := &Lab{}
	for i, name := range []string{"cp-1", "cp-2", "cp-3"} {
		c.machines = append(c.machines, &machine{Machine: kubeadm.Machine{Name: name,
			Addr: netip.AddrFrom4([4]byte{10, 48, 0, byte(11 + i)}), Root: filepath.Join(t.TempDir(), name)}})
	}
	b, err := c.renderBootstrap()
	g.Expect(err).NotTo(HaveOccurred())
	m := c.machines[1]
	g.Expect(lab.WriteBootFiles(m.Root, b.files, b.secret)).To(Succeed(), "the sample's files find every key in the Secret")

	for _, f := range []string{agentv1.ConfigPath, agentv1.GossipKeyPath, kubeadm.AgentManifest} {
		info, err := os.Stat(m.Path(f))
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(info.Mode().Perm()).To(Equal(os.FileMode(0o600)), f)
	}
	raw, err := os.ReadFile(m.Path(agentv1.ConfigPath))
	g.Expect(err).NotTo(HaveOccurred())
	cfg, err := agentv1.Parse(raw)
	g.Expect(err).NotTo(HaveOccurred(), "the agent accepts it:\n%s", raw)
	g.Expect(cfg.VIPs).To(Equal([]string{vip.String()}))
	g.Expect(cfg.Members).To(Equal([]agentv1.MemberConfig{{Name: "cp-1", Address: "10.48.0.11"},
		{Name: "cp-2", Address: "10.48.0.12"}, {Name: "cp-3", Address: "10.48.0.13"}}))
	g.Expect(string(raw)).NotTo(ContainSubstring("nodeName"), "the hostname, as on a node: the lab's kubelet sets the machine's")
	g.Expect(cfg.Health.URL).To(Equal("https://127.0.0.1:6443/readyz"))
	g.Expect(cfg.Health.CAFile).To(Equal(filepath.Join(kubeadm.PKIDir, "ca.crt")), "kubeadm's cluster CA")
	g.Expect(cfg.Election.SecretKeyFile).To(Equal(agentv1.GossipKeyPath))
	g.Expect(cfg.Admin.Listen).To(Equal("127.0.0.1:7473"), "the lab reads /status there")
	g.Expect(cfg.NodeAPI.Kubeconfig).To(BeEmpty(), "withoutNodeAPI")
	g.Expect(cfg.Quiesce.Drain.Duration).To(Equal(5*time.Second), "the sample's timers")

	pod := &corev1.Pod{}
	man, err := os.ReadFile(m.Path(kubeadm.AgentManifest))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(yaml.UnmarshalStrict(man, pod)).To(Succeed())
	sc := pod.Spec.Containers[0].SecurityContext
	g.Expect(sc.Capabilities.Drop).To(ConsistOf(corev1.Capability("ALL")))
	g.Expect(sc.Capabilities.Add).To(ConsistOf(corev1.Capability("NET_ADMIN"), corev1.Capability("NET_RAW")))
}
