package integration

import (
	"fmt"
	"net"
	"strconv"
	"testing"

	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	lbv1 "github.com/caplb/caplb/api/v1alpha1"
	webhookconfig "github.com/caplb/caplb/config/webhook"
	"github.com/caplb/caplb/controllers"
	"github.com/caplb/caplb/e2e/harness"
	"github.com/caplb/caplb/e2e/testpki"
)

// serveWebhook makes the suite's caplb manager serve its validating webhook on a free loopback
// port, with a serving certificate from the test PKI for 127.0.0.1 (cert-manager's job in a real
// install), written into dir.
func (s *suite) serveWebhook(dir string) error {
	ca, err := testpki.NewCA(dir)
	if err != nil {
		return err
	}
	if _, err := ca.IssueWebhookServing(dir, "127.0.0.1"); err != nil {
		return err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	port := l.Addr().(*net.TCPAddr).Port
	if err := l.Close(); err != nil {
		return err
	}
	s.caplbOptions.Webhook = &harness.WebhookOptions{Host: "127.0.0.1", Port: port, CertDir: dir}
	s.webhookURL = "https://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	s.webhookCA = ca.PEM
	return nil
}

// registerPublisherWebhook registers the shipped ValidatingWebhookConfiguration (its rules,
// matchConditions, failure policy) for namespace ns only, pointed at the suite's manager by URL
// with the test CA (what cert-manager's cainjector does for the shipped Service reference).
func (s *suite) registerPublisherWebhook(t *testing.T, ns string) {
	t.Helper()
	vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	if err := yaml.UnmarshalStrict(webhookconfig.Configuration, vwc); err != nil {
		t.Fatalf("decoding config/webhook/manifests.yaml: %v", err)
	}
	vwc.Name = "caplb-" + ns
	vwc.Annotations = nil
	for i := range vwc.Webhooks {
		w := &vwc.Webhooks[i]
		if w.ClientConfig.Service == nil || w.ClientConfig.Service.Path == nil {
			t.Fatalf("webhook %s has no service path", w.Name)
		}
		url := s.webhookURL + *w.ClientConfig.Service.Path
		w.ClientConfig = admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: s.webhookCA}
		// The other flows run at the same time and prove the reconciler without the webhook.
		w.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": ns}}
	}
	if err := s.env.Client.Create(s.ctx, vwc); err != nil {
		t.Fatalf("registering the webhook: %v", err)
	}
	t.Cleanup(func() {
		if err := s.env.Client.Delete(s.ctx, vwc); err != nil {
			t.Errorf("removing the webhook configuration: %v", err)
		}
	})
}

// The publisher rule at admission, on the real API server with the shipped webhook
// configuration and the manager's webhook server (its uncached reader under the shipped RBAC):
// the first publisher is admitted; a second is refused with a message naming
// spec.publishClusterEndpoint and the fix (not the publisher: the webhook's caller is not
// authenticated); the same LoadBalancer with publishClusterEndpoint: false is admitted, and
// turning it into a publisher is refused; once the first is deleted, it may publish, and it
// does, and a third is refused. The manager's own finalizer patches pass all along.
func testPublisherAdmission(t *testing.T, s *suite) {
	g := NewWithT(t)
	ext, err := harness.Listen(0, "127.0.0.1")
	g.Expect(err).NotTo(HaveOccurred())
	defer ext.Close()
	f := newFixture(t, s, harness.ClusterOptions{})
	s.registerPublisherWebhook(t, f.ns)
	t.Cleanup(func() {
		if t.Failed() {
			for _, n := range []string{"lb", "second"} {
				if lb, err := s.env.GetLB(s.ctx, f.ns, n); err == nil {
					t.Logf("%s: %s", n, harness.DescribeLB(lb))
				}
			}
		}
	})
	endpoint := clusterv1.APIEndpoint{Host: "127.0.0.1", Port: int32(ext.Port)}

	first := f.createLB(t, endpoint.Host, endpoint.Port)
	f.waitLB(t, "the first LoadBalancer publishes", func(lb *lbv1.LoadBalancer) bool {
		c := harness.Condition(lb, lbv1.ClusterEndpointCondition)
		return c != nil && c.Status == metav1.ConditionTrue && c.Reason == lbv1.ClusterEndpointSetReason
	})

	// A second LoadBalancer of the same endpoint: a replacement for the first, say.
	second := func(publish *bool) *lbv1.LoadBalancer {
		lb := first.DeepCopy()
		lb.ObjectMeta = metav1.ObjectMeta{Namespace: f.ns, Name: "second"}
		lb.Spec.PublishClusterEndpoint = publish
		lb.Status = lbv1.LoadBalancerStatus{}
		return lb
	}
	refusal := And(
		ContainSubstring(fmt.Sprintf("admission webhook %q denied the request", controllers.ValidatingWebhookName)),
		ContainSubstring("spec.publishClusterEndpoint: Forbidden: another LoadBalancer of Cluster c already publishes its endpoint; "+
			"set spec.publishClusterEndpoint: false on this one (it still holds its own hooks and serves its endpoint), or on that one first "+
			"(kubectl get loadbalancers -n "+f.ns+" lists them with their Cluster)"))
	// The API server loads a new webhook configuration asynchronously: dry runs (the webhook has
	// no side effects, so it is called for them) tell when it is in force.
	g.Eventually(func() error {
		return s.env.Client.Create(f.ctx, second(nil), client.DryRunAll)
	}, flowTimeout, harness.PollInterval).Should(MatchError(refusal), "the webhook refuses a second publisher")
	err = s.env.Client.Create(f.ctx, second(ptr.To(true)))
	t.Logf("the API server's answer: %v", err)
	g.Expect(err).To(MatchError(refusal))
	g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "refused as invalid (422), as CAPI's webhooks refuse: %v", err)
	_, err = s.env.GetLB(f.ctx, f.ns, "second")
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "nothing stored: %v", err)
	// With the webhook in force, the first publisher of another Cluster is admitted.
	other := second(nil)
	other.Spec.ClusterName = "other"
	g.Expect(s.env.Client.Create(f.ctx, other, client.DryRunAll)).To(Succeed(), "the first publisher of a Cluster is admitted")

	g.Expect(s.env.Client.Create(f.ctx, second(ptr.To(false)))).To(Succeed(), "an additional endpoint is admitted")
	sec, err := s.env.WaitLB(f.ctx, f.ns, "second", flowTimeout, "the second serves without publishing", func(lb *lbv1.LoadBalancer) bool {
		c := harness.Condition(lb, lbv1.ClusterEndpointCondition)
		return c != nil && c.Status == metav1.ConditionTrue && c.Reason == lbv1.NotPublisherReason
	})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(sec.Finalizers).To(ContainElement(lbv1.LoadBalancerFinalizer), "the manager's finalizer patch was admitted")

	publish := func() error {
		lb, err := s.env.GetLB(f.ctx, f.ns, "second")
		if err != nil {
			return err
		}
		orig := lb.DeepCopy()
		lb.Spec.PublishClusterEndpoint = ptr.To(true)
		return s.env.Client.Patch(f.ctx, lb, client.MergeFrom(orig))
	}
	g.Expect(publish()).To(MatchError(refusal), "turning the additional endpoint into a publisher is refused")
	sec, err = s.env.GetLB(f.ctx, f.ns, "second")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(sec.Spec.PublishClusterEndpoint).To(HaveValue(BeFalse()))

	// Deleting the first makes room at once (a LoadBalancer being deleted yields), while its
	// finalizer is still releasing its hooks.
	g.Expect(s.env.Client.Delete(f.ctx, first)).To(Succeed())
	g.Expect(publish()).To(Succeed(), "the first is being deleted: the second may publish")
	g.Expect(s.env.WaitGone(f.ctx, first, flowTimeout)).To(Succeed(), "the first's finalizer removal was admitted")
	_, err = s.env.WaitLB(f.ctx, f.ns, "second", flowTimeout, "the second publishes", func(lb *lbv1.LoadBalancer) bool {
		c := harness.Condition(lb, lbv1.ClusterEndpointCondition)
		return lb.Status.ObservedGeneration == lb.Generation && c != nil && c.Status == metav1.ConditionTrue && c.Reason == lbv1.ClusterEndpointSetReason
	})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(f.clusterEndpoint(g)).To(Equal(endpoint))
	third := second(nil)
	third.Name = "third"
	g.Expect(s.env.Client.Create(f.ctx, third, client.DryRunAll)).To(MatchError(ContainSubstring(
		"another LoadBalancer of Cluster c already publishes its endpoint")), "the second is now the publisher")
}
