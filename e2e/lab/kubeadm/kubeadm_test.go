//go:build linux

package kubeadm

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"

	"github.com/caplb/caplb/e2e/envtest"
	"github.com/caplb/caplb/e2e/lab"
)

var vip = netip.MustParseAddr("10.47.0.100")

// topology is three machines and a client on one segment.
type topology struct {
	l        *lab.Lab
	client   *lab.Netns
	machines []Machine
	ns       map[string]*lab.Netns
}

func newTopology(t *testing.T) *topology {
	t.Helper()
	g := NewWithT(t)
	l := lab.NewT(t, "kubeadm")
	tp := &topology{l: l, ns: map[string]*lab.Netns{}}
	sw, err := l.AddNamespace("sw")
	g.Expect(err).NotTo(HaveOccurred())
	tp.client, err = l.AddNamespace("client")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(l.AddLink(tp.client, "eth0", sw, "p-client")).To(Succeed())
	g.Expect(tp.client.AddAddr("eth0", netip.MustParsePrefix("10.47.0.2/24"))).To(Succeed())
	ports := []string{"p-client"}
	for i := 1; i <= 3; i++ {
		m := Machine{Name: fmt.Sprintf("cp-%d", i), Addr: netip.AddrFrom4([4]byte{10, 47, 0, byte(10 + i)})}
		m.Root = filepath.Join(l.Dir(), "machines", m.Name, "root")
		ns, err := l.AddNamespace(m.Name)
		g.Expect(err).NotTo(HaveOccurred())
		port := "p-" + m.Name
		g.Expect(l.AddLink(ns, "eth0", sw, port)).To(Succeed())
		g.Expect(ns.AddAddr("eth0", netip.PrefixFrom(m.Addr, 24))).To(Succeed())
		ports = append(ports, port)
		tp.machines = append(tp.machines, m)
		tp.ns[m.Name] = ns
	}
	g.Expect(l.AddBridge(sw, "br0", ports...)).To(Succeed())
	return tp
}

func binaries(t *testing.T, l *lab.Lab) (string, Binaries) {
	t.Helper()
	dir, err := envtest.BinaryDir()
	if err != nil {
		t.Fatal(err)
	}
	kubeadm := filepath.Join(dir, "kubeadm")
	if _, err := os.Stat(kubeadm); err != nil {
		lab.SkipOrFailInCI(t, "needs kubeadm in %s: run `make testbin`", dir)
	}
	b := Binaries{Podrun: filepath.Join(l.Dir(), "podrun"), Etcd: filepath.Join(dir, "etcd"), APIServer: filepath.Join(dir, "kube-apiserver"),
		ControllerManager: filepath.Join(dir, "kube-controller-manager")}
	if _, err := os.Stat(b.ControllerManager); err != nil {
		lab.SkipOrFailInCI(t, "needs kube-controller-manager in %s: run `make testbin`", dir)
	}
	if err := lab.BuildBinary("./e2e/lab/podrun", b.Podrun); err != nil {
		t.Fatal(err)
	}
	return kubeadm, b
}

// kubeadm's own files run as a control plane behind the endpoint: the first machine
// bootstraps etcd and the API server from kubeadm's manifests, and kube-controller-manager's
// bootstrap signer signs cluster-info; a second joins through kubeadm's own discovery at the
// endpoint, its etcd member as a learner that is promoted, the first is removed as KubeadmControlPlane removes a machine, and the second
// serves alone — all verified the way a client through the endpoint verifies them.
func TestKubeadmControlPlane(t *testing.T) {
	lab.SkipUnlessRoot(t)
	g := NewWithT(t)
	tp := newTopology(t)
	kubeadm, bins := binaries(t, tp.l)
	ctx := context.Background()
	token, err := NewBootstrapToken()
	g.Expect(err).NotTo(HaveOccurred())
	c := Cluster{Name: "lab", Endpoint: vip, Kubeadm: kubeadm, KubernetesVersion: envtest.K8sVersion, BootstrapToken: token,
		ControllerManagerArgs: []Arg{{"controllers", "bootstrapsigner,tokencleaner"}}}
	m1, m2 := tp.machines[0], tp.machines[1]
	kubelet := func(m Machine) Kubelet {
		return Kubelet{NS: tp.ns[m.Name], Machine: m, Bins: bins, Scratch: filepath.Join(tp.l.Dir(), "rootfs")}
	}

	// The first machine: kubeadm init's files.
	g.Expect(c.Init(ctx, m1, tp.ns[m1.Name])).To(Succeed())
	expectKubeadmFiles(g, m1, c)
	for _, mf := range []string{EtcdManifest, APIManifest} {
		_, err := kubelet(m1).Start(mf)
		g.Expect(err).NotTo(HaveOccurred())
	}
	// The endpoint on the first machine, as the VIP owner holds it.
	g.Expect(tp.ns[m1.Name].AddAddr("eth0", netip.PrefixFrom(vip, 32))).To(Succeed())
	client := endpointClient(g, m1, tp.client)
	g.Eventually(readyz(client, vip), 90*time.Second, 250*time.Millisecond).Should(Equal("ok"), "the API server from kubeadm's manifest is ready through the endpoint")
	cs := adminClientset(g, m1, tp.client) // kubeadm init's admin.conf: its server is the endpoint
	_, err = cs.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	g.Expect(err).To(MatchError(ContainSubstring("forbidden")), "admin.conf's group has no rights before kubeadm binds it")
	g.Expect(c.UploadConfig(ctx, m1, tp.ns[m1.Name])).To(Succeed())
	g.Eventually(func() error {
		_, err := cs.CoreV1().ConfigMaps("kube-system").Get(ctx, "kubeadm-config", metav1.GetOptions{})
		return err
	},
		30*time.Second, 250*time.Millisecond).Should(Succeed(), "admin.conf reads the uploaded kubeadm-config")
	// kube-controller-manager from kubeadm's manifest, with the controllers joins need: its
	// bootstrap signer signs cluster-info for the token kubeadm's bootstrap-token phase made.
	_, err = kubelet(m1).Start(ControllerManagerManifest)
	g.Expect(err).NotTo(HaveOccurred())
	g.Eventually(func() (map[string]string, error) {
		cm, err := cs.CoreV1().ConfigMaps("kube-public").Get(ctx, "cluster-info", metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		return cm.Data, nil
	}, 60*time.Second, 250*time.Millisecond).Should(HaveKey("jws-kubeconfig-"+strings.Split(token, ".")[0]),
		"the bootstrap signer signed cluster-info for the token")

	var etcd *Etcd
	// The second machine joins: its etcd member first as a learner, then promoted.
	etcd, err = NewEtcd(m1, tp.client.DialContext, m1.ClientURL())
	g.Expect(err).NotTo(HaveOccurred())
	defer etcd.Close()
	id, initial, err := etcd.AddLearner(ctx, m2)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(etcd.Members(ctx)).To(ContainElement(Member{ID: id, PeerURL: m2.PeerURL(), Learner: true}), "a joiner starts as a learner")
	shared, err := ReadShared(m1)
	g.Expect(err).NotTo(HaveOccurred())
	caHash, err := CACertHash(shared["ca.crt"])
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(c.JoinDiscovered(ctx, m2, tp.ns[m2.Name], shared, initial, Discovery{Endpoint: netip.AddrPortFrom(vip, APIPort).String(),
		Token: strings.Split(token, ".")[0] + ".0123456789abcdef", CACertHash: caHash})).To(MatchError(ContainSubstring("JWS signature")),
		"discovery refuses cluster-info when the signature does not verify with the token's secret")
	// An endpoint the serving certificate does not name (an address of the first machine's that
	// is no SAN): cluster-info is signed, but its second, verified fetch fails.
	unnamed := netip.MustParseAddr("10.47.0.201")
	g.Expect(tp.ns[m1.Name].AddAddr("eth0", netip.PrefixFrom(unnamed, 32))).To(Succeed())
	g.Expect(c.JoinDiscovered(ctx, m2, tp.ns[m2.Name], shared, initial, Discovery{Endpoint: netip.AddrPortFrom(unnamed, APIPort).String(),
		Token: token, CACertHash: caHash, Timeout: 5 * time.Second})).To(MatchError(ContainSubstring("x509")),
		"discovery refuses an endpoint the API server's certificate does not carry")
	g.Expect(c.JoinDiscovered(ctx, m2, tp.ns[m2.Name], shared, initial, Discovery{Endpoint: netip.AddrPortFrom(vip, APIPort).String(),
		Token: token, CACertHash: caHash})).To(Succeed())
	expectKubeadmFiles(g, m2, c)
	g.Expect(ServerOf(m2, AdminConfPath)).To(Equal("https://"+netip.AddrPortFrom(vip, APIPort).String()),
		"the joined machine's admin.conf names the uploaded controlPlaneEndpoint")
	for _, m := range []Machine{m1, m2} {
		g.Expect(ServerOf(m, KubeletConfPath)).To(Equal("https://"+netip.AddrPortFrom(m.Addr, APIPort).String()),
			"a control-plane machine's kubelet (and caplb's agent, which mounts its kubeconfig) talks to its own API server")
	}
	etcdArgs := manifestArgs(g, m2, EtcdManifest)
	g.Expect(etcdArgs).To(ContainElements("--initial-cluster-state=existing", "--initial-cluster=cp-1="+m1.PeerURL()+",cp-2="+m2.PeerURL()))
	for _, mf := range []string{EtcdManifest, APIManifest} {
		_, err := kubelet(m2).Start(mf)
		g.Expect(err).NotTo(HaveOccurred())
	}
	pctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	g.Expect(etcd.Promote(pctx, id)).To(Succeed(), "the learner catches up and is promoted")
	cancel()
	g.Expect(etcd.Members(ctx)).To(ConsistOf(
		Member{ID: mustID(g, etcd, "cp-1"), Name: "cp-1", PeerURL: m1.PeerURL()},
		Member{ID: id, Name: "cp-2", PeerURL: m2.PeerURL()}))
	g.Eventually(readyzAt(client, m2.Addr), 90*time.Second, 250*time.Millisecond).Should(Equal("ok"), "the joined API server is ready")

	// The kubelet's part KubeadmControlPlane reads, on both machines: Nodes, Leases, mirror Pods
	// Ready by their manifests' probes, the kubelet API that port-forwards into them.
	stop1 := kubeletOf(g, tp, m1, c.KubernetesVersion, t.Logf)
	defer stop1()
	stop2 := kubeletOf(g, tp, m2, c.KubernetesVersion, t.Logf)
	defer stop2()
	expectMirrorsReady(ctx, g, cs, "etcd-cp-1", "kube-apiserver-cp-1", "kube-controller-manager-cp-1", "etcd-cp-2", "kube-apiserver-cp-2")
	expectNodeReported(ctx, g, cs, "cp-1")
	expectNodeReported(ctx, g, cs, "cp-2")
	code, _ := kubeletAnswer(g, tp, m1, "etcd-cp-1", nil)
	g.Expect(code).To(Equal(http.StatusUnauthorized), "the kubelet API refuses a client without a certificate")
	nobody, err := SignedClientCert(shared["ca.crt"], shared["ca.key"], "lab:nobody")
	g.Expect(err).NotTo(HaveOccurred())
	code, body := kubeletAnswer(g, tp, m1, "etcd-cp-1", &nobody)
	g.Expect(code).To(Equal(http.StatusForbidden))
	g.Expect(body).To(ContainSubstring("Forbidden (user=lab:nobody, verb=create, resource=nodes, subresource=proxy)"),
		"the cluster's SubjectAccessReview refuses a user the CA signed but RBAC does not allow")
	apiClient, err := tls.LoadX509KeyPair(m1.Path(PKIDir+"/apiserver-kubelet-client.crt"), m1.Path(PKIDir+"/apiserver-kubelet-client.key"))
	g.Expect(err).NotTo(HaveOccurred())
	code, _ = kubeletAnswer(g, tp, m1, "etcd-cp-2", &apiClient)
	g.Expect(code).To(Equal(http.StatusNotFound), "the API server's identity is allowed; cp-2's etcd is not on cp-1")

	// KubeadmControlPlane's own etcd client, from the management side through the endpoint:
	// members listed, leadership moved off the machine it will delete, its member removed.
	mgmt := managementConfig(t, g, tp, m1)
	etcd2, err := NewEtcd(m2, tp.client.DialContext, m2.ClientURL())
	g.Expect(err).NotTo(HaveOccurred())
	defer etcd2.Close()
	ids := map[string]uint64{"cp-1": mustID(g, etcd, "cp-1"), "cp-2": id}
	kcp1 := kcpEtcdClient(ctx, g, mgmt, m1, "cp-1")
	defer kcp1.Close()
	listed, err := kcp1.Members(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(listed).To(ConsistOf(HaveField("Name", "cp-1"), HaveField("Name", "cp-2")), "etcd's members through the port-forward")
	if leader, err := etcd2.Leader(ctx); err == nil && leader == ids["cp-2"] {
		kcp2 := kcpEtcdClient(ctx, g, mgmt, m1, "cp-2")
		g.Eventually(func() error { return kcp2.MoveLeader(ctx, ids["cp-1"]) }, 30*time.Second, time.Second).Should(Succeed())
		_ = kcp2.Close()
		g.Eventually(func() (uint64, error) { return etcd2.Leader(ctx) }, 30*time.Second, 250*time.Millisecond).Should(Equal(ids["cp-1"]))
	}
	g.Eventually(func() error { return kcp1.MoveLeader(ctx, ids["cp-2"]) }, 30*time.Second, time.Second).Should(Succeed(),
		"KCP moves leadership off the machine it deletes, through etcd-cp-1's port-forward")
	g.Eventually(func() (uint64, error) { return etcd2.Leader(ctx) }, 30*time.Second, 250*time.Millisecond).Should(Equal(ids["cp-2"]),
		"etcd itself names the new leader")

	// The first machine leaves as KubeadmControlPlane removes it: its etcd member first.
	kcp2 := kcpEtcdClient(ctx, g, mgmt, m1, "cp-2")
	defer kcp2.Close()
	g.Eventually(func() error { return kcp2.RemoveMember(ctx, ids["cp-1"]) }, 30*time.Second, time.Second).Should(Succeed(),
		"KCP removes the member through etcd-cp-2's port-forward")
	stop1()
	g.Expect(tp.l.RemoveNamespace(tp.ns[m1.Name])).To(Succeed(), "the machine is deleted by its infrastructure")
	g.Expect(etcd2.Members(ctx)).To(HaveLen(1))
	// The endpoint moves to the survivor, which serves reads and writes alone.
	g.Expect(tp.ns[m2.Name].AddAddr("eth0", netip.PrefixFrom(vip, 32))).To(Succeed())
	g.Eventually(readyz(client, vip), 60*time.Second, 250*time.Millisecond).Should(Equal("ok"))
	g.Eventually(func() error {
		_, err := cs.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{GenerateName: "probe-"}}, metav1.CreateOptions{})
		return err
	}, 30*time.Second, 250*time.Millisecond).Should(Succeed(), "a write through the endpoint commits in the one-member etcd")
}

func mustID(g Gomega, e *Etcd, name string) uint64 {
	ms, err := e.Members(context.Background())
	g.Expect(err).NotTo(HaveOccurred())
	for _, m := range ms {
		if m.Name == name {
			return m.ID
		}
	}
	return 0
}

// expectKubeadmFiles checks what kubeadm wrote: the serving certificate carries the endpoint and
// the machine's address and no loopback address, and the manifests name the real images.
func expectKubeadmFiles(g Gomega, m Machine, c Cluster) {
	b, err := os.ReadFile(m.Path(filepath.Join(PKIDir, "apiserver.crt")))
	g.Expect(err).NotTo(HaveOccurred())
	cert := parseCert(g, b)
	var ips []string
	for _, ip := range cert.IPAddresses {
		ips = append(ips, ip.String())
	}
	g.Expect(ips).To(ContainElements(c.Endpoint.String(), m.Addr.String(), "10.96.0.1"))
	g.Expect(ips).NotTo(ContainElement("127.0.0.1"), "kubeadm puts no loopback address on the serving certificate")
	g.Expect(cert.DNSNames).To(ContainElements(m.Name, "kubernetes", "kubernetes.default.svc.cluster.local"))
	for mf, image := range map[string]string{EtcdManifest: "registry.k8s.io/etcd:", APIManifest: "registry.k8s.io/kube-apiserver:" + c.KubernetesVersion} {
		pod := readManifest(g, m, mf)
		g.Expect(pod.Spec.Containers[0].Image).To(HavePrefix(image))
	}
	info, err := os.Stat(m.Path(filepath.Join(PKIDir, "ca.key")))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(info.Mode().Perm()).To(Equal(os.FileMode(0o600)), "keys are 0600 as kubeadm writes them")
	_, err = os.Stat(m.Path(KubeletConfPath))
	g.Expect(err).NotTo(HaveOccurred(), "the kubelet's kubeconfig, which caplb's agent pod mounts")
}

func parseCert(g Gomega, b []byte) *x509.Certificate {
	block, _ := pem.Decode(b)
	g.Expect(block).NotTo(BeNil())
	cert, err := x509.ParseCertificate(block.Bytes)
	g.Expect(err).NotTo(HaveOccurred())
	return cert
}

func readManifest(g Gomega, m Machine, path string) *corev1.Pod {
	b, err := os.ReadFile(m.Path(path))
	g.Expect(err).NotTo(HaveOccurred())
	pod := &corev1.Pod{}
	g.Expect(yaml.Unmarshal(b, pod)).To(Succeed())
	return pod
}

func manifestArgs(g Gomega, m Machine, path string) []string {
	c := readManifest(g, m, path).Spec.Containers[0]
	return append(append([]string{}, c.Command...), c.Args...)
}

// endpointClient is an HTTPS client in the client namespace that trusts the cluster CA and
// verifies the server's name the way a kubeconfig pointing at the endpoint does.
func endpointClient(g Gomega, m Machine, from *lab.Netns) *http.Client {
	ca, err := os.ReadFile(m.Path(filepath.Join(PKIDir, "ca.crt")))
	g.Expect(err).NotTo(HaveOccurred())
	pool := x509.NewCertPool()
	g.Expect(pool.AppendCertsFromPEM(ca)).To(BeTrue())
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		DialContext: from.DialContext, DisableKeepAlives: true, TLSClientConfig: &tls.Config{RootCAs: pool}}}
}

func readyz(c *http.Client, at netip.Addr) func() (string, error) { return readyzAt(c, at) }

func readyzAt(c *http.Client, at netip.Addr) func() (string, error) {
	return func() (string, error) {
		resp, err := c.Get("https://" + netip.AddrPortFrom(at, APIPort).String() + "/readyz")
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return strings.TrimSpace(string(b)), err
	}
}

// adminClientset is client-go with kubeadm's admin.conf (its server is the endpoint), dialling
// from the client namespace.
func adminClientset(g Gomega, m Machine, from *lab.Netns) *kubernetes.Clientset {
	cfg, err := clientcmd.BuildConfigFromFlags("", m.Path(AdminConfPath))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(cfg.Host).To(Equal("https://" + netip.AddrPortFrom(vip, APIPort).String()))
	cfg.Dial = from.DialContext
	cs, err := kubernetes.NewForConfig(cfg)
	g.Expect(err).NotTo(HaveOccurred())
	return cs
}
