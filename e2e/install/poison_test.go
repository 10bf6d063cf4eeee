package install

import (
	"context"
	"fmt"
	"testing"

	. "github.com/onsi/gomega"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lbv1 "github.com/caplb/caplb/api/v1alpha1"
	"github.com/caplb/caplb/e2e/harness"
)

const lbCRDName = "loadbalancers." + "loadbalancer.cluster.x-k8s.io"

// poisonedLoadBalancer stores a LoadBalancer that today's CRD refuses, the way one reaches a
// real cluster: written while an older CRD without the rules was installed (or past admission),
// then the current CRD is installed again. Its durations are not durations, which once failed
// the manager's typed List of every LoadBalancer and so stopped every tenant's reconciles.
func poisonedLoadBalancer(ctx context.Context, t *testing.T, env *harness.Env) client.ObjectKey {
	t.Helper()
	g := NewWithT(t)
	ns, err := env.CreateNamespace(ctx, "poisoned")
	g.Expect(err).NotTo(HaveOccurred())
	bad := func(name string) *unstructured.Unstructured {
		u := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{
			"clusterName": "c",
			"endpoint":    map[string]any{"host": "api.example.com", "port": int64(6443)},
			"backend":     map[string]any{"static": map[string]any{}},
			"healthCheck": map[string]any{"interval": "soon", "timeout": "2s"},
			"quiesce":     map[string]any{"drainPeriod": "later", "timeout": "2m"},
		}}}
		u.SetGroupVersionKind(lbv1.GroupVersion.WithKind("LoadBalancer"))
		u.SetNamespace(ns)
		u.SetName(name)
		return u
	}

	current := &apiextensionsv1.CustomResourceDefinition{}
	g.Expect(env.Client.Get(ctx, client.ObjectKey{Name: lbCRDName}, current)).To(Succeed())
	setCRDSpec(ctx, t, env, func(spec *apiextensionsv1.CustomResourceDefinitionSpec) {
		for i := range spec.Versions {
			stripRules(spec.Versions[i].Schema.OpenAPIV3Schema)
		}
	})
	// An older release had no webhook either, and the manager that serves this one is not
	// running yet: the bad LoadBalancer is written without the webhook configuration.
	restore := withoutWebhookConfigurations(ctx, t, env)
	g.Eventually(func() error {
		return env.Client.Create(ctx, bad("poisoned"))
	}, timeout, harness.PollInterval).Should(Succeed(), "the older CRD admits the bad LoadBalancer")
	restore()

	setCRDSpec(ctx, t, env, func(spec *apiextensionsv1.CustomResourceDefinitionSpec) { *spec = current.Spec })
	g.Eventually(func() bool {
		err := env.Client.Create(ctx, bad("probe"), client.DryRunAll)
		return apierrors.IsInvalid(err)
	}, timeout, harness.PollInterval).Should(BeTrue(), "the current CRD refuses it again")
	return client.ObjectKey{Namespace: ns, Name: "poisoned"}
}

func setCRDSpec(ctx context.Context, t *testing.T, env *harness.Env, mutate func(*apiextensionsv1.CustomResourceDefinitionSpec)) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := env.Client.Get(ctx, client.ObjectKey{Name: lbCRDName}, crd); err != nil {
			return err
		}
		mutate(&crd.Spec)
		return env.Client.Update(ctx, crd)
	})
	if err != nil {
		t.Fatalf("updating CRD %s: %v", lbCRDName, err)
	}
}

// stripRules removes every CEL rule and pattern: the schema of a release before them.
func stripRules(s *apiextensionsv1.JSONSchemaProps) {
	if s == nil {
		return
	}
	s.XValidations, s.Pattern = nil, ""
	for k, p := range s.Properties {
		stripRules(&p)
		s.Properties[k] = p
	}
	if s.Items != nil {
		stripRules(s.Items.Schema)
	}
	if s.AdditionalProperties != nil {
		stripRules(s.AdditionalProperties.Schema)
	}
}

// expectPoisonedReported checks what the manager did with the poisoned LoadBalancer: Ready
// False, reason InvalidSpec, with a message naming both fields; a Warning event; the
// invalid-spec metric; and the process still running (no crash loop).
func expectPoisonedReported(ctx context.Context, t *testing.T, env *harness.Env, mgr *managerProcess, key client.ObjectKey) {
	t.Helper()
	g := NewWithT(t)
	lb, err := env.WaitLB(ctx, key.Namespace, key.Name, timeout, "Ready False, reason InvalidSpec", func(lb *lbv1.LoadBalancer) bool {
		c := harness.Condition(lb, lbv1.ReadyCondition)
		return c != nil && c.Status == metav1.ConditionFalse && c.Reason == lbv1.InvalidSpecReason
	})
	g.Expect(err).NotTo(HaveOccurred())
	msg := harness.Condition(lb, lbv1.ReadyCondition).Message
	g.Expect(msg).To(And(ContainSubstring(`spec.healthCheck.interval: Invalid value: "soon"`),
		ContainSubstring(`spec.quiesce.drainPeriod: Invalid value: "later"`), ContainSubstring("write it with units")))
	_, err = env.WaitEvent(ctx, key.Namespace, "LoadBalancer", key.Name, "Warning", lbv1.EventInvalidSpec, timeout)
	g.Expect(err).NotTo(HaveOccurred())
	sel := fmt.Sprintf(`{name=%q,namespace=%q}`, key.Name, key.Namespace)
	g.Eventually(func(g Gomega) {
		lines, err := mgr.metrics(ctx, "caplb_loadbalancer_invalid_spec")
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(lines).To(ContainElement("caplb_loadbalancer_invalid_spec" + sel + " 1"))
	}, timeout, harness.PollInterval).Should(Succeed())
	ok, _, err := mgr.ready(ctx)
	g.Expect(err).NotTo(HaveOccurred(), "the manager must not exit")
	g.Expect(ok).To(BeTrue())
}
