package wireguard

import (
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
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

func TestTunnelAddress(t *testing.T) {
	g := NewWithT(t)
	k, err := ParseKey(testPub)
	g.Expect(err).NotTo(HaveOccurred())
	for _, p := range []string{DefaultTunnelPrefix, "fd00:1::/48", "fd00::/112", "10.250.0.0/16", "10.0.0.0/8", "192.168.7.0/24"} {
		prefix := netip.MustParsePrefix(p)
		a := TunnelAddress(prefix, k)
		g.Expect(prefix.Contains(a)).To(BeTrue(), "%s in %s", a, p)
		g.Expect(TunnelAddress(prefix, k)).To(Equal(a), "deterministic")
		if a.Is4() {
			g.Expect(a).NotTo(Equal(prefix.Addr()))
		}
	}
	// Different keys, different addresses (sanity over a few hundred keys in a /64).
	seen := map[netip.Addr]bool{}
	prefix := netip.MustParsePrefix(DefaultTunnelPrefix)
	for i := range 300 {
		var kk Key
		kk[0], kk[1] = byte(i), byte(i>>8)
		a := TunnelAddress(prefix, kk)
		g.Expect(seen[a]).To(BeFalse())
		seen[a] = true
	}
}

func TestKeyAndTokenFiles(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "sub", "member.key")
	k1, err := LoadOrCreateKey(path)
	g.Expect(err).NotTo(HaveOccurred())
	fi, err := os.Stat(path)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(fi.Mode().Perm()).To(Equal(os.FileMode(0o600)))
	k2, err := LoadOrCreateKey(path)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(k2).To(Equal(k1), "a second start keeps the key")

	g.Expect(os.Chmod(path, 0o644)).To(Succeed())
	_, err = LoadOrCreateKey(path)
	g.Expect(err).To(MatchError(ContainSubstring("chmod 600")))

	tok := filepath.Join(dir, "token")
	g.Expect(os.WriteFile(tok, []byte("short\n"), 0o600)).To(Succeed())
	_, err = LoadToken(tok)
	g.Expect(err).To(MatchError(ContainSubstring("at least 16")))
	g.Expect(os.WriteFile(tok, []byte(strings.Repeat("x", 32)), 0o640)).To(Succeed())
	g.Expect(os.Chmod(tok, 0o640)).To(Succeed())
	_, err = LoadToken(tok)
	g.Expect(err).To(MatchError(ContainSubstring("group or others")))
}

func TestRegistrationMACs(t *testing.T) {
	g := NewWithT(t)
	token := []byte("cluster-token-0123456789")
	now := time.Unix(1_800_000_000, 0)
	req := &RegisterRequest{Node: "cp-1", PublicKey: testPub, Time: now.Unix()}
	req.Sign("register", token)
	g.Expect(req.Verify("register", token, now)).To(Succeed())
	g.Expect(req.Verify("deregister", token, now)).NotTo(Succeed(), "a register MAC does not deregister")
	g.Expect(req.Verify("register", []byte("other-token-0123456789"), now)).NotTo(Succeed())
	g.Expect(req.Verify("register", token, now.Add(10*time.Minute))).To(MatchError(ContainSubstring("clock")))
	tampered := *req
	tampered.Node = "cp-2"
	g.Expect(tampered.Verify("register", token, now)).NotTo(Succeed())

	resp := &RegisterResponse{GatewayName: "gw1", GatewayPublicKey: testPub, GatewayAddress: "fd63:6c62:7767::1",
		MemberAddress: "fd63:6c62:7767::2", TunnelPrefix: DefaultTunnelPrefix, MemberPort: 6443}
	resp.Sign(req, token)
	g.Expect(resp.Verify(req, token)).To(Succeed())
	forged := *resp
	forged.GatewayPublicKey = "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="
	g.Expect(forged.Verify(req, token)).NotTo(Succeed())
	other := *req
	other.Time++
	g.Expect(resp.Verify(&other, token)).NotTo(Succeed(), "an answer is bound to its request")
}

// The shipped samples parse, and say the defaults they claim.
func TestSampleConfigs(t *testing.T) {
	g := NewWithT(t)
	b, err := os.ReadFile("../../config/wireguard/gateway.yaml")
	g.Expect(err).NotTo(HaveOccurred())
	gc, err := ParseGateway(b)
	g.Expect(err).NotTo(HaveOccurred())
	var def GatewayConfig
	def.Name, def.Registration.TokenFile, def.Health.CAFile = gc.Name, gc.Registration.TokenFile, gc.Health.CAFile
	def.Default()
	g.Expect(*gc).To(Equal(def))

	b, err = os.ReadFile("../../config/wireguard/member.yaml")
	g.Expect(err).NotTo(HaveOccurred())
	mc, err := ParseMember(b)
	g.Expect(err).NotTo(HaveOccurred())
	mdef := MemberConfig{NodeName: mc.NodeName, TokenFile: mc.TokenFile, Gateways: []MemberGateway{{Endpoint: "203.0.113.10:51820"}, {Endpoint: "203.0.113.11:51820"}}}
	mdef.Default()
	g.Expect(*mc).To(Equal(mdef))
}

func TestPoolForgetsSilentMembers(t *testing.T) {
	g := NewWithT(t)
	p := newPool(2, 3)
	now := time.Now()
	mk := func(node string, i byte, static bool, seen time.Time) *backend {
		var k Key
		k[0] = i
		b := &backend{node: node, pub: k, static: static, lastSeen: seen, conns: map[*proxied]struct{}{}}
		p.backends[k] = b
		return b
	}
	silent := mk("gone", 1, false, now.Add(-time.Hour))
	handshaking := mk("quiet-but-alive", 2, false, now.Add(-time.Hour))
	mk("fresh", 3, false, now)
	mk("static", 4, true, now.Add(-time.Hour))
	got := p.forget(map[Key]time.Time{handshaking.pub: now}, now.Add(-10*time.Minute), now)
	g.Expect(got).To(ConsistOf(silent))
	_, removed := p.expired(now)
	g.Expect(removed).To(ConsistOf(silent))
	g.Expect(p.backends).To(HaveLen(3))
}

func TestApplyMaxProcs(t *testing.T) {
	orig := runtime.GOMAXPROCS(0)
	t.Cleanup(func() { runtime.GOMAXPROCS(orig) })
	for _, tc := range []struct {
		name string
		env  string
		n    int
		want int // after starting from 4
	}{
		{"default one thread", "", 1, 1},
		{"explicit", "", 3, 3},
		{"one per CPU leaves Go's default", "", -1, 4},
		{"the environment wins", "4", 1, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("GOMAXPROCS", tc.env)
			runtime.GOMAXPROCS(4)
			applyMaxProcs(tc.n, testr.New(t))
			NewWithT(t).Expect(runtime.GOMAXPROCS(0)).To(Equal(tc.want))
		})
	}
}
