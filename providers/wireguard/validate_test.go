package wireguard

import (
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	lbv1 "github.com/caplb/caplb/api/v1alpha1"
	wg "github.com/caplb/caplb/api/wireguard/v1alpha1"
)

const testKey = "HIgo9xNzJMWLKASShiTqIybxZ0U3wGLiUeJ1PKf8ykw="

func wgLB() *lbv1.LoadBalancer {
	return &lbv1.LoadBalancer{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "lb", UID: "uid-1"},
		Spec: lbv1.LoadBalancerSpec{
			ClusterName: "c",
			Endpoint:    lbv1.APIEndpoint{Host: "api.edge.example.com", Port: 7443},
			Backend: lbv1.Backend{WireGuard: &lbv1.WireGuardBackend{Gateways: []lbv1.WireGuardGateway{
				{Name: "gw-1", Address: "203.0.113.10"},
				{Name: "gw-2", Address: "203.0.113.11", Port: 51830, PublicKey: testKey},
			}}},
		},
	}
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(lb *lbv1.LoadBalancer)
		// want are substrings of the errors, in order; none means valid.
		want []string
	}{
		{"valid", func(*lbv1.LoadBalancer) {}, nil},
		{"one gateway, no host: its address is the endpoint", func(lb *lbv1.LoadBalancer) {
			lb.Spec.Endpoint.Host = ""
			lb.Spec.Backend.WireGuard.Gateways = lb.Spec.Backend.WireGuard.Gateways[:1]
		}, nil},
		{"IPv4 tunnel", func(lb *lbv1.LoadBalancer) { lb.Spec.Backend.WireGuard.Tunnel.Family = lbv1.FamilyIPv4 }, nil},
		{"no cluster", func(lb *lbv1.LoadBalancer) { lb.Spec.ClusterName = "" }, []string{"spec.clusterName"}},
		{"no gateways", func(lb *lbv1.LoadBalancer) { lb.Spec.Backend.WireGuard.Gateways = nil },
			[]string{"spec.backend.wireguard.gateways: Required"}},
		{"two gateways, no host", func(lb *lbv1.LoadBalancer) { lb.Spec.Endpoint.Host = "" },
			[]string{"spec.endpoint.host: Required value: required with more than one gateway"}},
		{"duplicate name", func(lb *lbv1.LoadBalancer) { lb.Spec.Backend.WireGuard.Gateways[1].Name = "gw-1" },
			[]string{"gateways[1].name: Duplicate"}},
		{"same address and port", func(lb *lbv1.LoadBalancer) {
			gws := lb.Spec.Backend.WireGuard.Gateways
			gws[1].Address, gws[1].Port = gws[0].Address, 51820
		}, []string{"gateways[1].port: Duplicate"}},
		{"two gateways on one address, adjacent ports", func(lb *lbv1.LoadBalancer) {
			gws := lb.Spec.Backend.WireGuard.Gateways
			gws[1].Address, gws[1].Port = gws[0].Address, 51821
		}, []string{"gateways[1].port", "at least 2 apart"}},
		{"two gateways on one address, 2 apart", func(lb *lbv1.LoadBalancer) {
			gws := lb.Spec.Backend.WireGuard.Gateways
			gws[1].Address, gws[1].Port = gws[0].Address, 51822
		}, nil},
		{"endpoint port on the registration port", func(lb *lbv1.LoadBalancer) { lb.Spec.Endpoint.Port = 51821 },
			[]string{"gateways[0].port", "do not overlap"}},
		{"bad key", func(lb *lbv1.LoadBalancer) { lb.Spec.Backend.WireGuard.Gateways[1].PublicKey = "abc" },
			[]string{"gateways[1].publicKey", "wg pubkey"}},
		{"prefix of the wrong family", func(lb *lbv1.LoadBalancer) {
			lb.Spec.Backend.WireGuard.Tunnel = lbv1.WireGuardTunnel{Family: lbv1.FamilyIPv4, Prefix: "fd00::/64"}
		}, []string{"tunnel.prefix", "IPv4"}},
		{"prefix too small", func(lb *lbv1.LoadBalancer) {
			lb.Spec.Backend.WireGuard.Tunnel = lbv1.WireGuardTunnel{Prefix: "fd00::/120"}
		}, []string{"tunnel.prefix", "/48 to /112"}},
		{"keepalive not whole seconds", func(lb *lbv1.LoadBalancer) {
			lb.Spec.Backend.WireGuard.PersistentKeepalive = &lbv1.Duration{Duration: 1500 * time.Millisecond}
		}, []string{"persistentKeepalive", "whole seconds"}},
		{"no drain", func(lb *lbv1.LoadBalancer) { lb.Spec.Quiesce.DrainPeriod = &lbv1.Duration{} },
			[]string{"spec.quiesce.drainPeriod", "must be positive"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			lb := wgLB()
			tc.mutate(lb)
			errs := New(Options{AgentImage: "img"}).Validate(lb)
			if len(tc.want) == 0 {
				g.Expect(errs).To(BeEmpty())
				return
			}
			g.Expect(errs).NotTo(BeEmpty())
			msg := errs.ToAggregate().Error()
			for _, w := range tc.want {
				g.Expect(msg).To(ContainSubstring(w))
			}
		})
	}
}

func TestValidateNeedsAnImage(t *testing.T) {
	g := NewWithT(t)
	errs := New(Options{}).Validate(wgLB())
	g.Expect(errs.ToAggregate().Error()).To(ContainSubstring("spec.backend.wireguard.agent.image"))
	lb := wgLB()
	lb.Spec.Backend.WireGuard.Agent.Image = "registry.example.com/caplb-agent:v1"
	g.Expect(New(Options{}).Validate(lb)).To(BeEmpty())
}

// The rendered files are what the member and gateways accept, with this cluster's ports and
// paths: a shared gateway host keeps each cluster's files in a directory of its own.
func TestRender(t *testing.T) {
	g := NewWithT(t)
	lb := wgLB()
	lb.Spec.TargetPort = 6444
	lb.Spec.Backend.WireGuard.Tunnel = lbv1.WireGuardTunnel{Family: lbv1.FamilyIPv4}
	lb.Spec.Backend.WireGuard.Health = lbv1.WireGuardHealth{ServerName: "api.internal", Rise: 3,
		Interval: &lbv1.Duration{Duration: 500 * time.Millisecond}}
	lb.Spec.Quiesce.DrainPeriod = &lbv1.Duration{Duration: 20 * time.Second}

	m := renderMember(lb)
	g.Expect(checkMember(m)).To(Succeed())
	g.Expect(m.Gateways).To(Equal([]wg.MemberGateway{
		{Endpoint: "203.0.113.10:51820", Registration: "203.0.113.10:51821"},
		{Endpoint: "203.0.113.11:51830", Registration: "203.0.113.11:51831", PublicKey: testKey},
	}))
	g.Expect(m.TunnelPrefix).To(Equal(lbv1.DefaultWireGuardPrefixIPv4))
	g.Expect(m.Upstream).To(Equal("127.0.0.1:6444"))
	g.Expect(m.PersistentKeepalive.Duration).To(Equal(time.Second))
	g.Expect(m.DrainTimeout.Duration).To(Equal(20 * time.Second))
	g.Expect(m.NodeName).To(BeEmpty(), "the node's hostname, known only there")

	gc := renderGateway(lb, lb.Spec.Backend.WireGuard.Gateways[1])
	g.Expect(checkGateway(gc)).To(Succeed())
	g.Expect(gc.Name).To(Equal("gw-2"))
	g.Expect(gc.Listen).To(Equal(":7443"))
	g.Expect(gc.WireGuard.ListenPort).To(Equal(51830))
	g.Expect(gc.Registration.Listen).To(Equal(":51831"))
	g.Expect(gc.Admin.Listen).To(Equal("127.0.0.1:51830"))
	g.Expect(gc.WireGuard.TunnelPrefix).To(Equal(m.TunnelPrefix), "gateways and members derive the same addresses")
	g.Expect(gc.Health.ServerName).To(Equal("api.internal"))
	g.Expect(gc.Health.Rise).To(Equal(3))
	g.Expect(gc.Health.Interval.Duration).To(Equal(500 * time.Millisecond))
	g.Expect(gc.DrainTimeout.Duration).To(Equal(20 * time.Second))
	for _, p := range []string{gc.WireGuard.PrivateKeyFile, gc.StateFile, gc.Registration.TokenFile, gc.Health.CAFile} {
		g.Expect(strings.HasPrefix(p, "/var/lib/caplb/wireguard/ns/c/")).To(BeTrue(), p)
	}

	pod, err := renderManifest("img", "")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(pod)).To(ContainSubstring("- wireguard"))
	g.Expect(string(pod)).NotTo(ContainSubstring("NET_ADMIN"), "userspace WireGuard needs no capability")
	g.Expect(string(pod)).NotTo(ContainSubstring("kubelet.conf"), "the member runs before any kubeconfig exists")
}

// device: tun: members and gateways meet on the API server's own port (no proxy on the member
// to translate), and the member's static pod gets NET_ADMIN and /dev/net/tun, nothing more.
func TestRenderTUNDevice(t *testing.T) {
	g := NewWithT(t)
	lb := wgLB()
	lb.Spec.TargetPort = 6444
	lb.Spec.Backend.WireGuard.Device = lbv1.WireGuardDeviceTUN

	m := renderMember(lb)
	g.Expect(checkMember(m)).To(Succeed())
	g.Expect(m.Device).To(Equal(wg.DeviceTUN))
	g.Expect(m.TunnelPort).To(Equal(6444))
	gc := renderGateway(lb, lb.Spec.Backend.WireGuard.Gateways[0])
	g.Expect(checkGateway(gc)).To(Succeed())
	g.Expect(gc.WireGuard.Device).To(Equal(wg.DeviceTUN))
	g.Expect(gc.MemberPort).To(Equal(6444))

	pod, err := renderManifest("img", lbv1.WireGuardDeviceTUN)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(pod)).To(ContainSubstring("- NET_ADMIN"))
	g.Expect(string(pod)).NotTo(ContainSubstring("NET_RAW"))
	g.Expect(string(pod)).To(ContainSubstring("path: /dev/net/tun"))
	g.Expect(string(pod)).To(ContainSubstring("type: CharDevice"))
}
