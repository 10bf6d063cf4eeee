package agent

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-logr/logr"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	crenvtest "sigs.k8s.io/controller-runtime/pkg/envtest"
	crlog "sigs.k8s.io/controller-runtime/pkg/log"

	agentv1 "github.com/caplb/caplb/api/agent/v1alpha1"
	"github.com/caplb/caplb/e2e/envtest"
	"github.com/caplb/caplb/modes/election"
)

// TestNodeAPI runs the agent's Node API against a real kube-apiserver with
// a kubelet-like identity: a non-admin user in system:nodes whose only
// permissions are get/list/watch/patch on its own Node (RBAC resourceNames;
// envtest has no Node authorizer). The kubeconfig appears only after the
// agent started (kubeadm writes kubelet.conf late). The agent takes the
// membership from the annotation, honours the disabled and quiesce
// annotations (not the exclude-from-external-load-balancers label, which
// kubeadm puts on every control-plane Node), and reports on its Node.
func TestNodeAPI(t *testing.T) {
	g := NewWithT(t)
	crlog.SetLogger(logr.Discard())
	env, err := envtest.Start(envtest.Options{})
	g.Expect(err).NotTo(HaveOccurred(), "starting the test API server (make testbin)")
	t.Cleanup(func() { _ = env.Stop() })
	admin := kubernetes.NewForConfigOrDie(env.Config)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	const self = "cp-1"
	for _, name := range []string{self, "cp-2"} {
		_, err := admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
		g.Expect(err).NotTo(HaveOccurred())
	}
	_, err = admin.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "own-node"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"nodes"},
			Verbs: []string{"get", "list", "watch", "patch"}, ResourceNames: []string{self}}},
	}, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	_, err = admin.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "own-node"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "own-node"},
		Subjects:   []rbacv1.Subject{{Kind: "User", APIGroup: "rbac.authorization.k8s.io", Name: "system:node:" + self}},
	}, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	user, err := env.Environment.AddUser(crenvtest.User{Name: "system:node:" + self, Groups: []string{"system:nodes"}}, nil)
	g.Expect(err).NotTo(HaveOccurred())
	kubelet := kubernetes.NewForConfigOrDie(user.Config())
	g.Eventually(func() error {
		_, err := kubelet.CoreV1().Nodes().Get(ctx, self, metav1.GetOptions{})
		return err
	}, 10*time.Second).Should(Succeed(), "RBAC in effect")
	_, err = kubelet.CoreV1().Nodes().Patch(ctx, "cp-2", types.MergePatchType, []byte(`{"metadata":{"annotations":{"x":"y"}}}`), metav1.PatchOptions{})
	g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "the credential may modify only its own Node: %v", err)

	// The agent: self is the least preferred of three, so it stands by.
	var store *memberStore
	a, ml, _, _ := newTestAgent(t, 2, func(s *testSetup) {
		s.ml.version = 1
		s.cfg.Membership = agentv1.MembershipConfig{Dynamic: true, Version: 1, StateFile: filepath.Join(t.TempDir(), "membership.json")}
		store, err = newMemberStore(s.cfg, logr.Discard())
		g.Expect(err).NotTo(HaveOccurred())
		store.run = func(r election.Roster) { s.ml.SetRoster(r) }
		s.parts.store = store
	})
	_ = ml
	actx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(actx, context.Background()) }()
	defer func() { stop(); <-done }()

	kubeconfig := filepath.Join(t.TempDir(), "kubelet.conf")
	n := &nodeAPI{cfg: agentv1.NodeAPIConfig{Kubeconfig: kubeconfig, NodeName: self, ResyncInterval: agentv1.Duration{Duration: 2 * time.Second}},
		log: a.log, agent: a, store: store, minPatch: 100 * time.Millisecond}
	go n.run(actx)
	time.Sleep(1500 * time.Millisecond) // the agent waits for the kubeconfig meanwhile
	kc, err := user.KubeConfig()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(os.WriteFile(kubeconfig, kc, 0o600)).To(Succeed())

	report := func(g Gomega) agentv1.AgentStatus {
		node, err := admin.CoreV1().Nodes().Get(ctx, self, metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		s, ok := node.Annotations[agentv1.AgentStatusAnnotation]
		g.Expect(ok).To(BeTrue(), "agent-status annotation")
		r, err := agentv1.ParseAgentStatus(s)
		g.Expect(err).NotTo(HaveOccurred())
		return r
	}
	g.Eventually(func(g Gomega) {
		r := report(g)
		g.Expect(r.MembershipVersion).To(Equal(int64(1)))
		g.Expect(r.Eligible).To(BeTrue())
		g.Expect(r.InDataPlane).To(BeTrue())
		g.Expect(r.Quiesced).To(BeFalse())
	}, 20*time.Second, 100*time.Millisecond).Should(Succeed())

	annotate := func(patch string) {
		_, err := admin.CoreV1().Nodes().Patch(ctx, self, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
		g.Expect(err).NotTo(HaveOccurred())
	}
	doc := agentv1.Membership{Version: 2, Members: []agentv1.MemberConfig{
		{Name: "b", Address: "192.0.2.2"}, {Name: "c", Address: "192.0.2.3"}, {Name: "self", Address: "192.0.2.1"}, {Name: "d", Address: "192.0.2.4"}}}
	annotate(`{"metadata":{"annotations":{"` + agentv1.MembershipAnnotation + `":` + quoteJSON(doc.String()) + `}}}`)
	g.Eventually(func(g Gomega) {
		g.Expect(store.current().Version).To(Equal(int64(2)))
		g.Expect(report(g).MembershipVersion).To(Equal(int64(2)))
	}, 10*time.Second, 100*time.Millisecond).Should(Succeed(), "membership from the Node, run and reported")

	for _, tc := range []struct{ name, on, off, reason string }{
		{"disabled annotation", `{"metadata":{"annotations":{"` + agentv1.DisabledAnnotation + `":"maintenance"}}}`,
			`{"metadata":{"annotations":{"` + agentv1.DisabledAnnotation + `":null}}}`, "disabled annotation: maintenance"},
		{"quiesce annotation", `{"metadata":{"annotations":{"` + agentv1.QuiesceAnnotation + `":"removing"}}}`,
			`{"metadata":{"annotations":{"` + agentv1.QuiesceAnnotation + `":null}}}`, "quiesce annotation: removing"},
	} {
		annotate(tc.on)
		g.Eventually(func(g Gomega) {
			r := report(g)
			g.Expect(r.Quiesced).To(BeTrue())
			g.Expect(r.InDataPlane).To(BeFalse())
			g.Expect(r.Reason).To(ContainSubstring(tc.reason))
		}, 10*time.Second, 100*time.Millisecond).Should(Succeed(), tc.name)
		annotate(tc.off)
		g.Eventually(func(g Gomega) {
			r := report(g)
			g.Expect(r.Quiesced).To(BeFalse())
			g.Expect(r.Eligible).To(BeTrue())
		}, 10*time.Second, 100*time.Millisecond).Should(Succeed(), tc.name+" removed")
	}

	// kubeadm's mark-control-plane labels every control-plane Node so: the member stays in.
	annotate(`{"metadata":{"labels":{"node-role.kubernetes.io/control-plane":"","` + agentv1.ExcludeFromExternalLBLabel + `":""}}}`)
	g.Eventually(func(g Gomega) {
		n, err := admin.CoreV1().Nodes().Get(ctx, self, metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(n.Labels).To(HaveKey(agentv1.ExcludeFromExternalLBLabel))
	}, 10*time.Second, 100*time.Millisecond).Should(Succeed())
	g.Consistently(func(g Gomega) {
		r := report(g)
		g.Expect(r.Quiesced).To(BeFalse(), "kubeadm's exclude label does not quiesce")
		g.Expect(r.Eligible).To(BeTrue())
	}, 2*time.Second, 100*time.Millisecond).Should(Succeed())
}

func quoteJSON(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// TestQuiesceFromNode: what on its Node asks an agent to stay out. A Node as kubeadm's
// mark-control-plane leaves it (role label, exclude-from-external-load-balancers label, taint)
// asks nothing: honouring that label quiesced every member of a real kubeadm control plane.
func TestQuiesceFromNode(t *testing.T) {
	kubeadmLabels := map[string]string{"node-role.kubernetes.io/control-plane": "", agentv1.ExcludeFromExternalLBLabel: ""}
	for _, tc := range []struct {
		name        string
		labels      map[string]string
		annotations map[string]string
		want        string
	}{
		{name: "plain Node", want: ""},
		{name: "kubeadm control-plane Node", labels: kubeadmLabels, want: ""},
		{name: "disabled", labels: kubeadmLabels, annotations: map[string]string{agentv1.DisabledAnnotation: "maintenance"}, want: "disabled annotation: maintenance"},
		{name: "disabled without a value", annotations: map[string]string{agentv1.DisabledAnnotation: ""}, want: "disabled annotation: set"},
		{name: "quiesce wins over disabled", annotations: map[string]string{agentv1.QuiesceAnnotation: "removing", agentv1.DisabledAnnotation: "x"}, want: "quiesce annotation: removing"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "cp-1", Labels: tc.labels, Annotations: tc.annotations}}
			NewWithT(t).Expect(quiesceFromNode(n)).To(Equal(tc.want))
		})
	}
}
