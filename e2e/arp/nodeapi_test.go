//go:build linux

package arp_test

import (
	"context"
	"fmt"
	"net/url"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-logr/logr"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	crenvtest "sigs.k8s.io/controller-runtime/pkg/envtest"
	crlog "sigs.k8s.io/controller-runtime/pkg/log"

	agentv1 "github.com/caplb/caplb/api/agent/v1alpha1"
	"github.com/caplb/caplb/e2e/envtest"
	"github.com/caplb/caplb/e2e/lab"
	"github.com/caplb/caplb/e2e/lab/arplab"
)

// nodeAPIPort is where each lab node reaches the test API server, on its
// own loopback (lab.ProxyInto).
const nodeAPIPort = 16443

// TestNodeAnnotations runs three agents whose only source of membership is
// their Node object in a real API server (version 0 and no members in their
// files, as a new cluster's machines boot), reached with a kubelet-like
// credential each (a non-admin user system:node:<name> allowed only
// get/list/watch/patch on its own Node). They learn the membership from the
// annotation and elect an owner; `kubectl annotate node <owner>
// loadbalancer.cluster.x-k8s.io/disabled=maintenance` moves the VIP off it
// and its report on the Node says quiesced; removing the annotation puts it
// back as a backup (no preemption). Throughout: one holder, never none.
func TestNodeAnnotations(t *testing.T) {
	g := NewWithT(t)
	crlog.SetLogger(logr.Discard())
	env, err := envtest.Start(envtest.Options{})
	g.Expect(err).NotTo(HaveOccurred(), "test API server (make testbin)")
	t.Cleanup(func() { _ = env.Stop() })
	admin := kubernetes.NewForConfigOrDie(env.Config)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	apiURL, err := url.Parse(env.Config.Host)
	g.Expect(err).NotTo(HaveOccurred())

	l := lab.NewT(t, "mshipapi")
	kubeconfig := func(i int) string { return filepath.Join(l.Dir(), fmt.Sprintf("n%d-kubelet.conf", i+1)) }
	c, err := arplab.StartCluster(l, arplab.ClusterOptions{
		AgentBinary: bins.agent, StandinBinary: bins.standin,
		Idle: func(int) bool { return true },
		Tune: func(i int, cfg *agentv1.AgentConfiguration) {
			cfg.Members = nil
			cfg.Membership = agentv1.MembershipConfig{Dynamic: true, StateFile: filepath.Join(l.Dir(), fmt.Sprintf("n%d-membership.json", i+1))}
			cfg.NodeAPI = agentv1.NodeAPIConfig{Kubeconfig: kubeconfig(i), ResyncInterval: agentv1.Duration{Duration: 2 * time.Second}}
		},
	})
	g.Expect(err).NotTo(HaveOccurred())

	doc := agentv1.Membership{Version: 1}
	for _, n := range c.Nodes {
		doc.Members = append(doc.Members, agentv1.MemberConfig{Name: n.Name, Address: n.Addr4.String()})
	}
	for i, n := range c.Nodes {
		_, err := admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.Name,
			Annotations: map[string]string{agentv1.MembershipAnnotation: doc.String()}}}, metav1.CreateOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		writeKubeletConfig(t, env, n.Name, kubeconfig(i))
		p, err := lab.ProxyInto(n.NS, fmt.Sprintf("127.0.0.1:%d", nodeAPIPort), apiURL.Host)
		g.Expect(err).NotTo(HaveOccurred())
		t.Cleanup(func() { _ = p.Close() })
		g.Expect(c.StartAgent(n)).To(Succeed())
	}
	owner := waitSingleOwner(t, c, nil, 30*time.Second)
	s := newOwnerSampler(c, arplab.VIPv4)
	s.noGap = true
	defer s.check(t)

	report := func(g Gomega, name string) agentv1.AgentStatus {
		node, err := admin.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		r, err := agentv1.ParseAgentStatus(node.Annotations[agentv1.AgentStatusAnnotation])
		g.Expect(err).NotTo(HaveOccurred())
		return r
	}
	g.Eventually(func(g Gomega) {
		for _, n := range c.Nodes {
			r := report(g, n.Name)
			g.Expect(r.MembershipVersion).To(Equal(int64(1)), n.Name)
			g.Expect(r.Member).To(BeTrue(), n.Name)
			g.Expect(r.InDataPlane).To(BeTrue(), n.Name)
			g.Expect(r.Holding).To(Equal(n == owner), n.Name)
		}
	}, 20*time.Second, 200*time.Millisecond).Should(Succeed(), "every agent reports on its Node")

	patch := func(name, p string) {
		_, err := admin.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, []byte(p), metav1.PatchOptions{})
		g.Expect(err).NotTo(HaveOccurred())
	}
	patch(owner.Name, `{"metadata":{"annotations":{"`+agentv1.DisabledAnnotation+`":"maintenance"}}}`)
	next := waitSingleOwner(t, c, []*arplab.Node{owner}, 15*time.Second)
	g.Eventually(func(g Gomega) {
		r := report(g, owner.Name)
		g.Expect(r.Quiesced).To(BeTrue())
		g.Expect(r.Holding).To(BeFalse())
		g.Expect(r.Reason).To(ContainSubstring("disabled annotation: maintenance"))
	}, 15*time.Second, 200*time.Millisecond).Should(Succeed(), "the disabled owner reports quiesced")

	patch(owner.Name, `{"metadata":{"annotations":{"`+agentv1.DisabledAnnotation+`":null}}}`)
	g.Eventually(func(g Gomega) {
		r := report(g, owner.Name)
		g.Expect(r.Quiesced).To(BeFalse())
		g.Expect(r.Eligible).To(BeTrue())
	}, 15*time.Second, 200*time.Millisecond).Should(Succeed())
	g.Consistently(func() []string { return holdersNow(t, c, arplab.VIPv4) }, time.Second, 50*time.Millisecond).
		Should(Equal([]string{next.Name}), "no preemption when the old owner comes back")
}

// writeKubeletConfig writes a kubeconfig for the user system:node:<name>
// (group system:nodes) whose only permissions are get/list/watch/patch on
// its own Node, pointing at the node's loopback proxy to the API server.
func writeKubeletConfig(t *testing.T, env *envtest.Env, name, path string) {
	t.Helper()
	g := NewWithT(t)
	ctx := context.Background()
	admin := kubernetes.NewForConfigOrDie(env.Config)
	user := "system:node:" + name
	_, err := admin.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "own-node-" + name},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"nodes"},
			Verbs: []string{"get", "list", "watch", "patch"}, ResourceNames: []string{name}}},
	}, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	_, err = admin.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "own-node-" + name},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "own-node-" + name},
		Subjects:   []rbacv1.Subject{{Kind: "User", APIGroup: "rbac.authorization.k8s.io", Name: user}},
	}, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	au, err := env.Environment.AddUser(crenvtest.User{Name: user, Groups: []string{"system:nodes"}}, nil)
	g.Expect(err).NotTo(HaveOccurred())
	rc := au.Config()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["lab"] = &clientcmdapi.Cluster{Server: fmt.Sprintf("https://127.0.0.1:%d", nodeAPIPort), CertificateAuthorityData: rc.CAData}
	kc.AuthInfos[user] = &clientcmdapi.AuthInfo{ClientCertificateData: rc.CertData, ClientKeyData: rc.KeyData, Token: rc.BearerToken}
	kc.Contexts["lab"] = &clientcmdapi.Context{Cluster: "lab", AuthInfo: user}
	kc.CurrentContext = "lab"
	g.Expect(clientcmd.WriteToFile(*kc, path)).To(Succeed())
}
