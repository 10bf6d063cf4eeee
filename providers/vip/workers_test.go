package vip

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentv1 "github.com/caplb/caplb/api/agent/v1alpha1"
	lbv1 "github.com/caplb/caplb/api/v1alpha1"
)

// A worker LoadBalancer renders <name>-caplb-agent beside the control plane's
// <cluster>-caplb-agent, with every port and its own health check.
func TestWorkerSecretNameAndPorts(t *testing.T) {
	g := NewWithT(t)
	cp := arpLB()
	g.Expect(SecretName(cp)).To(Equal("c-caplb-agent"), "a control plane keeps the name every manifest references")
	w := arpLB()
	w.Name = "ingress"
	w.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"cluster.x-k8s.io/deployment-name": "c-md-0"}}
	w.Spec.TargetPort = 443
	w.Spec.Backend.ARP.ExtraPorts = []int32{80}
	w.Spec.Backend.ARP.Agent.Health = &lbv1.AgentHealth{Type: lbv1.AgentHealthTCP, Port: 443}
	g.Expect(SecretName(w)).To(Equal("ingress-caplb-agent"))

	c := renderConfig(w, renderInput{vip: "192.0.2.11"})
	g.Expect(validateRendered(c)).To(Succeed())
	g.Expect(c.Port).To(Equal(443))
	g.Expect(c.ExtraPorts).To(Equal([]int{80}), "the agent serves every port on the VIP")
	g.Expect(c.Health).To(Equal(agentv1.HealthConfig{Type: agentv1.HealthTCP, Address: "127.0.0.1:443"}))
	g.Expect(c.Election.Label).To(Equal("ns/ingress"), "its agents gossip apart from the control plane's")
}

// Deleting one LoadBalancer of a Cluster removes the membership and quiesce annotations from its
// own Nodes only: the other LoadBalancer's agents keep theirs (one key per Node each).
func TestReleaseLeavesOtherLoadBalancersNodes(t *testing.T) {
	g := NewWithT(t)
	b, c, lb, _ := quiesceEnv(t) // members n1, n2, n3 at version 3
	ctx := context.Background()
	other := readyNode("w1")
	other.Annotations = map[string]string{agentv1.MembershipAnnotation: `{"version":1,"members":[{"name":"w1","address":"10.0.1.1"}]}`,
		agentv1.QuiesceAnnotation: "removing"}
	g.Expect(c.Create(ctx, other)).To(Succeed())
	for _, n := range []string{"n1", "n2", "n3"} {
		node := &corev1.Node{}
		g.Expect(c.Get(ctx, client.ObjectKey{Name: n}, node)).To(Succeed())
		g.Expect(setNodeAnnotation(ctx, c, node, agentv1.MembershipAnnotation, `{"version":3}`)).To(Succeed())
	}

	g.Expect(b.Release(ctx, lb)).To(Succeed())
	for _, n := range []string{"n1", "n2", "n3"} {
		node := &corev1.Node{}
		g.Expect(c.Get(ctx, client.ObjectKey{Name: n}, node)).To(Succeed())
		g.Expect(node.Annotations).NotTo(HaveKey(agentv1.MembershipAnnotation), n)
	}
	g.Expect(c.Get(ctx, client.ObjectKeyFromObject(other), other)).To(Succeed())
	g.Expect(other.Annotations).To(And(HaveKey(agentv1.MembershipAnnotation), HaveKey(agentv1.QuiesceAnnotation)),
		"another LoadBalancer's Node keeps its annotations")
}
