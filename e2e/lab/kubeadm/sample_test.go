//go:build linux

package kubeadm

import (
	"net/netip"
	"os"
	"testing"

	. "github.com/onsi/gomega"
)

// The ARP sample's API server flags reach kubeadm's ClusterConfiguration: what the shipped
// sample asks for is what the labs' kube-apiservers run with.
func TestSampleAPIServerArgs(t *testing.T) {
	g := NewWithT(t)
	args, err := SampleAPIServerArgs("cluster_kubeadm_arp_ipam.yaml")
	g.Expect(err).NotTo(HaveOccurred())
	names := map[string]string{}
	for _, a := range args {
		names[a.Name] = a.Value
	}
	g.Expect(names).To(HaveKeyWithValue("shutdown-delay-duration", Not(BeEmpty())))
	g.Expect(names).To(HaveKeyWithValue("goaway-chance", Not(BeEmpty())))

	c := Cluster{Name: "lab", Endpoint: netip.MustParseAddr("10.47.0.100"), KubernetesVersion: "v1.36.3", APIServerArgs: args}
	m := Machine{Name: "cp-1", Addr: netip.MustParseAddr("10.47.0.11"), Root: t.TempDir()}
	g.Expect(c.writeConfig(m, nil)).To(Succeed())
	b, err := os.ReadFile(m.Path(ConfigPath))
	g.Expect(err).NotTo(HaveOccurred())
	for name, value := range names {
		g.Expect(string(b)).To(ContainSubstring("  - name: %s\n    value: %q\n", name, value))
	}

	_, err = SampleAPIServerArgs("no-such-sample.yaml")
	g.Expect(err).To(HaveOccurred())
}
