//go:build linux

package wireguard_test

import (
	"context"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lbv1 "github.com/caplb/caplb/api/v1alpha1"
	"github.com/caplb/caplb/e2e/harness"
	"github.com/caplb/caplb/e2e/lab"
	"github.com/caplb/caplb/e2e/lab/wglab"
	"github.com/caplb/caplb/e2e/lifecycle"
	"github.com/caplb/caplb/e2e/testpki"
	wgp "github.com/caplb/caplb/providers/wireguard"
)

// TestBootstrapFromSecretsBehindNAT is the issue's "members behind NAT come up from the bootstrap
// Secret and serve through either gateway", with nothing on a gateway or member written by the
// test. A real API server holds the sample's (config/samples/cluster_kubeadm_wireguard.yaml)
// LoadBalancer, pointed at the lab's two gateways, and a Cluster; caplb's manager (as its
// ServiceAccount under the shipped RBAC) and CAPI's reconcilers run against it. Each gateway host
// runs `caplb gateway --from-secret` with a kubeconfig of the sample's gateway ServiceAccount (a
// TokenRequest token under the sample's Role: its Secret and its report only). Each member
// behind the NAT router is booted from the bootstrap Secret through the sample's
// KubeadmControlPlane files[] (paths and modes as written there) and runs the rendered static
// pod through the lab's kubelet (podrun), next to a stand-in API server with a kubeadm-shaped
// certificate. It shows: the endpoint is published, and served by both gateways, before any
// Machine exists; the members become active from the gateways' reports; the public client
// reaches every member through gateway 1 and through gateway 2; with gateway 1 SIGKILLed the
// client still gets through gateway 2 (and gateway 1 comes back from its Secret); a disabled
// Machine is released only once the gateways report it out of rotation with no connection open.
func TestBootstrapFromSecretsBehindNAT(t *testing.T) {
	needNFT(t)
	if testing.Short() {
		t.Skip("needs the test control plane (make testbin); skipped with -short")
	}
	g := NewWithT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	s, err := readWGSample()
	g.Expect(err).NotTo(HaveOccurred())
	// Static binaries (the lab's kubelet runs the agent in a root holding only its binary).
	bins, err := lifecycle.BuildBinaries(t.TempDir())
	g.Expect(err).NotTo(HaveOccurred())
	begin := time.Now()
	phase := func(what string) { t.Logf("%5.1fs %s", time.Since(begin).Seconds(), what) }

	// The lab: two gateways on the public segment, three members behind the NAT router.
	l := lab.NewT(t, "wgn")
	w, err := wglab.Network(l, 3)
	g.Expect(err).NotTo(HaveOccurred())
	ca, err := testpki.NewCA(l.Dir())
	g.Expect(err).NotTo(HaveOccurred())

	// The management cluster.
	env, err := harness.Start(harness.Options{})
	g.Expect(err).NotTo(HaveOccurred(), "test API server (make testbin)")
	t.Cleanup(func() { _ = env.Stop() })
	capi, err := env.StartCAPI(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = capi.Stop() })
	g.Expect(env.ApplyShippedRBAC(ctx)).To(Succeed())
	mgr, err := env.StartCAPLB(ctx, harness.CAPLBOptions{ServiceAccount: harness.ShippedServiceAccount})
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = mgr.Stop() })
	cs := kubernetes.NewForConfigOrDie(env.Config)
	phase("management cluster up")

	ns := s.lb.Namespace
	cluster, err := env.CreateCluster(ctx, ns, s.cluster, harness.ClusterOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	for _, o := range s.rbac {
		g.Expect(env.Client.Create(ctx, o)).To(Succeed(), "%s %s from the sample", o.GetKind(), o.GetName())
	}
	lb := s.lb.DeepCopy()
	gws := lb.Spec.Backend.WireGuard.Gateways
	g.Expect(gws).To(HaveLen(len(w.Gateways)), "the sample's gateways, one per lab gateway")
	for i := range gws {
		gws[i].Address = w.Gateways[i].Addr.String() // where the members reach them, through the NAT
	}
	g.Expect(env.Client.Create(ctx, lb)).To(Succeed())

	// Published at once: the LoadBalancer's status and the Cluster, before any Machine.
	ep := lbv1.APIEndpoint{Host: lb.Spec.Endpoint.Host, Port: lb.Spec.Endpoint.Port}
	_, err = env.WaitLB(ctx, ns, lb.Name, 30*time.Second, "endpoint published", func(lb *lbv1.LoadBalancer) bool {
		return lb.Status.Endpoint == ep && harness.ConditionIs(lb, lbv1.ClusterEndpointCondition, metav1.ConditionTrue)
	})
	g.Expect(err).NotTo(HaveOccurred())
	c := &clusterv1.Cluster{}
	g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(cluster), c)).To(Succeed())
	g.Expect(c.Spec.ControlPlaneEndpoint).To(Equal(clusterv1.APIEndpoint{Host: ep.Host, Port: ep.Port}))
	var machines clusterv1.MachineList
	g.Expect(env.Client.List(ctx, &machines, client.InNamespace(ns))).To(Succeed())
	g.Expect(machines.Items).To(BeEmpty())
	phase("endpoint published, no Machine")

	// KubeadmControlPlane creates the Cluster's CA once the endpoint is published: played here.
	g.Expect(env.Client.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: s.cluster + "-ca"},
		Data: map[string][]byte{corev1.TLSCertKey: ca.PEM}})).To(Succeed())

	// The gateway hosts, as the sample's comment tells an operator to run them.
	gwSecret := wgp.GatewaySecretName(lb)
	apiHost, err := apiHostPort(env.Config.Host)
	g.Expect(err).NotTo(HaveOccurred())
	hosts := make([]*gatewayHost, len(gws))
	for i, gw := range gws {
		nsLab := w.Gateways[i].NS
		dir := filepath.Join(l.Dir(), w.Gateways[i].Name)
		g.Expect(os.MkdirAll(dir, 0o700)).To(Succeed())
		kc := filepath.Join(dir, "management.kubeconfig")
		g.Expect(writeGatewayKubeconfig(ctx, cs, env.Config.CAData, ns, s.gatewaySA, kc)).To(Succeed())
		p, err := lab.ProxyInto(nsLab, mgmtAPIListen, apiHost)
		g.Expect(err).NotTo(HaveOccurred())
		t.Cleanup(func() { _ = p.Close() })
		// --dir: both "hosts" share this machine's disk, so each keeps its files apart.
		hosts[i] = &gatewayHost{name: gw.Name, addr: w.Gateways[i].Addr, ns: nsLab, argv: []string{bins.Manager, "gateway",
			"--from-secret", ns + "/" + gwSecret, "--name", gw.Name, "--kubeconfig", kc, "--dir", filepath.Join(dir, "caplb")}}
		g.Expect(hosts[i].start()).To(Succeed())
	}
	expectGatewayCredentialIsNarrow(t, env.Config.Host, filepath.Join(l.Dir(), w.Gateways[0].Name, "management.kubeconfig"), ns, gwSecret)

	// The gateways report (no member yet) and serve the endpoint: published on the gateways
	// before any member exists.
	_, err = env.WaitLB(ctx, ns, lb.Name, 30*time.Second, "gateways report", func(lb *lbv1.LoadBalancer) bool {
		return harness.ConditionIs(lb, lbv1.GatewaysReadyCondition, metav1.ConditionTrue) &&
			harness.ConditionIs(lb, lbv1.EndpointAvailableCondition, metav1.ConditionTrue)
	})
	g.Expect(err).NotTo(HaveOccurred())
	port := strconv.Itoa(int(ep.Port))
	for _, h := range hosts {
		conn, err := w.Client.DialContext(ctx, "tcp", net.JoinHostPort(h.addr.String(), port))
		g.Expect(err).NotTo(HaveOccurred(), "%s listens on the endpoint's port", h.name)
		_ = conn.Close()
	}
	g.Expect(env.Client.List(ctx, &machines, client.InNamespace(ns))).To(Succeed())
	g.Expect(machines.Items).To(BeEmpty())
	phase("both gateways serve the endpoint, no Machine")

	// The control-plane Machines, one per member; their Nodes name the machines' hostnames.
	ms, err := env.CreateControlPlane(ctx, cluster, len(w.Members), func(i int) []clusterv1.MachineAddress {
		return harness.InternalIP(w.Members[i].Addr.String())
	})
	g.Expect(err).NotTo(HaveOccurred())
	names := make([]string, 0, len(ms))
	for _, m := range ms {
		names = append(names, m.Name)
	}
	g.Expect(env.WaitMachinesReady(ctx, ns, names, 90*time.Second)).To(Succeed())
	phase("Machines ready")

	boot := &corev1.Secret{}
	g.Expect(env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: wgp.BootstrapSecretName(lb)}, boot)).To(Succeed())
	// The sample delivers every key of the bootstrap Secret: one the manager renders but the
	// sample's files[] leave out would never reach a real node.
	delivered := map[string]bool{}
	for _, f := range s.files {
		delivered[f.SecretKey] = true
	}
	for k := range boot.Data {
		g.Expect(delivered).To(HaveKey(k), "key %s of Secret %s is in no file of the sample's KubeadmControlPlane", k, boot.Name)
	}
	members := make([]*machine, len(ms))
	for i, m := range ms {
		got := &clusterv1.Machine{}
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(m), got)).To(Succeed())
		members[i] = &machine{node: got.Status.NodeRef.Name, ns: w.Members[i].NS, addr: w.Members[i].Addr}
		g.Expect(bootMember(l, bins, ca, s, members[i], boot, ep.Host)).To(Succeed())
	}
	_, err = env.WaitLB(ctx, ns, lb.Name, 45*time.Second, "members active from the gateways' reports", allActive(names...))
	g.Expect(err).NotTo(HaveOccurred())
	phase("members active")

	// Each gateway saw every member come from the NAT's public address, not its own.
	for _, h := range hosts {
		r, err := reportOf(ctx, cs, ns, gwSecret, h.name)
		g.Expect(err).NotTo(HaveOccurred())
		for _, m := range members {
			st, ok := memberOf(r, m.node)
			g.Expect(ok).To(BeTrue(), "%s knows %s", h.name, m.node)
			g.Expect(st.Endpoint).To(HavePrefix(wglab.PublicNet+"1:"), "%s seen behind the NAT by %s", m.node, h.name)
		}
	}
	for _, m := range members {
		// The key was made on the node, where it stays.
		fi, err := os.Stat(filepath.Join(m.root, wgp.MemberKeyDir, "member.key"))
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(fi.Mode().Perm()).To(Equal(os.FileMode(0o600)))
	}

	// The public client reaches every member through gateway 1, and through gateway 2.
	pc := newPublicClient(w.Client, ca.PEM, ep)
	addr := func(h *gatewayHost) string { return net.JoinHostPort(h.addr.String(), port) }
	allThrough := func(h *gatewayHost) {
		t.Helper()
		hc := pc.via(false, addr(h))
		seen := map[string]bool{}
		g.Eventually(func() int {
			if n, err := pc.node(hc); err == nil {
				seen[n] = true
			}
			return len(seen)
		}, 15*time.Second, 10*time.Millisecond).Should(Equal(len(members)), "every member answers through %s", h.name)
	}
	for _, h := range hosts {
		allThrough(h)
	}
	phase("every member served through either gateway")

	// Gateway 1 dies: through gateway 1 nothing; with both records, every request gets through
	// gateway 2.
	gw1, gw2 := hosts[0], hosts[1]
	g.Expect(gw1.proc.Signal(syscall.SIGKILL)).To(Succeed())
	g.Eventually(gw1.proc.Done(), 5*time.Second).Should(BeClosed())
	_, err = pc.node(pc.via(false, addr(gw1)))
	g.Expect(err).To(HaveOccurred(), "gateway 1 is dead")
	both := pc.via(false, addr(gw1), addr(gw2))
	for range 20 {
		_, err := pc.node(both)
		g.Expect(err).NotTo(HaveOccurred())
	}
	allThrough(gw2)
	phase("gateway 1 killed: served through gateway 2")

	// Gateway 1 restarts from its Secret (and its cached files): reports and serves again.
	restarted := time.Now()
	g.Expect(gw1.start()).To(Succeed())
	g.Eventually(func(g Gomega) {
		r, err := reportOf(ctx, cs, ns, gwSecret, gw1.name)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(r.Time).To(BeTemporally(">", restarted))
		for _, m := range members {
			st, _ := memberOf(r, m.node)
			g.Expect(st.Healthy && st.State == "active").To(BeTrue(), "%s on restarted %s: %+v", m.node, gw1.name, st)
		}
	}, 30*time.Second, 200*time.Millisecond).Should(Succeed())
	allThrough(gw1)
	phase("gateway 1 back")

	expectQuiesceWaitsForGateways(t, env, cs, pc, lb, ms[0], members[0].node, hosts, addr)
	phase("quiesced member released by the gateways' reports")
}

// expectQuiesceWaitsForGateways disables victim's Machine while a client holds a connection to
// it through the second gateway: the member stays disabling while that gateway reports the
// connection open, and is released once it closes (long before the drain period), with every
// gateway reporting the node quiesced; new requests no longer reach it.
func expectQuiesceWaitsForGateways(t *testing.T, env *harness.Env, cs kubernetes.Interface, pc publicClient,
	lb *lbv1.LoadBalancer, victim *clusterv1.Machine, node string, hosts []*gatewayHost, addr func(*gatewayHost) string) {
	t.Helper()
	g := NewWithT(t)
	ctx := t.Context()
	ns, gwSecret := lb.Namespace, wgp.GatewaySecretName(lb)
	holder := hosts[1]
	var held *http.Client
	g.Eventually(func() string {
		hc := pc.via(true, addr(holder))
		n, err := pc.node(hc)
		if err == nil && n == node {
			held = hc
			return n
		}
		hc.CloseIdleConnections()
		return n
	}, 10*time.Second, 10*time.Millisecond).Should(Equal(node), "a kept-alive connection to %s through %s", node, holder.name)

	m := &clusterv1.Machine{}
	g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(victim), m)).To(Succeed())
	g.Expect(env.Annotate(ctx, m, lbv1.DisabledAnnotation, ptr.To("maintenance"))).To(Succeed())
	state := func() lbv1.TargetState {
		got, err := env.GetLB(ctx, ns, lb.Name)
		g.Expect(err).NotTo(HaveOccurred())
		return harness.TargetState(got, victim.Name)
	}
	g.Eventually(state, 15*time.Second, 100*time.Millisecond).Should(Equal(lbv1.TargetDisabling))
	// Every gateway takes the node out of rotation (from its Secret) and says so; the holder
	// counts the open connection.
	g.Eventually(func(g Gomega) {
		for _, h := range hosts {
			r, err := reportOf(ctx, cs, ns, gwSecret, h.name)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(r.QuiescedNodes).To(ContainElement(node), h.name)
			st, _ := memberOf(r, node)
			g.Expect(st.State).NotTo(Equal("active"), h.name)
			if h == holder {
				g.Expect(st.Connections).To(Equal(1), h.name)
			}
		}
	}, 20*time.Second, 200*time.Millisecond).Should(Succeed())
	g.Consistently(state, 3*time.Second, 200*time.Millisecond).Should(Equal(lbv1.TargetDisabling),
		"%s reports a connection open to the member", holder.name)

	closed := time.Now()
	held.CloseIdleConnections()
	g.Eventually(state, 20*time.Second, 100*time.Millisecond).Should(Equal(lbv1.TargetDisabled))
	g.Expect(time.Since(closed)).To(BeNumerically("<", lb.Spec.Quiesce.EffectiveDrainPeriod()),
		"released by the gateways' counts reaching zero, not by the drain period")
	for _, h := range hosts {
		r, err := reportOf(ctx, cs, ns, gwSecret, h.name)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(r.QuiescedNodes).To(ContainElement(node), h.name)
		st, _ := memberOf(r, node)
		g.Expect(st.Connections).To(BeZero(), h.name)
	}
	g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(victim), m)).To(Succeed())
	g.Expect(m.Annotations).To(HaveKeyWithValue(lbv1.StatusAnnotation, string(lbv1.TargetDisabled)))
	for _, h := range hosts {
		hc := pc.via(false, addr(h))
		for range 10 {
			n, err := pc.node(hc)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(n).NotTo(Equal(node), "a disabled member gets no new connection through %s", h.name)
		}
	}
	t.Logf("quiesce: released %v after the last connection closed (drain period %v)", time.Since(closed).Truncate(time.Millisecond),
		lb.Spec.Quiesce.EffectiveDrainPeriod())
}

// expectGatewayCredentialIsNarrow checks that the gateways' credential (the kubeconfig the test
// wrote, pointed at the API server from the host) reads its Secret and nothing else.
func expectGatewayCredentialIsNarrow(t *testing.T, host, kubeconfig, ns, gwSecret string) {
	t.Helper()
	g := NewWithT(t)
	rc, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	g.Expect(err).NotTo(HaveOccurred())
	rc.Host = host
	cs := kubernetes.NewForConfigOrDie(rc)
	_, err = cs.CoreV1().Secrets(ns).Get(t.Context(), gwSecret, metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	cluster := gwSecret[:len(gwSecret)-len(wgp.GatewaySecretSuffix)]
	for _, name := range []string{cluster + "-caplb-agent", cluster + wgp.TokenSecretSuffix, cluster + "-kubeconfig"} {
		_, err := cs.CoreV1().Secrets(ns).Get(t.Context(), name, metav1.GetOptions{})
		g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "reading Secret %s: %v", name, err)
	}
	_, err = cs.CoreV1().Secrets(ns).List(t.Context(), metav1.ListOptions{})
	g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "listing Secrets: %v", err)
}

// allActive holds when every named member is active and counted.
func allActive(names ...string) func(*lbv1.LoadBalancer) bool {
	return func(lb *lbv1.LoadBalancer) bool {
		for _, n := range names {
			if harness.TargetState(lb, n) != lbv1.TargetActive {
				return false
			}
		}
		return int(lb.Status.ActiveTargets) == len(names) && int(lb.Status.TotalTargets) == len(names)
	}
}
