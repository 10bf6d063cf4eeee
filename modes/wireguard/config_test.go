package wireguard

import (
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	wgapi "github.com/caplb/caplb/api/wireguard/v1alpha1"

	"github.com/go-logr/logr/testr"
	. "github.com/onsi/gomega"
)

const testPub = "b+EBKsSSrbtmLyuXVg/FMN0sd72nJoT/LLwgKc258WM="

func TestTunnelAddress(t *testing.T) {
	g := NewWithT(t)
	k, err := wgapi.ParseKey(testPub)
	g.Expect(err).NotTo(HaveOccurred())
	for _, p := range []string{wgapi.DefaultTunnelPrefix, "fd00:1::/48", "fd00::/112", "10.250.0.0/16", "10.0.0.0/8", "192.168.7.0/24"} {
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
	prefix := netip.MustParsePrefix(wgapi.DefaultTunnelPrefix)
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
		MemberAddress: "fd63:6c62:7767::2", TunnelPrefix: wgapi.DefaultTunnelPrefix, MemberPort: 6443}
	resp.Sign(req, token)
	g.Expect(resp.Verify(req, token)).To(Succeed())
	forged := *resp
	forged.GatewayPublicKey = "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="
	g.Expect(forged.Verify(req, token)).NotTo(Succeed())
	other := *req
	other.Time++
	g.Expect(resp.Verify(&other, token)).NotTo(Succeed(), "an answer is bound to its request")
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
