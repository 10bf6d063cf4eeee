package wireguard

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	agentv1 "github.com/caplb/caplb/api/agent/v1alpha1"

	wgapi "github.com/caplb/caplb/api/wireguard/v1alpha1"

	"github.com/go-logr/logr/testr"
	. "github.com/onsi/gomega"

	"github.com/caplb/caplb/e2e/lab/standin/server"
	"github.com/caplb/caplb/e2e/testpki"
)

// These tests run a real gateway and real members in one process over loopback: userspace
// WireGuard with netstack needs neither root nor TUN. The stand-in API servers carry
// kubeadm-shaped certificates (no 127.0.0.1, no tunnel address), so the gateway's health checks
// pass only by verifying the name "kubernetes" against the cluster CA.

type loopLab struct {
	dir    string
	ca     *testpki.CA
	token  string
	gwCfg  *wgapi.GatewayConfig
	gw     *Gateway
	client *http.Client
	url    string

	stopGateway context.CancelFunc
	gatewayDone chan struct{}
}

func freeTCP(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func freeUDPPort(t *testing.T) int {
	t.Helper()
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).Port
}

func startLoopLab(t *testing.T) *loopLab { return startLoopLabPrefix(t, "") }

// startLoopLabPrefix starts the gateway with a tunnel prefix ("" = the default IPv6 one).
func startLoopLabPrefix(t *testing.T, prefix string) *loopLab {
	t.Helper()
	dir := t.TempDir()
	ca, err := testpki.NewCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	l := &loopLab{dir: dir, ca: ca, token: "lab-join-token-0123456789abcdef"}
	if err := os.WriteFile(filepath.Join(dir, "token"), []byte(l.token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := &wgapi.GatewayConfig{TypeMeta: wgapi.NewGateway().TypeMeta, Name: "gw-test", Listen: freeTCP(t),
		WireGuard:    wgapi.GatewayWireGuard{ListenPort: freeUDPPort(t), PrivateKeyFile: filepath.Join(dir, "gw", "gateway.key"), TunnelPrefix: prefix},
		Registration: wgapi.GatewayRegistration{Listen: freeTCP(t), TokenFile: filepath.Join(dir, "token")},
		StateFile:    filepath.Join(dir, "gw", "state.json"),
		Health:       wgapi.GatewayHealth{CAFile: ca.CertFile, Interval: agentv1.Duration{Duration: 50 * time.Millisecond}, Timeout: agentv1.Duration{Duration: time.Second}},
		DrainTimeout: agentv1.Duration{Duration: 2 * time.Second},
		Admin:        wgapi.AdminConfig{Listen: "0"},
		Metrics:      wgapi.MetricsConfig{Listen: freeTCP(t)},
	}
	cfg.Default()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	l.gwCfg = cfg
	pem, _ := os.ReadFile(ca.CertFile)
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(pem)
	l.client = &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: roots, ServerName: "kubernetes"}, DisableKeepAlives: true}}
	l.url = "https://" + cfg.Listen
	l.startGateway(t)
	return l
}

func (l *loopLab) startGateway(t *testing.T) {
	t.Helper()
	gw, err := NewGateway(l.gwCfg, testr.New(t).WithName("gw"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	l.stopGateway, l.gatewayDone = cancel, done
	go func() { defer close(done); _ = gw.Run(ctx, context.Background()) }()
	t.Cleanup(func() { cancel(); <-done })
	select {
	case <-gw.Ready():
	case <-done:
		t.Fatal("gateway exited at start")
	}
	l.gw = gw
}

// startStandin serves the stand-in API on a loopback port with node's kubeadm-shaped certificate.
func (l *loopLab) startStandin(t *testing.T, node string) string {
	t.Helper()
	certFile, keyFile, err := l.ca.IssueServing(l.dir, node, node, "192.0.2.10")
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}})
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: server.Handler(node, server.Readyz(""), context.Background())}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return ln.Addr().String()
}

type runningMember struct {
	m      *Member
	cancel context.CancelFunc
	done   chan struct{}
}

func (l *loopLab) startMember(t *testing.T, node, upstream string) *runningMember {
	t.Helper()
	cfg := &wgapi.MemberConfig{TypeMeta: wgapi.NewMember().TypeMeta, NodeName: node, PrivateKeyFile: filepath.Join(l.dir, node, "member.key"),
		TokenFile: filepath.Join(l.dir, "token"), Upstream: upstream,
		Gateways:     []wgapi.MemberGateway{{Endpoint: fmt.Sprintf("127.0.0.1:%d", l.gwCfg.WireGuard.ListenPort), Registration: l.gwCfg.Registration.Listen}},
		DrainTimeout: agentv1.Duration{Duration: 2 * time.Second}, Admin: wgapi.AdminConfig{Listen: "0"}, TunnelPrefix: l.gwCfg.WireGuard.TunnelPrefix}
	cfg.Default()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	m, err := NewMember(cfg, testr.New(t).WithName(node))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	rm := &runningMember{m: m, cancel: cancel, done: make(chan struct{})}
	go func() { defer close(rm.done); _ = m.Run(ctx, context.Background()) }()
	t.Cleanup(func() { cancel(); <-rm.done })
	return rm
}

// get fetches /name through the gateway and returns the member that answered.
func (l *loopLab) get() (string, error) {
	resp, err := l.client.Get(l.url + "/name")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("%s: %s", resp.Status, b)
	}
	return string(b), nil
}

func (l *loopLab) healthy(node string) bool {
	for _, m := range l.gw.Status().Members {
		if m.Node == node && m.Healthy && m.State == "active" {
			return true
		}
	}
	return false
}

// load runs workers that fetch /name back to back until stop is called; it returns the
// members that answered and the failures.
func (l *loopLab) load(workers int) (stop func() (served map[string]int, failures []error)) {
	var mu sync.Mutex
	served := map[string]int{}
	var failures []error
	var quit atomic.Bool
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !quit.Load() {
				name, err := l.get()
				mu.Lock()
				if err != nil {
					failures = append(failures, err)
				} else {
					served[name]++
				}
				mu.Unlock()
			}
		}()
	}
	return func() (map[string]int, []error) {
		quit.Store(true)
		wg.Wait()
		return served, failures
	}
}

func TestLoopbackGatewayServesHealthyMembersAndQuiesces(t *testing.T) {
	g := NewWithT(t)
	l := startLoopLab(t)
	// Before any member exists the endpoint is published (listening) but has no member.
	_, err := l.get()
	g.Expect(err).To(HaveOccurred())

	up1, up2 := l.startStandin(t, "m1"), l.startStandin(t, "m2")
	l.startMember(t, "m1", up1)
	l.startMember(t, "m2", up2)
	g.Eventually(func() bool { return l.healthy("m1") && l.healthy("m2") }, 20*time.Second, 50*time.Millisecond).Should(BeTrue())

	seen := map[string]int{}
	for range 20 {
		name, err := l.get()
		g.Expect(err).NotTo(HaveOccurred())
		seen[name]++
	}
	g.Expect(seen).To(HaveKey("m1"))
	g.Expect(seen).To(HaveKey("m2"))
	l.expectMetricsAfterTraffic(g, 20)

	// Quiesce m1 under load: no request fails and, once quiesced, none goes to m1.
	stop := l.load(4)
	time.Sleep(200 * time.Millisecond) // let the load reach both members before the change
	g.Expect(l.gw.Quiesce("m1", true)).To(BeTrue())
	served, failures := stop()
	g.Expect(failures).To(BeEmpty())
	g.Expect(served).To(HaveKey("m2"))
	for range 10 {
		name, err := l.get()
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(name).To(Equal("m2"))
	}
	st := l.gw.Status()
	g.Expect(st.Members).To(ContainElement(And(HaveField("Node", "m1"), HaveField("State", "quiesced"), HaveField("Connections", 0))))

	// The state file keeps the members and the quiesce: a restarted gateway serves at once.
	b, err := os.ReadFile(l.gwCfg.StateFile)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(b)).To(ContainSubstring(`"m1"`))
	fi, _ := os.Stat(l.gwCfg.StateFile)
	g.Expect(fi.Mode().Perm()).To(Equal(os.FileMode(0o600)))
	g.Expect(l.gw.Quiesce("m1", false)).To(BeTrue())
	g.Eventually(func() bool { name, _ := l.get(); return name == "m1" }, 5*time.Second, 20*time.Millisecond).Should(BeTrue())
}

// expectMetricsAfterTraffic scrapes the metrics listener of a gateway whose members m1 and m2
// served at least served requests: both healthy, a real WireGuard handshake each, the requests
// counted. The listener serves nothing that changes the rotation.
func (l *loopLab) expectMetricsAfterTraffic(g Gomega, served int) {
	base := "http://" + l.gwCfg.Metrics.Listen
	resp, err := http.Post(base+"/v1/nodes/m1/quiesce", "", nil)
	g.Expect(err).NotTo(HaveOccurred())
	resp.Body.Close()
	g.Expect(resp.StatusCode).To(Equal(http.StatusNotFound))
	resp, err = http.Get(base + "/metrics")
	g.Expect(err).NotTo(HaveOccurred())
	defer resp.Body.Close()
	g.Expect(resp.StatusCode).To(Equal(http.StatusOK))
	fams := parseMetrics(g, resp.Body)
	g.Expect(fams).To(HaveKey("caplb_wireguard_gateway_info"))
	total := 0.0
	for _, s := range samples(fams["caplb_wireguard_member_connections_total"]) {
		total += s.value
	}
	g.Expect(total).To(BeNumerically(">=", served))
	for _, name := range []string{"caplb_wireguard_member_healthy", "caplb_wireguard_member_last_handshake_timestamp_seconds"} {
		g.Expect(fams).To(HaveKey(name))
		got := map[string]float64{}
		for _, s := range samples(fams[name]) {
			got[s.labels["node"]] = s.value
		}
		g.Expect(got).To(HaveLen(2), name)
		for node, v := range got {
			if name == "caplb_wireguard_member_healthy" {
				g.Expect(v).To(Equal(1.0), node)
			} else {
				g.Expect(time.Since(time.Unix(int64(v), 0))).To(BeNumerically("<", time.Minute), node)
			}
		}
	}
}

func TestLoopbackKeyRotationUnderLoadLosesNothing(t *testing.T) {
	g := NewWithT(t)
	l := startLoopLab(t)
	up1, up2 := l.startStandin(t, "m1"), l.startStandin(t, "m2")
	rm1 := l.startMember(t, "m1", up1)
	l.startMember(t, "m2", up2)
	g.Eventually(func() bool { return l.healthy("m1") && l.healthy("m2") }, 20*time.Second, 50*time.Millisecond).Should(BeTrue())
	keyBefore, err := LoadKey(filepath.Join(l.dir, "m1", "member.key"))
	g.Expect(err).NotTo(HaveOccurred())

	stop := l.load(4)
	old, cur, err := rm1.m.Rotate(context.Background())
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(old).To(Equal(keyBefore.PublicKey()))
	g.Expect(cur).NotTo(Equal(old))
	// The old key drains and its peer goes away; the new key serves.
	g.Eventually(func() []wgapi.MemberStatus { return l.gw.Status().Members }, 10*time.Second, 50*time.Millisecond).
		ShouldNot(ContainElement(HaveField("PublicKey", old.String())))
	g.Eventually(func() bool { return l.healthy("m1") }, 5*time.Second, 50*time.Millisecond).Should(BeTrue())
	time.Sleep(300 * time.Millisecond) // traffic on the new key before the load stops
	served, failures := stop()
	g.Expect(failures).To(BeEmpty())
	g.Expect(served["m1"]).To(BeNumerically(">", 0))
	keyAfter, err := LoadKey(filepath.Join(l.dir, "m1", "member.key"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(keyAfter.PublicKey()).To(Equal(cur))
}

func TestLoopbackRegistrationRefusesWrongToken(t *testing.T) {
	g := NewWithT(t)
	l := startLoopLab(t)
	priv, err := LoadOrCreateKey(filepath.Join(l.dir, "x", "k"))
	g.Expect(err).NotTo(HaveOccurred())
	prefix, _ := wgapi.ParseTunnelPrefix(wgapi.DefaultTunnelPrefix)
	_, err = Register(context.Background(), http.DefaultClient, l.gwCfg.Registration.Listen, []byte("not-the-cluster-token-at-all"),
		"intruder", priv.PublicKey(), prefix, "")
	g.Expect(err).To(MatchError(ContainSubstring("401")))
	g.Expect(l.gw.Status().Members).To(BeEmpty())

	// The right token, but a pinned gateway key that differs: the member refuses the answer.
	other, _ := LoadOrCreateKey(filepath.Join(l.dir, "x", "other"))
	_, err = Register(context.Background(), http.DefaultClient, l.gwCfg.Registration.Listen, []byte(l.token),
		"m9", priv.PublicKey(), prefix, other.PublicKey().String())
	g.Expect(err).To(MatchError(ContainSubstring("pinned")))
}

func TestLoopbackMemberShutdownDrainsWithoutFailures(t *testing.T) {
	g := NewWithT(t)
	l := startLoopLab(t)
	up1, up2 := l.startStandin(t, "m1"), l.startStandin(t, "m2")
	rm1 := l.startMember(t, "m1", up1)
	l.startMember(t, "m2", up2)
	g.Eventually(func() bool { return l.healthy("m1") && l.healthy("m2") }, 20*time.Second, 50*time.Millisecond).Should(BeTrue())
	stop := l.load(4)
	time.Sleep(200 * time.Millisecond)
	rm1.cancel() // SIGTERM: deregister, drain, exit
	select {
	case <-rm1.done:
	case <-time.After(10 * time.Second):
		t.Fatal("member did not exit after its drain")
	}
	time.Sleep(200 * time.Millisecond)
	served, failures := stop()
	g.Expect(failures).To(BeEmpty())
	g.Expect(served["m2"]).To(BeNumerically(">", 0))
}

func TestLoopbackGatewayStopLetsOpenConnectionsFinish(t *testing.T) {
	g := NewWithT(t)
	l := startLoopLab(t)
	l.startMember(t, "m1", l.startStandin(t, "m1"))
	g.Eventually(func() bool { return l.healthy("m1") }, 20*time.Second, 50*time.Millisecond).Should(BeTrue())
	// A kept-alive client holds one connection through the gateway.
	tr := l.client.Transport.(*http.Transport).Clone()
	tr.DisableKeepAlives = false
	kept := &http.Client{Transport: tr, Timeout: 5 * time.Second}
	get := func(c *http.Client) error {
		resp, err := c.Get(l.url + "/name")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		_, err = io.ReadAll(resp.Body)
		return err
	}
	g.Expect(get(kept)).To(Succeed())
	l.stopGateway()
	// New connections are refused at once; the open one keeps serving during the drain.
	g.Eventually(func() error { return get(l.client) }, 2*time.Second, 20*time.Millisecond).Should(HaveOccurred())
	g.Expect(get(kept)).To(Succeed())
	g.Consistently(l.gatewayDone, 300*time.Millisecond).ShouldNot(BeClosed())
	// Once the client lets go the gateway exits, before drainTimeout (2 s here) would force it.
	tr.CloseIdleConnections()
	g.Eventually(l.gatewayDone, time.Second).Should(BeClosed())
}

// TestLoopbackStoppingGatewayDialsNothing: a client connection accepted as
// the gateway stops (its context cancelled) is closed at once. Before, every
// dial failed at once with the cancelled context, marked the member
// unhealthy, and the race (which falls back to unhealthy members) dialled
// again, spinning for the whole connect budget (3 dial timeouts).
func TestLoopbackStoppingGatewayDialsNothing(t *testing.T) {
	g := NewWithT(t)
	l := startLoopLab(t)
	l.startMember(t, "m1", l.startStandin(t, "m1"))
	g.Eventually(func() bool { return l.healthy("m1") }, 20*time.Second, 50*time.Millisecond).Should(BeTrue())
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	client, peer := net.Pipe()
	defer peer.Close()
	start := time.Now()
	l.gw.handle(ctx, client)
	g.Expect(time.Since(start)).To(BeNumerically("<", 500*time.Millisecond), "no dial race on a stopping gateway")
	g.Expect(l.healthy("m1")).To(BeTrue(), "a cancelled dial is not the member's failure")
	_, err := peer.Read(make([]byte, 1))
	g.Expect(err).To(HaveOccurred(), "the client connection is closed")
}

func TestLoopbackIPv4Tunnel(t *testing.T) {
	g := NewWithT(t)
	l := startLoopLabPrefix(t, "10.250.0.0/16")
	l.startMember(t, "m1", l.startStandin(t, "m1"))
	g.Eventually(func() bool { return l.healthy("m1") }, 20*time.Second, 50*time.Millisecond).Should(BeTrue())
	name, err := l.get()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(name).To(Equal("m1"))
	st := l.gw.Status()
	g.Expect(st.TunnelAddress).To(HavePrefix("10.250."))
	g.Expect(st.Members[0].Address).To(HavePrefix("10.250."))
}
