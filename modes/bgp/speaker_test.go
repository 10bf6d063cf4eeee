package bgp

import (
	"bytes"
	"context"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	agentv1 "github.com/caplb/caplb/api/agent/v1alpha1"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	. "github.com/onsi/gomega"
	api "github.com/osrg/gobgp/v3/api"
	"github.com/osrg/gobgp/v3/pkg/apiutil"
	"github.com/osrg/gobgp/v3/pkg/packet/bgp"
	"github.com/osrg/gobgp/v3/pkg/server"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/caplb/caplb/modes/dataplane"
)

// fakeAddresses records what the speaker holds on the node (unit tests only; the lab tests use
// the real dummy interface).
type fakeAddresses struct {
	mu     sync.Mutex
	held   []netip.Addr
	closed bool
}

func (f *fakeAddresses) Set(v []netip.Addr) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.held = slices.Clone(v)
	slices.SortFunc(f.held, netip.Addr.Compare)
	return nil
}

func (f *fakeAddresses) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.held, f.closed = nil, true
	return nil
}

func (f *fakeAddresses) get() ([]netip.Addr, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.held), f.closed
}

// logBuffer is a logr sink into a buffer, safe for gobgp's goroutines.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) logger() logr.Logger {
	return funcr.New(func(prefix, args string) {
		b.mu.Lock()
		defer b.mu.Unlock()
		b.buf.WriteString(prefix + " " + args + "\n")
	}, funcr.Options{Verbosity: 1})
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// testRouter is a second gobgp instance on loopback standing in for the upstream router (the
// lab tests use a real FRR). It listens on 127.0.0.1 and accepts the speaker from 127.0.0.2.
type testRouter struct {
	srv  *server.BgpServer
	port int
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func startRouter(t *testing.T, asn, nodeASN uint32) *testRouter {
	t.Helper()
	r := &testRouter{srv: server.NewBgpServer(server.LoggerOption(&gobgpLogger{log: logr.Discard()})), port: freePort(t)}
	go r.srv.Serve()
	ctx := context.Background()
	if err := r.srv.StartBgp(ctx, &api.StartBgpRequest{Global: &api.Global{
		Asn: asn, RouterId: "127.0.0.1", ListenPort: int32(r.port), ListenAddresses: []string{"127.0.0.1"},
	}}); err != nil {
		t.Fatal(err)
	}
	if err := r.srv.AddPeer(ctx, &api.AddPeerRequest{Peer: &api.Peer{
		Conf:      &api.PeerConf{NeighborAddress: "127.0.0.2", PeerAsn: nodeASN},
		Transport: &api.Transport{PassiveMode: true},
		Timers:    &api.Timers{Config: &api.TimersConfig{HoldTime: 3, KeepaliveInterval: 1}},
	}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.srv.Stop)
	return r
}

// routes are the prefixes the router learned from the node, with next hop and communities.
func (r *testRouter) routes() map[string]string {
	out := map[string]string{}
	for _, fam := range []*api.Family{
		{Afi: api.Family_AFI_IP, Safi: api.Family_SAFI_UNICAST},
		{Afi: api.Family_AFI_IP6, Safi: api.Family_SAFI_UNICAST},
	} {
		_ = r.srv.ListPath(context.Background(), &api.ListPathRequest{TableType: api.TableType_GLOBAL, Family: fam}, func(d *api.Destination) {
			for _, p := range d.Paths {
				attrs, _ := apiutil.GetNativePathAttributes(p)
				desc := ""
				for _, a := range attrs {
					switch a := a.(type) {
					case *bgp.PathAttributeNextHop:
						desc += "nh=" + a.Value.String()
					case *bgp.PathAttributeCommunities:
						for _, c := range a.Value {
							desc += " c=" + strconv.Itoa(int(c>>16)) + ":" + strconv.Itoa(int(c&0xffff))
						}
					}
				}
				out[d.Prefix] = desc
			}
		})
	}
	return out
}

func speakerConfig(routerPort int, routerASN uint32) agentv1.BGPConfig {
	return agentv1.BGPConfig{
		ASN:         64512,
		RouterID:    "10.0.0.11",
		Communities: []string{"65000:100"},
		Peers: []agentv1.BGPPeer{{
			Address: "127.0.0.1", ASN: routerASN, Port: uint16(routerPort), SourceAddress: "127.0.0.2",
			HoldTime: &metav1.Duration{Duration: 3 * time.Second}, ConnectRetry: &metav1.Duration{Duration: time.Second},
		}},
		AddressLinger: &metav1.Duration{Duration: 200 * time.Millisecond},
		// The host's nftables stay out of unit tests (flows.go has its own, with fakes).
		FlowSharing: ptr(false),
	}
}

func ptr[T any](v T) *T { return &v }

func TestSpeakerAnnouncesAndWithdraws(t *testing.T) {
	g := NewWithT(t)
	router := startRouter(t, 64500, 64512)
	addrs := &fakeAddresses{}
	reg := prometheus.NewRegistry()
	logs := &logBuffer{}
	s, err := newSpeaker(speakerConfig(router.port, 64500), logs.logger(), reg, addrs, time.Now)
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	ctx := context.Background()

	g.Eventually(func() string { return s.Status().BGP.Peers[0].State }, 10*time.Second, 20*time.Millisecond).Should(Equal("established"))
	g.Expect(metricValue(t, s.metrics.sessionUp.WithLabelValues("127.0.0.1"))).To(Equal(1.0))

	vip := netip.MustParseAddr("10.0.0.100")
	want := dataplane.Desired{Announce: true, VIPs: []netip.Addr{vip}}
	g.Expect(s.Sync(ctx, want)).To(Succeed())
	g.Expect(s.Sync(ctx, want)).To(Succeed(), "Sync is idempotent")
	held, _ := addrs.get()
	g.Expect(held).To(Equal([]netip.Addr{vip}), "the VIP is local before it is announced")
	g.Eventually(router.routes, 5*time.Second, 10*time.Millisecond).Should(Equal(map[string]string{
		"10.0.0.100/32": "nh=127.0.0.2 c=65000:100",
	}), "next hop self (the session's local address) and the community")
	g.Expect(s.Status().BGP.Announced).To(Equal([]string{"10.0.0.100/32"}))
	g.Expect(metricValue(t, s.metrics.announced)).To(Equal(1.0))

	g.Expect(s.Sync(ctx, dataplane.Desired{Announce: false, VIPs: []netip.Addr{vip}})).To(Succeed())
	g.Eventually(router.routes, 5*time.Second, 10*time.Millisecond).Should(BeEmpty())
	g.Expect(s.Status().BGP.Announced).To(BeEmpty())
	g.Expect(metricValue(t, s.metrics.withdrawals)).To(Equal(1.0))
	held, _ = addrs.get()
	g.Expect(held).To(Equal([]netip.Addr{vip}), "the VIP lingers on the node right after the withdrawal")
	g.Eventually(func() []netip.Addr { h, _ := addrs.get(); return h }, 5*time.Second, 10*time.Millisecond).Should(BeEmpty(),
		"and leaves after addressLinger")

	// Re-announce, then Close: the route leaves the router and the VIP the node.
	g.Expect(s.Sync(ctx, want)).To(Succeed())
	g.Eventually(router.routes, 5*time.Second, 10*time.Millisecond).Should(HaveKey("10.0.0.100/32"))
	g.Expect(s.Close(ctx)).To(Succeed())
	g.Expect(router.routes()).To(BeEmpty(), "Close returns after the withdrawal reached the peer")
	_, closed := addrs.get()
	g.Expect(closed).To(BeTrue())
	g.Expect(s.Close(ctx)).To(Succeed(), "Close is idempotent")
	g.Expect(s.Sync(ctx, want)).To(MatchError(ContainSubstring("closed")))
	g.Expect(logs.String()).To(ContainSubstring("announcing VIP"))
	g.Expect(logs.String()).To(ContainSubstring("withdrew VIP"))
}

func TestSpeakerIPv6VIPNeedsIPv6Peer(t *testing.T) {
	g := NewWithT(t)
	router := startRouter(t, 64500, 64512)
	s, err := newSpeaker(speakerConfig(router.port, 64500), logr.Discard(), nil, &fakeAddresses{}, time.Now)
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	err = s.Sync(context.Background(), dataplane.Desired{Announce: true, VIPs: []netip.Addr{
		netip.MustParseAddr("10.0.0.100"), netip.MustParseAddr("fd00::100"),
	}})
	g.Expect(err).To(MatchError(ContainSubstring("VIP fd00::100: no bgp.peers entry of its address family")))
	g.Expect(s.Status().BGP.Announced).To(Equal([]string{"10.0.0.100/32"}), "the other VIP is still announced")
}

func TestSpeakerWrongASNIsExplained(t *testing.T) {
	g := NewWithT(t)
	// The router expects AS 64999 from the node, which presents 64512.
	router := startRouter(t, 64500, 64999)
	reg := prometheus.NewRegistry()
	logs := &logBuffer{}
	s, err := newSpeaker(speakerConfig(router.port, 64500), logs.logger(), reg, &fakeAddresses{}, time.Now)
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = s.Close(context.Background()) })

	g.Eventually(func() string { return s.Status().BGP.Peers[0].LastError }, 10*time.Second, 20*time.Millisecond).Should(
		And(ContainSubstring("bad peer AS"), ContainSubstring("bgp.asn is not the AS it expects")), logs.String)
	g.Expect(s.Status().BGP.Peers[0].State).NotTo(Equal("established"))
	g.Expect(logs.String()).To(ContainSubstring("BGP session problem"))
	g.Expect(metricValue(t, s.metrics.peerErrors.WithLabelValues("127.0.0.1", "notification_received"))).To(BeNumerically(">=", 1))
}

func TestSpeakerRefusesOpenPasswordFile(t *testing.T) {
	g := NewWithT(t)
	cfg := speakerConfig(179, 64500)
	f := t.TempDir() + "/pw"
	g.Expect(writeFileMode(f, "s3cret", 0o644)).To(Succeed())
	cfg.Peers[0].PasswordFile = f
	_, err := newSpeaker(cfg, logr.Discard(), nil, &fakeAddresses{}, time.Now)
	g.Expect(err).To(MatchError(And(ContainSubstring("bgp.peers[0].passwordFile"), ContainSubstring("chmod 600"))))
}

func writeFileMode(path, content string, mode os.FileMode) error {
	if err := os.WriteFile(path, []byte(content), mode); err != nil {
		return err
	}
	return os.Chmod(path, mode)
}

// metricValue reads a gauge or counter.
func metricValue(t *testing.T, m prometheus.Metric) float64 {
	t.Helper()
	var d dto.Metric
	if err := m.Write(&d); err != nil {
		t.Fatal(err)
	}
	switch {
	case d.Gauge != nil:
		return d.Gauge.GetValue()
	case d.Counter != nil:
		return d.Counter.GetValue()
	}
	t.Fatalf("not a gauge or counter: %v", m.Desc())
	return 0
}

// The agent withdraws (Sync) and then closes: Close keeps the just-withdrawn VIPs for a moment
// (so packets the router forwarded before its FIB changed are accepted), but not for long.
func TestSpeakerCloseSettlesAfterWithdrawal(t *testing.T) {
	g := NewWithT(t)
	router := startRouter(t, 64500, 64512)
	addrs := &fakeAddresses{}
	cfg := speakerConfig(router.port, 64500)
	cfg.AddressLinger = &metav1.Duration{Duration: 10 * time.Second}
	s, err := newSpeaker(cfg, logr.Discard(), nil, addrs, time.Now)
	g.Expect(err).NotTo(HaveOccurred())
	g.Eventually(func() string { return s.Status().BGP.Peers[0].State }, 10*time.Second, 20*time.Millisecond).Should(Equal("established"))
	vip := []netip.Addr{netip.MustParseAddr("10.0.0.100")}
	g.Expect(s.Sync(context.Background(), dataplane.Desired{Announce: true, VIPs: vip})).To(Succeed())
	g.Eventually(router.routes, 5*time.Second, 10*time.Millisecond).Should(HaveLen(1))
	g.Expect(s.Sync(context.Background(), dataplane.Desired{Announce: false, VIPs: vip})).To(Succeed())
	start := time.Now()
	g.Expect(s.Close(context.Background())).To(Succeed())
	took := time.Since(start)
	g.Expect(took).To(BeNumerically(">=", closeSettle-50*time.Millisecond), "settled before removing the VIP")
	g.Expect(took).To(BeNumerically("<", closeSettle+stopTimeout), "but not for the whole linger")
	held, closed := addrs.get()
	g.Expect(held).To(BeEmpty())
	g.Expect(closed).To(BeTrue())
	g.Expect(router.routes()).To(BeEmpty())
}
