//go:build linux

package remote_test

import (
	"context"
	"fmt"
	"net/url"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crenvtest "sigs.k8s.io/controller-runtime/pkg/envtest"

	agentv1 "github.com/caplb/caplb/api/agent/v1alpha1"
	lbv1 "github.com/caplb/caplb/api/v1alpha1"
	"github.com/caplb/caplb/e2e/harness"
	"github.com/caplb/caplb/e2e/lab"
	"github.com/caplb/caplb/e2e/lab/arplab"
	"github.com/caplb/caplb/e2e/testinfra"
	"github.com/caplb/caplb/providers/vip"
)

// nodeAPIPort is where each lab node reaches the workload API server, on its own loopback
// (lab.ProxyInto), as a kubelet's kubeconfig would name it.
const nodeAPIPort = 16443

// stepTimeout bounds one step of the flow (the manager, the agents and the client converging).
const stepTimeout = 60 * time.Second

// TestRemoteNodeLife: a Node's whole life behind an ARP VIP, with real packets. The VIP is
// published before any Node exists; three Nodes join the workload cluster and their agents
// (real caplb agents in network namespaces, each reading only its own Node with a kubelet-like
// credential) learn the membership the manager writes on them and elect one owner that answers
// the client through the VIP; the owner's Node is annotated disabled and the VIP moves off it;
// its Node is then deleted (its machine decommissioned): the member and the membership drop it
// and the VIP stays with the others. Throughout, the VIP never has no holder.
func TestRemoteNodeLife(t *testing.T) {
	g := NewWithT(t)
	l := lab.NewT(t, "remotenode")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

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
	wl, err := env.StartWorkload(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = wl.Stop() })

	// The management side: an externally managed Cluster and its LoadBalancer, in a tenant
	// namespace.
	ns, err := env.CreateNamespace(ctx, "remote")
	g.Expect(err).NotTo(HaveOccurred())
	cluster, err := env.CreateCluster(ctx, ns, "edge", harness.ClusterOptions{ExternallyManaged: true})
	g.Expect(err).NotTo(HaveOccurred())
	lb := &lbv1.LoadBalancer{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "lb"},
		Spec: lbv1.LoadBalancerSpec{
			ClusterName: cluster.Name,
			TargetKind:  lbv1.TargetKind{APIGroup: "", Kind: lbv1.NodeKind},
			Endpoint:    lbv1.APIEndpoint{Host: arplab.VIPv4.String(), Port: arplab.APIPort},
			TargetPort:  arplab.APIPort,
			Backend:     lbv1.Backend{ARP: &lbv1.ARPBackend{}},
			Quiesce: lbv1.Quiesce{DrainPeriod: &lbv1.Duration{Duration: 500 * time.Millisecond},
				Timeout: lbv1.Duration{Duration: time.Minute}},
		},
	}
	g.Expect(env.Client.Create(ctx, lb)).To(Succeed())
	_, err = env.WaitLB(ctx, ns, "lb", stepTimeout, "VIP published before any Node", func(lb *lbv1.LoadBalancer) bool {
		return lb.Status.Endpoint.Host == arplab.VIPv4.String() && len(lb.Status.Targets) == 0
	})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(wl.CreateKubeconfigSecret(ctx, env.Client, cluster)).To(Succeed())
	g.Expect(testinfra.SetProvisioned(ctx, env.Client, ns, cluster.Name)).To(Succeed())

	// The lab: three machines, agents not started yet (they boot with the cluster).
	apiURL, err := url.Parse(wl.ControlPlane.Config.Host)
	g.Expect(err).NotTo(HaveOccurred())
	kubeconfig := func(i int) string { return filepath.Join(l.Dir(), fmt.Sprintf("n%d-kubelet.conf", i+1)) }
	c, err := arplab.StartCluster(l, arplab.ClusterOptions{
		AgentBinary: bins.agent, StandinBinary: bins.standin,
		Idle: func(int) bool { return true },
		Tune: func(i int, cfg *agentv1.AgentConfiguration) {
			// As a new cluster's machines boot from the bootstrap Secret: no members, version 0,
			// the membership to come from the Node.
			cfg.Members = nil
			cfg.Membership = agentv1.MembershipConfig{Dynamic: true, StateFile: filepath.Join(l.Dir(), fmt.Sprintf("n%d-membership.json", i+1))}
			cfg.NodeAPI = agentv1.NodeAPIConfig{Kubeconfig: kubeconfig(i), ResyncInterval: agentv1.Duration{Duration: 2 * time.Second}}
		},
	})
	g.Expect(err).NotTo(HaveOccurred())

	// Nodes join the workload cluster: the kubelet registers its Node, the agent starts.
	cp := map[string]string{"node-role.kubernetes.io/control-plane": ""}
	names := make([]string, 0, len(c.Nodes))
	for i, n := range c.Nodes {
		_, err := wl.CreateNode(ctx, n.Name, cp, n.Addr4.String())
		g.Expect(err).NotTo(HaveOccurred())
		writeKubeletConfig(t, wl, n.Name, kubeconfig(i))
		p, err := lab.ProxyInto(n.NS, fmt.Sprintf("127.0.0.1:%d", nodeAPIPort), apiURL.Host)
		g.Expect(err).NotTo(HaveOccurred())
		t.Cleanup(func() { _ = p.Close() })
		g.Expect(c.StartAgent(n)).To(Succeed())
		names = append(names, n.Name)
	}
	got, err := env.WaitLB(ctx, ns, "lb", stepTimeout, "three Nodes active, agents on the membership", func(lb *lbv1.LoadBalancer) bool {
		return allActive(lb, names...) && harness.ConditionIs(lb, lbv1.AgentsReadyCondition, metav1.ConditionTrue) &&
			lb.Status.VIPOwner != ""
	})
	g.Expect(err).NotTo(HaveOccurred())
	owner := waitSingleOwner(t, c, nil)
	g.Expect(got.Status.VIPOwner).To(Equal(owner.Name), "status.vipOwner is the kernel's holder")
	g.Expect(membership(g, ctx, env, ns, cluster).Members).To(HaveLen(3))
	s := startSampler(c)

	// The owner's Node is disabled: the VIP moves off it (make-before-break), the member is
	// disabled once its agent reports quiesced.
	g.Expect(harness.AnnotateWith(ctx, wl.Client, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: owner.Name}},
		lbv1.DisabledAnnotation, ptrTo("decommission"))).To(Succeed())
	next := waitSingleOwner(t, c, []*arplab.Node{owner})
	_, err = env.WaitLB(ctx, ns, "lb", stepTimeout, "the old owner disabled", func(lb *lbv1.LoadBalancer) bool {
		return targetState(lb, owner.Name) == lbv1.TargetDisabled && lb.Status.ActiveTargets == 2 &&
			lb.Status.VIPOwner == next.Name
	})
	g.Expect(err).NotTo(HaveOccurred())

	// Its machine is decommissioned: the Node deleted, the agent stopped. The member goes, the
	// membership drops it, the VIP stays where it is.
	g.Expect(wl.Client.Delete(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: owner.Name}})).To(Succeed())
	rest := slices.DeleteFunc(slices.Clone(names), func(n string) bool { return n == owner.Name })
	_, err = env.WaitLB(ctx, ns, "lb", stepTimeout, "the deleted Node is no member", func(lb *lbv1.LoadBalancer) bool {
		return allActive(lb, rest...) && len(lb.Status.Targets) == 2
	})
	g.Expect(err).NotTo(HaveOccurred())
	g.Eventually(func(g Gomega) {
		m := membership(g, ctx, env, ns, cluster)
		g.Expect(m.Has(owner.Name)).To(BeFalse())
		g.Expect(m.Members).To(HaveLen(2))
	}, stepTimeout, 200*time.Millisecond).Should(Succeed())
	g.Expect(owner.Agent.Stop(5 * time.Second)).To(Succeed())
	g.Consistently(func(g Gomega) {
		h, err := c.Holders(arplab.VIPv4)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(h).To(Equal([]string{next.Name}))
	}, 2*time.Second, 100*time.Millisecond).Should(Succeed(), "the VIP stays with the owner")
	waitSingleOwner(t, c, []*arplab.Node{owner})

	g.Expect(s.stop()).To(BeZero(), "samples with no holder of the VIP after the first owner")
}

func ptrTo[T any](v T) *T { return &v }

func targetState(lb *lbv1.LoadBalancer, name string) lbv1.TargetState {
	return harness.TargetState(lb, name)
}

func allActive(lb *lbv1.LoadBalancer, names ...string) bool {
	for _, n := range names {
		if harness.TargetState(lb, n) != lbv1.TargetActive {
			return false
		}
	}
	return int(lb.Status.ActiveTargets) == len(names)
}

// membership reads the authoritative membership from the bootstrap Secret.
func membership(g Gomega, ctx context.Context, env *harness.Env, ns string, cluster *clusterv1.Cluster) agentv1.Membership {
	sec := &corev1.Secret{}
	g.Expect(env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: cluster.Name + vip.SecretSuffix}, sec)).To(Succeed())
	m, err := agentv1.ParseMembership(string(sec.Data[agentv1.SecretMembershipKey]))
	g.Expect(err).NotTo(HaveOccurred())
	return m
}

// waitSingleOwner waits until exactly one node (not in exclude) holds the VIP in its kernel and
// the client reaches it through the VIP.
func waitSingleOwner(t *testing.T, c *arplab.Cluster, exclude []*arplab.Node) *arplab.Node {
	t.Helper()
	g := NewWithT(t)
	var owner string
	g.Eventually(func(g Gomega) {
		h, err := c.Holders(arplab.VIPv4)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(h).To(HaveLen(1), "holders of the VIP")
		for _, n := range exclude {
			g.Expect(h[0]).NotTo(Equal(n.Name))
		}
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		defer cancel()
		who, err := c.Connect(ctx, arplab.VIPv4)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(who).To(Equal(h[0]), "the client reaches the holder through the VIP")
		owner = h[0]
	}, stepTimeout, 50*time.Millisecond).Should(Succeed())
	return c.Node(owner)
}

// sampler counts the samples (every 10 ms, kernel truth) in which no node holds the VIP.
type sampler struct {
	mu    sync.Mutex
	empty int
	quit  chan struct{}
	done  chan struct{}
}

func startSampler(c *arplab.Cluster) *sampler {
	s := &sampler{quit: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-s.quit:
				return
			case <-tick.C:
				h, err := c.Holders(arplab.VIPv4)
				if err == nil && len(h) == 0 {
					s.mu.Lock()
					s.empty++
					s.mu.Unlock()
				}
			}
		}
	}()
	return s
}

func (s *sampler) stop() int {
	close(s.quit)
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.empty
}

// writeKubeletConfig writes a kubeconfig for the user system:node:<name> (group system:nodes)
// of the workload cluster, allowed get/list/watch/patch on its own Node only, pointing at the
// node's loopback proxy to the workload API server: the kubelet's credential an agent uses.
func writeKubeletConfig(t *testing.T, wl *harness.Workload, name, path string) {
	t.Helper()
	g := NewWithT(t)
	ctx := context.Background()
	user := "system:node:" + name
	g.Expect(wl.Client.Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "own-node-" + name},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"nodes"},
			Verbs: []string{"get", "list", "watch", "patch"}, ResourceNames: []string{name}}},
	})).To(Succeed())
	g.Expect(wl.Client.Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "own-node-" + name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "own-node-" + name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}},
	})).To(Succeed())
	au, err := wl.ControlPlane.Environment.AddUser(crenvtest.User{Name: user, Groups: []string{"system:nodes"}}, nil)
	g.Expect(err).NotTo(HaveOccurred())
	rc := au.Config()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["lab"] = &clientcmdapi.Cluster{Server: fmt.Sprintf("https://127.0.0.1:%d", nodeAPIPort), CertificateAuthorityData: rc.CAData}
	kc.AuthInfos[user] = &clientcmdapi.AuthInfo{ClientCertificateData: rc.CertData, ClientKeyData: rc.KeyData}
	kc.Contexts["lab"] = &clientcmdapi.Context{Cluster: "lab", AuthInfo: user}
	kc.CurrentContext = "lab"
	g.Expect(clientcmd.WriteToFile(*kc, path)).To(Succeed())
}
