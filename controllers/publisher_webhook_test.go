package controllers

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"testing"

	. "github.com/onsi/gomega"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	lbv1 "github.com/caplb/caplb/api/v1alpha1"
)

// webhookLB is a LoadBalancer of namespace ns for Cluster cluster ("" for a standalone one),
// created at second sec.
func webhookLB(ns, name, cluster string, sec int64, publish *bool) *lbv1.LoadBalancer {
	lb := &lbv1.LoadBalancer{
		TypeMeta:   metav1.TypeMeta{APIVersion: lbv1.GroupVersion.String(), Kind: "LoadBalancer"},
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, CreationTimestamp: metav1.Unix(sec, 0)},
		Spec:       lbv1.LoadBalancerSpec{ClusterName: cluster, PublishClusterEndpoint: publish, Backend: lbv1.Backend{Static: &lbv1.StaticBackend{}}},
	}
	return lb
}

func deleting(lb *lbv1.LoadBalancer) *lbv1.LoadBalancer {
	now := metav1.Unix(100, 0)
	lb.DeletionTimestamp = &now
	lb.Finalizers = []string{lbv1.LoadBalancerFinalizer}
	return lb
}

func raw(t *testing.T, lb *lbv1.LoadBalancer) runtime.RawExtension {
	t.Helper()
	if lb == nil {
		return runtime.RawExtension{}
	}
	b, err := json.Marshal(lb)
	if err != nil {
		t.Fatal(err)
	}
	return runtime.RawExtension{Raw: b}
}

// TestPublisherValidator: an admission request in, allowed or refused with a message out, against
// stored LoadBalancers: in namespace "ns", Cluster c has the publisher "lb" and the additional
// endpoint "internal"; Cluster c2 has "racer-a" and "racer-b", two publishers that raced past
// the webhook; Cluster e's only publisher is being deleted; namespace "other" has a Cluster c of
// its own with a publisher.
func TestPublisherValidator(t *testing.T) {
	stored := []client.Object{
		webhookLB("ns", "lb", "c", 5, nil),
		webhookLB("ns", "internal", "c", 6, ptr.To(false)),
		webhookLB("ns", "racer-a", "c2", 5, nil),
		webhookLB("ns", "racer-b", "c2", 5, ptr.To(true)),
		deleting(webhookLB("ns", "leaving", "e", 5, nil)),
		webhookLB("other", "lb", "c", 5, nil),
		webhookLB("ns", "standalone", "", 5, nil),
	}
	const refusal = `spec.publishClusterEndpoint: Forbidden: LoadBalancer lb already publishes the endpoint of Cluster c; ` +
		`set spec.publishClusterEndpoint: false on this one (it still holds its own hooks and serves its endpoint), or on lb first`
	tests := []struct {
		name     string
		op       admissionv1.Operation
		obj, old *lbv1.LoadBalancer
		want     string // "" admitted, else a refusal containing it
	}{
		{"first publisher of a Cluster", admissionv1.Create, webhookLB("ns", "first", "fresh", 0, nil), nil, ""},
		{"second publisher refused", admissionv1.Create, webhookLB("ns", "second", "c", 0, nil), nil, refusal},
		{"second publisher, explicitly true", admissionv1.Create, webhookLB("ns", "second", "c", 0, ptr.To(true)), nil, refusal},
		{"second LoadBalancer that does not publish", admissionv1.Create, webhookLB("ns", "second", "c", 0, ptr.To(false)), nil, ""},
		{"the publisher being deleted makes room", admissionv1.Create, webhookLB("ns", "successor", "e", 0, nil), nil, ""},
		{"another namespace's Cluster of the same name", admissionv1.Create, webhookLB("fresh-ns", "lb", "c", 0, nil), nil, ""},
		{"standalone LoadBalancers publish to no Cluster", admissionv1.Create, webhookLB("ns", "standalone-2", "", 0, nil), nil, ""},
		{"turned into a publisher beside one", admissionv1.Update, webhookLB("ns", "internal", "c", 6, ptr.To(true)),
			webhookLB("ns", "internal", "c", 6, ptr.To(false)), refusal},
		{"turned into a publisher, the default", admissionv1.Update, webhookLB("ns", "internal", "c", 6, nil),
			webhookLB("ns", "internal", "c", 6, ptr.To(false)), refusal},
		{"the publisher itself changes", admissionv1.Update, webhookLB("ns", "lb", "c", 5, nil), webhookLB("ns", "lb", "c", 5, nil), ""},
		{"a racer keeps being updated (finalizer removal)", admissionv1.Update, deleting(webhookLB("ns", "racer-b", "c2", 5, ptr.To(true))),
			webhookLB("ns", "racer-b", "c2", 5, ptr.To(true)), ""},
		{"turned into a non-publisher", admissionv1.Update, webhookLB("ns", "racer-b", "c2", 5, ptr.To(false)),
			webhookLB("ns", "racer-b", "c2", 5, ptr.To(true)), ""},
		{"delete is not ours to refuse", admissionv1.Delete, nil, webhookLB("ns", "lb", "c", 5, nil), ""},
	}
	s := runtime.NewScheme()
	if err := AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	v := &PublisherValidator{Reader: fake.NewClientBuilder().WithScheme(s).WithObjects(stored...).Build(), Decoder: admission.NewDecoder(s)}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			req := admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{Operation: tt.op, Object: raw(t, tt.obj), OldObject: raw(t, tt.old)}}
			if lb := tt.obj; lb != nil {
				req.Namespace, req.Name = lb.Namespace, lb.Name
			}
			resp := v.Handle(context.Background(), req)
			if tt.want == "" {
				g.Expect(resp.Allowed).To(BeTrue(), "refused: %+v", resp.Result)
				return
			}
			g.Expect(resp.Allowed).To(BeFalse())
			g.Expect(resp.Result).NotTo(BeNil())
			g.Expect(resp.Result.Code).To(BeEquivalentTo(http.StatusUnprocessableEntity))
			g.Expect(resp.Result.Reason).To(Equal(metav1.StatusReasonInvalid))
			g.Expect(resp.Result.Message).To(ContainSubstring(tt.want))
			g.Expect(resp.Result.Details.Causes).To(ContainElement(HaveField("Field", "spec.publishClusterEndpoint")))
		})
	}
}

// A failed list refuses (failurePolicy Fail would too): admitting without knowing could let a
// second publisher in.
func TestPublisherValidatorListFails(t *testing.T) {
	g := NewWithT(t)
	s := runtime.NewScheme()
	g.Expect(AddToScheme(s)).To(Succeed())
	reader := fake.NewClientBuilder().WithScheme(s).WithInterceptorFuncs(interceptor.Funcs{
		List: func(context.Context, client.WithWatch, client.ObjectList, ...client.ListOption) error {
			return errors.New("etcd unavailable")
		},
	}).Build()
	v := &PublisherValidator{Reader: reader, Decoder: admission.NewDecoder(s)}
	resp := v.Handle(context.Background(), admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		Operation: admissionv1.Create, Namespace: "ns", Name: "lb", Object: raw(t, webhookLB("ns", "lb", "c", 0, nil)),
	}})
	g.Expect(resp.Allowed).To(BeFalse())
	g.Expect(resp.Result.Code).To(BeEquivalentTo(http.StatusInternalServerError))
	g.Expect(resp.Result.Message).To(ContainSubstring("listing the LoadBalancers of namespace ns: etcd unavailable"))

	// A LoadBalancer that does not publish needs no list.
	resp = v.Handle(context.Background(), admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		Operation: admissionv1.Create, Namespace: "ns", Name: "ext", Object: raw(t, webhookLB("ns", "ext", "c", 0, ptr.To(false))),
	}})
	g.Expect(resp.Allowed).To(BeTrue())
}
