package integration

import (
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lbv1 "github.com/caplb/caplb/api/v1alpha1"
	"github.com/caplb/caplb/e2e/harness"
)

// Starting an endpoint move at admission, on the real API server with the shipped CRD (CEL) and
// webhook configuration: a taking-over LoadBalancer must not publish (CEL), must name the
// Cluster's publisher (webhook: a missing one, a non-publisher are refused with
// spec.takeOverEndpointFrom.name and the fix), cannot rename it while set (CEL); a valid one is
// admitted, the manager's own patches of it pass, and its move waits for its endpoint
// (EndpointMove WaitingForEndpoint) with the Cluster left on the old one.
func testTakeOverAdmission(t *testing.T, s *suite) {
	g := NewWithT(t)
	ext, err := harness.Listen(0, "127.0.0.1")
	g.Expect(err).NotTo(HaveOccurred())
	defer ext.Close()
	f := newFixture(t, s, harness.ClusterOptions{})
	s.registerPublisherWebhook(t, f.ns)
	e1 := clusterv1.APIEndpoint{Host: "127.0.0.1", Port: int32(ext.Port)}
	f.createLB(t, e1.Host, e1.Port)
	f.waitLB(t, "the old LoadBalancer publishes", func(lb *lbv1.LoadBalancer) bool {
		c := harness.Condition(lb, lbv1.ClusterEndpointCondition)
		return c != nil && c.Status == metav1.ConditionTrue && c.Reason == lbv1.ClusterEndpointSetReason
	})
	extra := &lbv1.LoadBalancer{
		ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "extra"},
		Spec: lbv1.LoadBalancerSpec{ClusterName: f.cluster.Name, PublishClusterEndpoint: ptr.To(false),
			Endpoint: lbv1.APIEndpoint{Host: "127.0.0.1", Port: 1}, Backend: lbv1.Backend{Static: &lbv1.StaticBackend{}}},
	}
	g.Expect(s.env.Client.Create(f.ctx, extra)).To(Succeed())

	taking := func(from string, publish *bool) *lbv1.LoadBalancer {
		return &lbv1.LoadBalancer{
			ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "new"},
			Spec: lbv1.LoadBalancerSpec{
				ClusterName: f.cluster.Name, PublishClusterEndpoint: publish,
				TakeOverEndpointFrom: &lbv1.EndpointTakeOver{Name: from},
				Endpoint:             lbv1.APIEndpoint{Host: "127.0.0.1", Port: 2},
				Backend:              lbv1.Backend{Static: &lbv1.StaticBackend{}},
			},
		}
	}
	// The API server loads a new webhook configuration asynchronously: a dry run tells when it is in force.
	g.Eventually(func() error {
		return s.env.Client.Create(f.ctx, taking("ghost", ptr.To(false)), client.DryRunAll)
	}, flowTimeout, harness.PollInterval).Should(MatchError(And(
		ContainSubstring("spec.takeOverEndpointFrom.name"), ContainSubstring("no LoadBalancer ghost in namespace "+f.ns))))
	g.Expect(s.env.Client.Create(f.ctx, taking("extra", ptr.To(false)), client.DryRunAll)).To(MatchError(
		ContainSubstring("LoadBalancer extra does not publish Cluster c's endpoint")))
	g.Expect(s.env.Client.Create(f.ctx, taking("lb", nil), client.DryRunAll)).To(MatchError(
		ContainSubstring("spec.publishClusterEndpoint must be false while spec.takeOverEndpointFrom is set")))

	lb := taking("lb", ptr.To(false))
	g.Expect(s.env.Client.Create(f.ctx, lb)).To(Succeed(), "a move from the publisher is admitted")
	stored, err := s.env.GetLB(f.ctx, f.ns, "new")
	g.Expect(err).NotTo(HaveOccurred())
	renamed := stored.DeepCopy()
	renamed.Spec.TakeOverEndpointFrom.Name = "extra"
	g.Expect(s.env.Client.Patch(f.ctx, renamed, client.MergeFrom(stored), client.DryRunAll)).To(MatchError(
		ContainSubstring("spec.takeOverEndpointFrom.name cannot change during a move")))

	got, err := s.env.WaitLB(f.ctx, f.ns, "new", flowTimeout, "the move waits for the new endpoint", func(lb *lbv1.LoadBalancer) bool {
		c := harness.Condition(lb, lbv1.EndpointMoveCondition)
		return c != nil && c.Reason == lbv1.WaitingForEndpointReason
	})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got.Finalizers).To(ContainElement(lbv1.LoadBalancerFinalizer), "the manager's finalizer patch was admitted")
	g.Expect(got.Status.EndpointMove).NotTo(BeNil())
	g.Expect(got.Status.EndpointMove.Step).To(Equal(lbv1.MoveStepServe))
	g.Expect(got.Status.EndpointMove.OldEndpoint).To(Equal(lbv1.APIEndpoint{Host: e1.Host, Port: e1.Port}))
	g.Expect(f.clusterEndpoint(g)).To(Equal(e1), "nothing moves before the new endpoint serves")
}
