package integration

import (
	"path"
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/runtime"
	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentv1 "github.com/caplb/caplb/api/agent/v1alpha1"
	lbv1 "github.com/caplb/caplb/api/v1alpha1"
	"github.com/caplb/caplb/config/samples"
	"github.com/caplb/caplb/e2e/harness"
	"github.com/caplb/caplb/providers/vip"
)

// The KubeadmControlPlane samples write exactly the bootstrap Secret's files where the agent and
// the kubelet look for them, and KCP's real CRD (from the CAPI module) accepts them server-side.
func testVIPSamplesKCP(t *testing.T, s *suite) {
	for _, file := range []string{"cluster_kubeadm_arp_ipam.yaml", "cluster_kubeadm_bgp.yaml"} {
		t.Run(file, func(t *testing.T) {
			g := NewWithT(t)
			data, err := samples.FS.ReadFile(file)
			g.Expect(err).NotTo(HaveOccurred())
			objs, err := harness.Decode(data)
			g.Expect(err).NotTo(HaveOccurred())
			var (
				lb  *lbv1.LoadBalancer
				kcp *controlplanev1.KubeadmControlPlane
			)
			for _, o := range objs {
				switch o.GetKind() {
				case "LoadBalancer":
					lb = &lbv1.LoadBalancer{}
					g.Expect(runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, lb)).To(Succeed())
				case "KubeadmControlPlane":
					kcp = &controlplanev1.KubeadmControlPlane{}
					g.Expect(runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, kcp)).To(Succeed())
					g.Expect(s.env.Client.Create(t.Context(), o, client.DryRunAll, client.FieldValidation("Strict"))).To(Succeed(),
						"KCP's CRD must accept the sample")
				}
			}
			g.Expect(lb).NotTo(BeNil())
			g.Expect(kcp).NotTo(BeNil())

			want := map[string]string{
				agentv1.ConfigPath:    agentv1.SecretConfigKey,
				agentv1.GossipKeyPath: agentv1.SecretGossipKeyKey,
				path.Join(vip.Flavors[vip.FlavorKubeadm].ManifestDir, vip.ManifestFile): agentv1.SecretManifestKey,
			}
			if lb.Spec.Backend.BGP != nil {
				for i, p := range lb.Spec.Backend.BGP.Peers {
					if p.PasswordSecretRef != nil {
						want[path.Join(vip.ConfigDir, vip.PasswordKey(i))] = vip.PasswordKey(i)
					}
				}
			}
			got := map[string]string{}
			for _, f := range kcp.Spec.KubeadmConfigSpec.Files {
				g.Expect(f.ContentFrom.Secret.Name).To(Equal(vip.SecretName(lb)), "file %s", f.Path)
				g.Expect(f.Permissions).To(Equal("0600"), "file %s holds secrets or runs as root", f.Path)
				got[f.Path] = f.ContentFrom.Secret.Key
			}
			g.Expect(got).To(Equal(want))
			g.Expect(kcp.Spec.KubeadmConfigSpec.PreKubeadmCommands).To(ContainElement(ContainSubstring("--node-ip=")),
				"the samples pin the kubelet's node IP (the VIP must never become the InternalIP)")
		})
	}
}
