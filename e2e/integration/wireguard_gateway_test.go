package integration

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
	"strconv"
	"testing"
	"time"

	wgapi "github.com/caplb/caplb/api/wireguard/v1alpha1"

	"github.com/go-logr/logr/testr"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	lbv1 "github.com/caplb/caplb/api/v1alpha1"
	"github.com/caplb/caplb/e2e/harness"
	"github.com/caplb/caplb/e2e/lab/standin/server"
	"github.com/caplb/caplb/e2e/testpki"
	wg "github.com/caplb/caplb/modes/wireguard"
	wgp "github.com/caplb/caplb/providers/wireguard"
)

// freeGatewayPort finds p with UDP p, TCP p and TCP p+1 free on loopback: a gateway's WireGuard,
// admin and registration ports.
func freeGatewayPort(t *testing.T) int32 {
	t.Helper()
	for range 50 {
		u, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			t.Fatal(err)
		}
		p := u.LocalAddr().(*net.UDPAddr).Port
		u.Close()
		ok := p < 65534
		for _, q := range []int{p, p + 1} {
			if !ok {
				break
			}
			l, err := net.Listen("tcp", ":"+strconv.Itoa(q))
			ok = err == nil
			if ok {
				l.Close()
			}
		}
		if ok {
			return int32(p)
		}
	}
	t.Fatal("no free gateway port")
	return 0
}

func freeTCPPort(t *testing.T) int32 {
	t.Helper()
	l, err := net.Listen("tcp", ":0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return int32(l.Addr().(*net.TCPAddr).Port)
}

// The whole loop with the real data plane: a real gateway runs from the Secret the manager
// renders (caplb gateway --from-secret) and reports through the API; a real member runs from the
// bootstrap Secret's file behind a stand-in API server with a kubeadm-shaped certificate. The
// member becomes active from the gateway's report, serves through the published endpoint, and
// a disabled member is released only once its open connection is gone.
func testWireGuardRealGateway(t *testing.T, s *suite) {
	g := NewWithT(t)
	f := newFixture(t, s, harness.ClusterOptions{})
	dir := t.TempDir()
	ca, err := testpki.NewCA(dir)
	g.Expect(err).NotTo(HaveOccurred())
	caPEM, err := os.ReadFile(ca.CertFile)
	g.Expect(err).NotTo(HaveOccurred())
	// The Cluster's CA, as CAPI's control plane provider creates it (public part only needed).
	g.Expect(s.env.Client.Create(f.ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "c-ca"},
		Data: map[string][]byte{corev1.TLSCertKey: caPEM}})).To(Succeed())

	gwPort, epPort := freeGatewayPort(t), freeTCPPort(t)
	drain := 20 * time.Second
	f.createLB(t, "", epPort, withDrain(drain), func(lb *lbv1.LoadBalancer) {
		lb.Spec.Backend = lbv1.Backend{WireGuard: &lbv1.WireGuardBackend{Gateways: []lbv1.WireGuardGateway{
			{Name: "gw-1", Address: "127.0.0.1", Port: gwPort}},
			Health: lbv1.WireGuardHealth{Interval: &lbv1.Duration{Duration: 100 * time.Millisecond}}}}
	})
	f.waitLB(t, "endpoint is the gateway", func(lb *lbv1.LoadBalancer) bool {
		return lb.Status.Endpoint == lbv1.APIEndpoint{Host: "127.0.0.1", Port: epPort}
	})

	// The gateway, as `caplb gateway --from-secret <ns>/c-caplb-gateway --name gw-1` runs it.
	cs, err := wg.NewManagementAPI(s.env.Config)
	g.Expect(err).NotTo(HaveOccurred())
	sync := &wg.SecretSync{Client: cs, Namespace: f.ns, Secret: "c" + wgp.GatewaySecretSuffix, Gateway: "gw-1",
		Dir: filepath.Join(dir, "gw-1"), Interval: 200 * time.Millisecond, Log: testr.New(t).WithName("sync")}
	ctx, cancel := context.WithCancel(f.ctx)
	loadCtx, loadCancel := context.WithTimeout(ctx, flowTimeout)
	cfg, err := sync.Load(loadCtx)
	loadCancel()
	g.Expect(err).NotTo(HaveOccurred())
	gw, err := wg.NewGateway(cfg, testr.New(t).WithName("gw-1"))
	g.Expect(err).NotTo(HaveOccurred())
	done := make(chan struct{})
	go func() { defer close(done); _ = gw.Run(ctx, context.Background()) }()
	go sync.Run(ctx, gw)
	t.Cleanup(func() { cancel(); <-done })
	f.waitLB(t, "the gateway reports", func(lb *lbv1.LoadBalancer) bool {
		return harness.ConditionIs(lb, lbv1.GatewaysReadyCondition, metav1.ConditionTrue) &&
			harness.ConditionIs(lb, lbv1.EndpointAvailableCondition, metav1.ConditionTrue)
	})

	// A member from the bootstrap Secret's file, behind a stand-in API server.
	ms := f.addMachines(t, 1)
	node := f.machine(g, ms[0].Name).Status.NodeRef.Name
	certFile, keyFile, err := ca.IssueServing(dir, node, node, "192.0.2.10")
	g.Expect(err).NotTo(HaveOccurred())
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	g.Expect(err).NotTo(HaveOccurred())
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}})
	g.Expect(err).NotTo(HaveOccurred())
	srv := &http.Server{Handler: server.Handler(node, server.Readyz(""), context.Background())}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })

	boot := f.secret(g, "c-caplb-agent")
	var mc wgapi.MemberConfig
	g.Expect(yaml.UnmarshalStrict(boot.Data[wgp.MemberConfigKey], &mc)).To(Succeed())
	// Only what the node would differ in: its hostname, its paths, its API server's port.
	mc.NodeName, mc.Upstream, mc.Admin.Listen = node, ln.Addr().String(), "0"
	mc.PrivateKeyFile, mc.TokenFile = filepath.Join(dir, "member", "member.key"), filepath.Join(dir, "join-token")
	g.Expect(os.WriteFile(mc.TokenFile, boot.Data[wgp.TokenKey], 0o600)).To(Succeed())
	mc.Default()
	g.Expect(mc.Validate()).To(Succeed())
	member, err := wg.NewMember(&mc, testr.New(t).WithName(node))
	g.Expect(err).NotTo(HaveOccurred())
	mdone := make(chan struct{})
	go func() { defer close(mdone); _ = member.Run(ctx, context.Background()) }()
	t.Cleanup(func() { cancel(); <-mdone })

	f.waitLB(t, "member active from the gateway's report", allActive(ms[0].Name))

	// A client through the published endpoint, verifying the cluster CA as kubeadm's clients do.
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(caPEM)
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: roots, ServerName: "kubernetes"}, MaxIdleConnsPerHost: 1}}
	get := func() (string, error) {
		resp, err := client.Get(fmt.Sprintf("https://127.0.0.1:%d/name", epPort))
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return string(b), err
	}
	name, err := get()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(name).To(Equal(node))

	// Disabled with the client's kept-alive connection still open: the gateway reports it, and
	// the member stays disabling; once the connection closes, it is released (well before the
	// 20s drain timeout).
	g.Expect(s.env.Annotate(f.ctx, f.machine(g, ms[0].Name), lbv1.DisabledAnnotation, ptrTo("maintenance"))).To(Succeed())
	f.waitLB(t, "member disabling", func(lb *lbv1.LoadBalancer) bool { return harness.TargetState(lb, ms[0].Name) == lbv1.TargetDisabling })
	g.Eventually(func() bool {
		for _, m := range gw.Status().Members {
			if m.Node == node && m.State != "active" && m.Connections == 1 {
				return true
			}
		}
		return false
	}, flowTimeout, 100*time.Millisecond).Should(BeTrue(), "the gateway applies the Secret's quiesce and counts the open connection")
	g.Consistently(func() lbv1.TargetState {
		lb, err := s.env.GetLB(f.ctx, f.ns, "lb")
		g.Expect(err).NotTo(HaveOccurred())
		return harness.TargetState(lb, ms[0].Name)
	}, 3*time.Second, 250*time.Millisecond).Should(Equal(lbv1.TargetDisabling), "a connection is open through the gateway")
	start := time.Now()
	client.CloseIdleConnections()
	f.waitLB(t, "member disabled", func(lb *lbv1.LoadBalancer) bool { return harness.TargetState(lb, ms[0].Name) == lbv1.TargetDisabled })
	g.Expect(time.Since(start)).To(BeNumerically("<", drain), "released by the count reaching zero, not by the drain timeout")
}
