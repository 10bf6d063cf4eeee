package integration

import (
	"fmt"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/util/retry"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lbv1 "github.com/caplb/caplb/api/v1alpha1"
	"github.com/caplb/caplb/e2e/harness"
)

// A LoadBalancerClass gives every Cluster its selector matches a LoadBalancer, owned by that
// Cluster: two labelled Clusters get two Ready LoadBalancers, a third gets one when it is
// labelled, an unlabelled one loses its own (and its members are released), a template change
// reaches every LoadBalancer, a name taken by a hand-made LoadBalancer is reported and left
// alone, and deleting the class deletes the rest.
func testLoadBalancerClass(t *testing.T, s *suite) {
	g := NewWithT(t)
	ctx := t.Context()
	hosts := []string{"127.0.0.2", "127.0.0.3", "127.0.0.4"}
	apiservers, err := harness.Listen(0, hosts...)
	g.Expect(err).NotTo(HaveOccurred())
	defer apiservers.Close()
	port := int32(apiservers.Port)

	ns, err := s.env.CreateNamespace(ctx, "lbclass")
	g.Expect(err).NotTo(HaveOccurred())
	prod := map[string]string{"env": "prod"}
	clusters := map[string]*clusterv1.Cluster{}
	for i, name := range []string{"c1", "c2", "c3"} {
		o := harness.ClusterOptions{}
		if name != "c3" {
			o.Labels = prod
		}
		c, err := s.env.CreateCluster(ctx, ns, name, o)
		g.Expect(err).NotTo(HaveOccurred())
		clusters[name] = c
		_, err = s.env.CreateControlPlane(ctx, c, 1, func(int) []clusterv1.MachineAddress { return harness.InternalIP(hosts[i]) })
		g.Expect(err).NotTo(HaveOccurred())
	}

	class := &lbv1.LoadBalancerClass{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cp"},
		Spec: lbv1.LoadBalancerClassSpec{
			ClusterSelector: metav1.LabelSelector{MatchLabels: prod},
			Template: lbv1.LoadBalancerClassTemplate{Spec: lbv1.LoadBalancerTemplateSpec{
				TargetPort: port,
				Backend:    lbv1.Backend{Static: &lbv1.StaticBackend{}},
				HealthCheck: lbv1.HealthCheck{
					Interval: lbv1.Duration{Duration: time.Second}, Timeout: lbv1.Duration{Duration: time.Second},
				},
				Quiesce: lbv1.Quiesce{
					DrainPeriod: &lbv1.Duration{Duration: time.Second}, Timeout: lbv1.Duration{Duration: time.Minute},
				},
			}},
		},
	}
	g.Expect(s.env.Client.Create(ctx, class)).To(Succeed())

	// readyOwned waits until the Cluster's LoadBalancer exists, is Ready, carries the class
	// label and is controlled by that Cluster.
	readyOwned := func(cluster string) {
		t.Helper()
		lb, err := s.env.WaitLB(ctx, ns, cluster+"-cp", machineReadyTimeout, "Ready", func(lb *lbv1.LoadBalancer) bool {
			return harness.ConditionIs(lb, lbv1.ReadyCondition, metav1.ConditionTrue)
		})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(lb.Labels).To(HaveKeyWithValue(lbv1.ClassLabel, "cp"))
		g.Expect(lb.Spec.ClusterName).To(Equal(cluster))
		ref := metav1.GetControllerOf(lb)
		g.Expect(ref).NotTo(BeNil(), "LoadBalancer %s has no controller", lb.Name)
		g.Expect(ref.Kind).To(Equal("Cluster"))
		g.Expect(ref.Name).To(Equal(cluster))
		g.Expect(ref.UID).To(Equal(clusters[cluster].UID))
		// The class wrote the spec once: defaults on both CRDs agree, so no sync loop.
		g.Expect(lb.Generation).To(Equal(int64(1)), "LoadBalancer %s was rewritten", lb.Name)
	}
	waitClass := func(what string, pred func(c *lbv1.LoadBalancerClass) bool) *lbv1.LoadBalancerClass {
		t.Helper()
		c := &lbv1.LoadBalancerClass{}
		g.Eventually(func() bool {
			if err := s.env.Client.Get(ctx, client.ObjectKeyFromObject(class), c); err != nil {
				return false
			}
			return pred(c)
		}, flowTimeout, 100*time.Millisecond).Should(BeTrue(), "class: %s; status %+v", what, &c.Status)
		return c
	}
	lbExists := func(name string) bool {
		err := s.env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &lbv1.LoadBalancer{})
		g.Expect(client.IgnoreNotFound(err)).NotTo(HaveOccurred())
		return err == nil
	}

	readyOwned("c1")
	readyOwned("c2")
	waitClass("two Clusters, both Ready", func(c *lbv1.LoadBalancerClass) bool {
		return c.Status.MatchedClusters == 2 && c.Status.ReadyLoadBalancers == 2 && conditions.IsTrue(c, lbv1.ReadyCondition)
	})
	g.Expect(lbExists("c3-cp")).To(BeFalse(), "c3 is not labelled")

	// A third Cluster gets the label.
	labelCluster(t, s, clusters["c3"], "env", ptrTo("prod"))
	readyOwned("c3")
	waitClass("three Clusters", func(c *lbv1.LoadBalancerClass) bool {
		return c.Status.MatchedClusters == 3 && c.Status.ReadyLoadBalancers == 3 && conditions.IsTrue(c, lbv1.ReadyCondition)
	})

	// c1 loses the label: its LoadBalancer goes, after releasing its member.
	labelCluster(t, s, clusters["c1"], "env", nil)
	g.Expect(s.env.WaitGone(ctx, &lbv1.LoadBalancer{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "c1-cp"}}, flowTimeout)).To(Succeed())
	m := &clusterv1.Machine{}
	g.Expect(s.env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "c1-cp-0"}, m)).To(Succeed())
	g.Expect(m.Annotations).NotTo(HaveKey(lbv1.PreDrainHookAnnotation("c1-cp")))
	g.Expect(m.Annotations).NotTo(HaveKey(lbv1.NameAnnotation))
	waitClass("two Clusters again", func(c *lbv1.LoadBalancerClass) bool { return c.Status.MatchedClusters == 2 })
	for _, reason := range []string{lbv1.EventClassLoadBalancerCreated, lbv1.EventClassLoadBalancerDeleted} {
		ev, err := s.env.WaitEvent(ctx, ns, "LoadBalancerClass", "cp", "Normal", reason, flowTimeout)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(ev.Message).To(ContainSubstring("LoadBalancer c"))
	}

	// A template change reaches every LoadBalancer.
	g.Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		c := &lbv1.LoadBalancerClass{}
		if err := s.env.Client.Get(ctx, client.ObjectKeyFromObject(class), c); err != nil {
			return err
		}
		c.Spec.Template.Spec.Quiesce.DrainPeriod = &lbv1.Duration{Duration: 3 * time.Second}
		return s.env.Client.Update(ctx, c)
	})).To(Succeed())
	for _, name := range []string{"c2-cp", "c3-cp"} {
		_, err := s.env.WaitLB(ctx, ns, name, flowTimeout, "drain period from the template", func(lb *lbv1.LoadBalancer) bool {
			return lb.Spec.Quiesce.DrainPeriod != nil && lb.Spec.Quiesce.DrainPeriod.Duration == 3*time.Second
		})
		g.Expect(err).NotTo(HaveOccurred())
	}
	// The backend kind cannot change: existing LoadBalancers could not follow.
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		c := &lbv1.LoadBalancerClass{}
		if err := s.env.Client.Get(ctx, client.ObjectKeyFromObject(class), c); err != nil {
			return err
		}
		c.Spec.Template.Spec.Backend = lbv1.Backend{ARP: &lbv1.ARPBackend{VIPBackend: lbv1.VIPBackend{AddressFrom: &lbv1.AddressFrom{
			PoolRef: lbv1.IPPoolReference{APIGroup: "ipam.cluster.x-k8s.io", Kind: "InClusterIPPool", Name: "vips"}}}}}
		return s.env.Client.Update(ctx, c)
	})
	g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "changing the template's backend kind: %v", err)
	g.Expect(err.Error()).To(ContainSubstring("backend kind cannot change"))

	// A LoadBalancer the class did not make is reported and left alone.
	own := &lbv1.LoadBalancer{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "c4-cp"},
		Spec: lbv1.LoadBalancerSpec{ClusterName: "c4", Endpoint: lbv1.APIEndpoint{Host: "api.example.com", Port: 6443},
			Backend: lbv1.Backend{Static: &lbv1.StaticBackend{}}},
	}
	g.Expect(s.env.Client.Create(ctx, own)).To(Succeed())
	_, err = s.env.CreateCluster(ctx, ns, "c4", harness.ClusterOptions{Labels: prod})
	g.Expect(err).NotTo(HaveOccurred())
	c := waitClass("name conflict reported", func(c *lbv1.LoadBalancerClass) bool {
		r := conditions.Get(c, lbv1.ReadyCondition)
		return r != nil && r.Status == metav1.ConditionFalse && r.Reason == lbv1.LoadBalancerNameConflictReason
	})
	g.Expect(conditions.Get(c, lbv1.ReadyCondition).Message).To(ContainSubstring("c4-cp"))
	g.Expect(s.env.Client.Get(ctx, client.ObjectKeyFromObject(own), own)).To(Succeed())
	g.Expect(own.Labels).NotTo(HaveKey(lbv1.ClassLabel))
	g.Expect(own.Spec.Endpoint.Host).To(Equal("api.example.com"))

	// Deleting the class deletes its LoadBalancers, not the hand-made one.
	g.Expect(s.env.Client.Delete(ctx, class)).To(Succeed())
	g.Expect(s.env.WaitGone(ctx, &lbv1.LoadBalancerClass{ObjectMeta: class.ObjectMeta}, flowTimeout)).To(Succeed())
	g.Expect(lbExists("c2-cp")).To(BeFalse())
	g.Expect(lbExists("c3-cp")).To(BeFalse())
	g.Expect(lbExists("c4-cp")).To(BeTrue())
}

// labelCluster sets (value non-nil) or removes a label on a Cluster.
func labelCluster(t *testing.T, s *suite, c *clusterv1.Cluster, key string, value *string) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur := &clusterv1.Cluster{}
		if err := s.env.Client.Get(t.Context(), client.ObjectKeyFromObject(c), cur); err != nil {
			return err
		}
		if value == nil {
			delete(cur.Labels, key)
		} else {
			if cur.Labels == nil {
				cur.Labels = map[string]string{}
			}
			cur.Labels[key] = *value
		}
		return s.env.Client.Update(t.Context(), cur)
	})
	if err != nil {
		t.Fatalf("labelling Cluster %s: %v", c.Name, err)
	}
}

// A template that cannot serve many Clusters is rejected at admission, naming the field.
func testLoadBalancerClassAdmission(t *testing.T, s *suite) {
	ctx := t.Context()
	ns, err := s.env.CreateNamespace(ctx, "lbclassadm")
	if err != nil {
		t.Fatal(err)
	}
	pool := map[string]any{"poolRef": map[string]any{"apiGroup": "ipam.cluster.x-k8s.io", "kind": "InClusterIPPool", "name": "vips"}}
	for i, tc := range []struct {
		name string
		spec map[string]any
		want []string
	}{
		{"arp without addressFrom", map[string]any{
			"clusterSelector": map[string]any{},
			"template":        map[string]any{"spec": map[string]any{"backend": map[string]any{"arp": map[string]any{}}}},
		}, []string{"spec.template.spec.backend.arp.addressFrom.poolRef is required"}},
		{"bgp with endpoint.host", map[string]any{
			"clusterSelector": map[string]any{},
			"template": map[string]any{"spec": map[string]any{
				"endpoint": map[string]any{"host": "10.0.0.10"},
				"backend": map[string]any{"bgp": map[string]any{"addressFrom": pool, "asn": int64(65000),
					"peers": []any{map[string]any{"address": "10.0.0.1", "asn": int64(65001)}}}},
			}},
		}, []string{"spec.template.spec.endpoint.host must be empty"}},
		{"bad selector operator", map[string]any{
			"clusterSelector": map[string]any{"matchExpressions": []any{map[string]any{"key": "env", "operator": "Equals", "values": []any{"prod"}}}},
			"template":        map[string]any{"spec": map[string]any{"backend": map[string]any{"static": map[string]any{}}}},
		}, []string{"spec.clusterSelector.matchExpressions[].operator"}},
		{"no backend", map[string]any{
			"clusterSelector": map[string]any{},
			"template":        map[string]any{"spec": map[string]any{"backend": map[string]any{}}},
		}, []string{"backend"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := &unstructured.Unstructured{Object: map[string]any{"spec": tc.spec}}
			u.SetGroupVersionKind(lbv1.GroupVersion.WithKind("LoadBalancerClass"))
			u.SetNamespace(ns)
			u.SetName(fmt.Sprintf("bad-%d", i))
			err := s.env.Client.Create(ctx, u)
			if !apierrors.IsInvalid(err) {
				t.Fatalf("want an Invalid error, got %v", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error does not mention %q: %v", w, err)
				}
			}
		})
	}
}

// A template change that a LoadBalancer cannot take (its endpoint host, once set) is reported in
// the class's Ready condition and never forced; the LoadBalancer keeps its endpoint.
func testLoadBalancerClassNotApplied(t *testing.T, s *suite) {
	g := NewWithT(t)
	ctx := t.Context()
	ns, err := s.env.CreateNamespace(ctx, "lbclassna")
	g.Expect(err).NotTo(HaveOccurred())
	_, err = s.env.CreateCluster(ctx, ns, "c1", harness.ClusterOptions{Labels: map[string]string{"lb": "ext"}})
	g.Expect(err).NotTo(HaveOccurred())
	class := &lbv1.LoadBalancerClass{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ext"},
		Spec: lbv1.LoadBalancerClassSpec{
			ClusterSelector: metav1.LabelSelector{MatchLabels: map[string]string{"lb": "ext"}},
			Template: lbv1.LoadBalancerClassTemplate{Spec: lbv1.LoadBalancerTemplateSpec{
				Endpoint:    lbv1.APIEndpoint{Host: "a.example.com", Port: 443},
				Backend:     lbv1.Backend{Static: &lbv1.StaticBackend{}},
				HealthCheck: lbv1.HealthCheck{Disabled: true},
			}},
		},
	}
	g.Expect(s.env.Client.Create(ctx, class)).To(Succeed())
	_, err = s.env.WaitLB(ctx, ns, "c1-ext", flowTimeout, "endpoint from the template", func(lb *lbv1.LoadBalancer) bool {
		return lb.Spec.Endpoint.Host == "a.example.com" && lb.Status.Endpoint.Host == "a.example.com"
	})
	g.Expect(err).NotTo(HaveOccurred())

	g.Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		c := &lbv1.LoadBalancerClass{}
		if err := s.env.Client.Get(ctx, client.ObjectKeyFromObject(class), c); err != nil {
			return err
		}
		c.Spec.Template.Spec.Endpoint.Host = "b.example.com"
		c.Spec.Template.Spec.TargetPort = 7443
		return s.env.Client.Update(ctx, c)
	})).To(Succeed())
	c := &lbv1.LoadBalancerClass{}
	g.Eventually(func() string {
		g.Expect(s.env.Client.Get(ctx, client.ObjectKeyFromObject(class), c)).To(Succeed())
		if r := conditions.Get(c, lbv1.ReadyCondition); r != nil && r.Status == metav1.ConditionFalse {
			return r.Reason
		}
		return ""
	}, flowTimeout, 100*time.Millisecond).Should(Equal(lbv1.TemplateNotAppliedReason))
	msg := conditions.Get(c, lbv1.ReadyCondition).Message
	g.Expect(msg).To(ContainSubstring("c1-ext"))
	g.Expect(msg).To(ContainSubstring("spec.endpoint.host is a.example.com, the template says b.example.com"))
	// What could change did; what could not stayed.
	lb, err := s.env.WaitLB(ctx, ns, "c1-ext", flowTimeout, "targetPort from the template", func(lb *lbv1.LoadBalancer) bool {
		return lb.Spec.TargetPort == 7443
	})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(lb.Spec.Endpoint.Host).To(Equal("a.example.com"))
}

// A class leaves a paused Cluster's LoadBalancer alone (clusterctl move pauses every Cluster it
// moves): no LoadBalancer is created for it while it is paused, and one is once it resumes. A
// paused class does nothing at all until unpaused.
func testLoadBalancerClassPause(t *testing.T, s *suite) {
	g := NewWithT(t)
	ctx := t.Context()
	ns, err := s.env.CreateNamespace(ctx, "lbclasspause")
	g.Expect(err).NotTo(HaveOccurred())
	sel := map[string]string{"lb": "ext"}
	c1, err := s.env.CreateCluster(ctx, ns, "c1", harness.ClusterOptions{Labels: sel, Paused: true})
	g.Expect(err).NotTo(HaveOccurred())
	class := &lbv1.LoadBalancerClass{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ext"},
		Spec: lbv1.LoadBalancerClassSpec{
			ClusterSelector: metav1.LabelSelector{MatchLabels: sel},
			Template: lbv1.LoadBalancerClassTemplate{Spec: lbv1.LoadBalancerTemplateSpec{
				Endpoint: lbv1.APIEndpoint{Host: "a.example.com", Port: 443},
				Backend:  lbv1.Backend{Static: &lbv1.StaticBackend{}}, HealthCheck: lbv1.HealthCheck{Disabled: true},
			}},
		},
	}
	g.Expect(s.env.Client.Create(ctx, class)).To(Succeed())
	classReady := func(g Gomega) *metav1.Condition {
		c := &lbv1.LoadBalancerClass{}
		g.Expect(s.env.Client.Get(ctx, client.ObjectKeyFromObject(class), c)).To(Succeed())
		return conditions.Get(c, lbv1.ReadyCondition)
	}
	g.Eventually(func(g Gomega) {
		r := classReady(g)
		g.Expect(r).NotTo(BeNil())
		g.Expect(r.Message).To(ContainSubstring("Clusters paused"))
	}, flowTimeout).Should(Succeed())
	g.Consistently(func(g Gomega) {
		err := s.env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "c1-ext"}, &lbv1.LoadBalancer{})
		g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "a paused Cluster got a LoadBalancer: %v", err)
	}, 2*time.Second, 200*time.Millisecond).Should(Succeed())

	// Pause the class, resume the Cluster: still nothing.
	g.Expect(s.env.Annotate(ctx, class, clusterv1.PausedAnnotation, ptrTo(""))).To(Succeed())
	g.Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur := &clusterv1.Cluster{}
		if err := s.env.Client.Get(ctx, client.ObjectKeyFromObject(c1), cur); err != nil {
			return err
		}
		cur.Spec.Paused = nil
		return s.env.Client.Update(ctx, cur)
	})).To(Succeed())
	g.Eventually(func(g Gomega) {
		c := &lbv1.LoadBalancerClass{}
		g.Expect(s.env.Client.Get(ctx, client.ObjectKeyFromObject(class), c)).To(Succeed())
		g.Expect(conditions.IsTrue(c, lbv1.PausedCondition)).To(BeTrue())
	}, flowTimeout).Should(Succeed())
	g.Consistently(func(g Gomega) {
		err := s.env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "c1-ext"}, &lbv1.LoadBalancer{})
		g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "a paused class created a LoadBalancer: %v", err)
	}, 2*time.Second, 200*time.Millisecond).Should(Succeed())

	// Unpause the class: the LoadBalancer comes.
	g.Expect(s.env.Annotate(ctx, class, clusterv1.PausedAnnotation, nil)).To(Succeed())
	_, err = s.env.WaitLB(ctx, ns, "c1-ext", flowTimeout, "created once nothing is paused", func(lb *lbv1.LoadBalancer) bool {
		return lb.Spec.ClusterName == "c1"
	})
	g.Expect(err).NotTo(HaveOccurred())
}
