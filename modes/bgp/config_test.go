package bgp

import (
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	agentv1 "github.com/caplb/caplb/api/agent/v1alpha1"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

func validConfig() agentv1.BGPConfig {
	return agentv1.BGPConfig{ASN: 64512, Peers: []agentv1.BGPPeer{{Address: "10.0.0.1", ASN: 64500}}}
}

func TestValidate(t *testing.T) {
	d := func(s string) *metav1.Duration {
		v, err := time.ParseDuration(s)
		if err != nil {
			t.Fatal(err)
		}
		return &metav1.Duration{Duration: v}
	}
	tests := []struct {
		name   string
		mutate func(*agentv1.BGPConfig)
		want   []string // substrings of the error; empty: valid
	}{
		{"minimal", func(*agentv1.BGPConfig) {}, nil},
		{"full", func(c *agentv1.BGPConfig) {
			c.RouterID = "10.0.0.11"
			c.ListenPort = 1179
			c.Communities = []string{"65000:100", "no-export"}
			c.LargeCommunities = []string{"4200000000:1:2"}
			c.AddressLinger = d("1s")
			c.Peers = append(c.Peers, agentv1.BGPPeer{Address: "fd00::1", ASN: 64500, Port: 1790, SourceAddress: "fd00::11",
				EBGPMultihop: 2, HoldTime: d("3s"), KeepaliveTime: d("1s"), ConnectRetry: d("2s")})
		}, nil},
		{"no asn", func(c *agentv1.BGPConfig) { c.ASN = 0 }, []string{"bgp.asn: required"}},
		{"ipv6 router id", func(c *agentv1.BGPConfig) { c.RouterID = "fd00::1" }, []string{"bgp.routerID", "not an IPv4 address"}},
		{"no peers", func(c *agentv1.BGPConfig) { c.Peers = nil }, []string{"bgp.peers: at least one peer"}},
		{"bad peer address", func(c *agentv1.BGPConfig) { c.Peers[0].Address = "router.example" }, []string{"bgp.peers[0].address", "not an IP address"}},
		{"duplicate peer", func(c *agentv1.BGPConfig) { c.Peers = append(c.Peers, c.Peers[0]) }, []string{"bgp.peers[1].address", "already bgp.peers[0]"}},
		{"no peer asn", func(c *agentv1.BGPConfig) { c.Peers[0].ASN = 0 }, []string{"bgp.peers[0].asn: required"}},
		{"source family", func(c *agentv1.BGPConfig) { c.Peers[0].SourceAddress = "fd00::2" }, []string{"bgp.peers[0].sourceAddress", "different families"}},
		{"multihop on ibgp", func(c *agentv1.BGPConfig) { c.Peers[0].ASN = c.ASN; c.Peers[0].EBGPMultihop = 2 }, []string{"bgp.peers[0].ebgpMultihop", "iBGP"}},
		{"hold too short", func(c *agentv1.BGPConfig) { c.Peers[0].HoldTime = d("2s") }, []string{"bgp.peers[0].holdTime", "3s minimum"}},
		{"hold fractional", func(c *agentv1.BGPConfig) { c.Peers[0].HoldTime = d("3500ms") }, []string{"bgp.peers[0].holdTime", "whole number of seconds"}},
		{"keepalive not below hold", func(c *agentv1.BGPConfig) { c.Peers[0].HoldTime = d("3s"); c.Peers[0].KeepaliveTime = d("3s") }, []string{"bgp.peers[0].keepaliveTime", "shorter than the hold time"}},
		{"connect retry fractional", func(c *agentv1.BGPConfig) { c.Peers[0].ConnectRetry = d("500ms") }, []string{"bgp.peers[0].connectRetry"}},
		{"bad community", func(c *agentv1.BGPConfig) { c.Communities = []string{"70000:1"} }, []string{"bgp.communities[0]", "0-65535"}},
		{"community without colon", func(c *agentv1.BGPConfig) { c.Communities = []string{"100"} }, []string{"bgp.communities[0]", "ASN:VALUE"}},
		{"bad large community", func(c *agentv1.BGPConfig) { c.LargeCommunities = []string{"1:2"} }, []string{"bgp.largeCommunities[0]", "ASN:LOCAL1:LOCAL2"}},
		{"bad interface", func(c *agentv1.BGPConfig) { c.Interface = "a/b" }, []string{"bgp.interface"}},
		{"negative linger", func(c *agentv1.BGPConfig) { c.AddressLinger = d("-1s") }, []string{"bgp.addressLinger"}},
		{"bfd defaults", func(c *agentv1.BGPConfig) { c.Peers[0].BFD = &agentv1.BFDConfig{} }, nil},
		{"bfd timers", func(c *agentv1.BGPConfig) {
			c.Peers[0].BFD = &agentv1.BFDConfig{MinRx: d("100ms"), MinTx: d("50ms"), Multiplier: 5}
		}, nil},
		{"bfd to an IPv6 peer", func(c *agentv1.BGPConfig) { c.Peers[0].Address = "fd00::1"; c.Peers[0].BFD = &agentv1.BFDConfig{} },
			[]string{"bgp.peers[0].bfd", "IPv4 peers only"}},
		{"bfd interval too short", func(c *agentv1.BGPConfig) { c.Peers[0].BFD = &agentv1.BFDConfig{MinTx: d("5ms")} },
			[]string{"bgp.peers[0].bfd.minTx", "outside 10ms to 60s"}},
		{"bfd multiplier 1", func(c *agentv1.BGPConfig) { c.Peers[0].BFD = &agentv1.BFDConfig{Multiplier: 1} },
			[]string{"bgp.peers[0].bfd.multiplier", "2 or more"}},
		{"several errors at once", func(c *agentv1.BGPConfig) { c.ASN = 0; c.Peers[0].ASN = 0 }, []string{"bgp.asn", "bgp.peers[0].asn"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			c := validConfig()
			tt.mutate(&c)
			err := c.Validate()
			if len(tt.want) == 0 {
				g.Expect(err).NotTo(HaveOccurred())
				return
			}
			g.Expect(err).To(HaveOccurred())
			for _, w := range tt.want {
				g.Expect(err.Error()).To(ContainSubstring(w))
			}
		})
	}
}

// The agent parses its configuration with sigs.k8s.io/yaml: the keys documented in
// docs/backends/bgp.md must land in the fields.
func TestConfigYAML(t *testing.T) {
	g := NewWithT(t)
	var c agentv1.BGPConfig
	g.Expect(yaml.UnmarshalStrict([]byte(`
asn: 64512
routerID: 10.0.0.11
listenPort: 1179
communities: ["65000:100"]
interface: vip0
addressLinger: 2s
peers:
- address: 10.0.0.1
  asn: 64500
  port: 1790
  passwordFile: /etc/caplb/bgp-password
  ebgpMultihop: 2
  holdTime: 3s
  keepaliveTime: 1s
  connectRetry: 2s
`), &c)).To(Succeed())
	g.Expect(c.Validate()).To(Succeed())
	g.Expect(c.ASN).To(BeEquivalentTo(64512))
	g.Expect(c.Interface).To(Equal("vip0"))
	g.Expect(c.AddressLinger.Duration).To(Equal(2 * time.Second))
	g.Expect(c.Peers).To(HaveLen(1))
	p := c.Peers[0]
	g.Expect(p.PasswordFile).To(Equal("/etc/caplb/bgp-password"))
	g.Expect(p.HoldTime.Duration).To(Equal(3 * time.Second))
	g.Expect(p.KeepaliveTime.Duration).To(Equal(time.Second))
	g.Expect(p.EBGPMultihop).To(BeEquivalentTo(2))
}

func TestParseCommunity(t *testing.T) {
	g := NewWithT(t)
	v, err := agentv1.ParseCommunity("65000:100")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(v).To(Equal(uint32(65000<<16 | 100)))
	v, err = agentv1.ParseCommunity("NO-EXPORT")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(v).To(Equal(uint32(0xFFFFFF01)))
	l, err := agentv1.ParseLargeCommunity("4200000000:1:2")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(l).To(Equal(agentv1.LargeCommunity{ASN: 4200000000, Local1: 1, Local2: 2}))
}

func TestReadPassword(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil { // umask-proof
			t.Fatal(err)
		}
		return p
	}
	tests := []struct {
		name, file string
		want       string
		errHas     []string
	}{
		{"0600 with newline", write("ok", "s3cret\n", 0o600), "s3cret", nil},
		{"0400", write("ro", "s3cret", 0o400), "s3cret", nil},
		{"group readable", write("grp", "s3cret", 0o640), "", []string{"f:", "0640", "chmod 600"}},
		{"world readable", write("wrl", "s3cret", 0o644), "", []string{"0644"}},
		{"empty", write("empty", "\n", 0o600), "", []string{"is empty"}},
		{"too long", write("long", string(make([]byte, 81)), 0o600), "", []string{"at most 80"}},
		{"missing", filepath.Join(dir, "nope"), "", []string{"f:", "no such file"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			pw, err := readPassword("f", tt.file)
			if tt.errHas == nil {
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(pw).To(Equal(tt.want))
				return
			}
			g.Expect(err).To(HaveOccurred())
			for _, w := range tt.errHas {
				g.Expect(err.Error()).To(ContainSubstring(w))
			}
			g.Expect(err.Error()).NotTo(ContainSubstring("s3cret"))
		})
	}
}

func TestValidateVIPs(t *testing.T) {
	g := NewWithT(t)
	c := validConfig() // one IPv4 peer
	v4, v6 := netip.MustParseAddr("192.0.2.10"), netip.MustParseAddr("2001:db8::10")
	g.Expect(c.ValidateVIPs([]netip.Addr{v4})).To(Succeed())
	g.Expect(c.ValidateVIPs([]netip.Addr{v4, v6})).To(MatchError(And(
		ContainSubstring("bgp.peers"), ContainSubstring("2001:db8::10 needs an IPv6 peer"))))
	c.Peers = append(c.Peers, agentv1.BGPPeer{Address: "2001:db8::1", ASN: 64500})
	g.Expect(c.ValidateVIPs([]netip.Addr{v4, v6})).To(Succeed())
}
