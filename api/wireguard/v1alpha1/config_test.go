package v1alpha1

import (
	"os"
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

const testPub = "b+EBKsSSrbtmLyuXVg/FMN0sd72nJoT/LLwgKc258WM="

func TestParseGatewayDefaultsAndErrors(t *testing.T) {
	base := "name: gw1\nregistration: {tokenFile: /etc/caplb/join-token}\n"
	good := base + "health: {caFile: /etc/caplb/ca.crt}\n"
	c, err := ParseGateway([]byte(good))
	g := NewWithT(t)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(c.Listen).To(Equal(":6443"))
	g.Expect(c.WireGuard.ListenPort).To(Equal(51820))
	g.Expect(c.WireGuard.TunnelPrefix).To(Equal(DefaultTunnelPrefix))
	g.Expect(c.Registration.Listen).To(Equal(":51821"))
	g.Expect(c.Health.ServerName).To(Equal("kubernetes"))
	g.Expect(c.DialTimeout.Duration).To(Equal(time.Second))
	g.Expect(c.DrainTimeout.Duration).To(Equal(30 * time.Second))
	g.Expect(c.MaxProcs).To(Equal(1))
	c, err = ParseGateway([]byte(good + "maxProcs: -1\n"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(c.MaxProcs).To(Equal(-1), "one per CPU stays -1 (the command leaves Go's default)")
	g.Expect(c.Metrics.Listen).To(BeEmpty(), "no metrics listener unless asked")
	c, err = ParseGateway([]byte(good + "metrics: {listen: \":7477\"}\n"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(c.Metrics.Listen).To(Equal(":7477"))
	c, err = ParseGateway([]byte(good + "wireguard: {device: tun}\n"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(c.WireGuard.DeviceName).To(Equal("caplb-gw0"))

	for _, tc := range []struct{ name, yaml, want string }{
		{"unknown field", good + "bogus: 1\n", "unknown field"},
		{"no CA", "name: gw1\nregistration: {tokenFile: /t}\n", "health.caFile: is empty"},
		{"CA and insecure", base + "health: {caFile: /c, insecureSkipVerify: true}\n", "health.insecureSkipVerify"},
		{"no token", "name: gw1\nhealth: {caFile: /c}\n", "registration.tokenFile: is empty"},
		{"no way in", "name: gw1\nregistration: {listen: \"0\"}\nhealth: {caFile: /c}\n", "peers: is empty"},
		{"bad listen", good + "listen: nope\n", "listen: \"nope\" is not host:port"},
		{"bad metrics listen", good + "metrics: {listen: \"7477\"}\n", "metrics.listen: \"7477\" is not host:port"},
		{"bad prefix", good + "wireguard: {tunnelPrefix: 10.0.0.0/30}\n", "wireguard.tunnelPrefix"},
		{"host bits", good + "wireguard: {tunnelPrefix: \"fd00::1/64\"}\n", "host bits"},
		{"bad mtu", good + "wireguard: {mtu: 500}\n", "wireguard.mtu"},
		{"bad duration", good + "dialTimeout: 5\n", "duration"},
		{"bad peer key", good + "peers: [{name: m1, publicKey: xyz}]\n", "peers[0].publicKey"},
		{"dup peer", good + "peers: [{name: m1, publicKey: " + testPub + "}, {name: m1, publicKey: " + testPub + "}]\n", "peers[1].name: \"m1\" is listed twice"},
		{"hedge after timeout", good + "hedgeDelay: 2s\n", "hedgeDelay: 2s is longer than dialTimeout"},
		{"bad maxProcs", good + "maxProcs: -2\n", "maxProcs: -2 is out of range"},
		{"bad fall", base + "health: {caFile: /c, fall: -1}\n", "health.fall"},
		{"unknown device", good + "wireguard: {device: kernel}\n", "wireguard.device: \"kernel\" is unknown; use netstack (default) or tun"},
		{"device name without tun", good + "wireguard: {deviceName: wg9}\n", "wireguard.deviceName: is set while wireguard.device is netstack"},
		{"bad device name", good + "wireguard: {device: tun, deviceName: a-name-far-too-long}\n", "wireguard.deviceName: \"a-name-far-too-long\" is not an interface name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseGateway([]byte(tc.yaml))
			NewWithT(t).Expect(err).To(MatchError(ContainSubstring(tc.want)))
		})
	}
}

func TestParseMemberDefaultsAndErrors(t *testing.T) {
	good := "nodeName: cp-1\ntokenFile: /etc/caplb/join-token\ngateways: [{endpoint: \"203.0.113.10:51820\"}]\n"
	c, err := ParseMember([]byte(good))
	g := NewWithT(t)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(c.Gateways[0].Registration).To(Equal("203.0.113.10:51821"))
	g.Expect(c.PersistentKeepalive.Duration).To(Equal(time.Second))
	g.Expect(c.Upstream).To(Equal("127.0.0.1:6443"))
	g.Expect(c.TunnelPort).To(Equal(6443))
	g.Expect(c.MaxProcs).To(Equal(1))
	g.Expect(c.Device).To(Equal(DeviceNetstack))
	c, err = ParseMember([]byte(good + "device: tun\n"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(c.DeviceName).To(Equal("caplb-wg0"))

	for _, tc := range []struct{ name, yaml, want string }{
		{"bad maxProcs", good + "maxProcs: 5000\n", "maxProcs: 5000 is out of range"},
		{"tun on another port than the API server's", good + "device: tun\ntunnelPort: 16443\n", "tunnelPort: 16443 differs from upstream's port 6443"},
		{"tun with the API server's port", good + "device: tun\ntunnelPort: 6444\nupstream: 127.0.0.1:6444\n", ""},
		{"unknown device", good + "device: gvisor\n", "device: \"gvisor\" is unknown"},
		{"no gateways", "nodeName: a\ntokenFile: /t\n", "gateways: is empty"},
		{"no token", "nodeName: a\ngateways: [{endpoint: \"h:1\"}]\n", "tokenFile: is empty"},
		{"pinned needs key", "nodeName: a\ngateways: [{endpoint: \"h:1\", registration: \"0\"}]\n", "gateways[0].publicKey: is empty"},
		{"pinned ok without token", "nodeName: a\ngateways: [{endpoint: \"h:1\", registration: \"0\", publicKey: " + testPub + "}]\n", ""},
		{"dup endpoint", "nodeName: a\ntokenFile: /t\ngateways: [{endpoint: \"h:1\"}, {endpoint: \"h:1\"}]\n", "gateways[1].endpoint: \"h:1\" is listed twice"},
		{"keepalive fraction", good + "persistentKeepalive: 500ms\n", "whole seconds"},
		{"bad upstream", good + "upstream: \":6443\"\n", "upstream: \":6443\" has no host"},
		{"unknown field", good + "vips: []\n", "unknown field"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseMember([]byte(tc.yaml))
			if tc.want == "" {
				NewWithT(t).Expect(err).NotTo(HaveOccurred())
				return
			}
			NewWithT(t).Expect(err).To(MatchError(ContainSubstring(tc.want)))
		})
	}
}

// The shipped samples parse, and say the defaults they claim.
func TestSampleConfigs(t *testing.T) {
	g := NewWithT(t)
	b, err := os.ReadFile("../../../config/wireguard/gateway.yaml")
	g.Expect(err).NotTo(HaveOccurred())
	gc, err := ParseGateway(b)
	g.Expect(err).NotTo(HaveOccurred())
	def := NewGateway()
	def.Name, def.Registration.TokenFile, def.Health.CAFile = gc.Name, gc.Registration.TokenFile, gc.Health.CAFile
	def.Default()
	g.Expect(*gc).To(Equal(def))

	b, err = os.ReadFile("../../../config/wireguard/member.yaml")
	g.Expect(err).NotTo(HaveOccurred())
	mc, err := ParseMember(b)
	g.Expect(err).NotTo(HaveOccurred())
	mdef := MemberConfig{TypeMeta: NewMember().TypeMeta, NodeName: mc.NodeName, TokenFile: mc.TokenFile, Gateways: []MemberGateway{{Endpoint: "203.0.113.10:51820"}, {Endpoint: "203.0.113.11:51820"}}}
	mdef.Default()
	g.Expect(*mc).To(Equal(mdef))
}

// Files written before the schema was versioned (no apiVersion, no kind) load as v1alpha1; a
// file of another version or kind is refused with the line to write.
func TestVersionedFiles(t *testing.T) {
	legacyGateway := "name: gw1\nregistration: {tokenFile: /t}\nhealth: {caFile: /c}\n"
	legacyMember := "nodeName: cp-1\ntokenFile: /t\ngateways: [{endpoint: \"203.0.113.10:51820\"}]\n"
	g := NewWithT(t)
	gc, err := ParseGateway([]byte(legacyGateway))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(gc.TypeMeta).To(Equal(NewGateway().TypeMeta))
	mc, err := ParseMember([]byte(legacyMember))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(mc.TypeMeta).To(Equal(NewMember().TypeMeta))

	gv := "apiVersion: " + APIVersion + "\nkind: " + GatewayKind + "\n"
	mv := "apiVersion: " + APIVersion + "\nkind: " + MemberKind + "\n"
	for _, tc := range []struct{ name, yaml, want string }{
		{"gateway v1alpha1", gv + legacyGateway, ""},
		{"member v1alpha1", mv + legacyMember, ""},
		{"member file given to a gateway", mv + legacyGateway, "kind: " + GatewayKind},
		{"future version", "apiVersion: wireguard.loadbalancer.cluster.x-k8s.io/v9\nkind: " + GatewayKind + "\n" + legacyGateway, "apiVersion: " + APIVersion},
		{"kind without apiVersion", "kind: " + GatewayKind + "\n" + legacyGateway, "apiVersion: " + APIVersion},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var err error
			if tc.yaml[len(tc.yaml)-len(legacyMember):] == legacyMember {
				_, err = ParseMember([]byte(tc.yaml))
			} else {
				_, err = ParseGateway([]byte(tc.yaml))
			}
			if tc.want == "" {
				NewWithT(t).Expect(err).NotTo(HaveOccurred())
				return
			}
			NewWithT(t).Expect(err).To(MatchError(ContainSubstring(tc.want)))
		})
	}
}
