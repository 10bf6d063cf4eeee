package controllers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

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
	const refusal = `spec.publishClusterEndpoint: Forbidden: another LoadBalancer of Cluster c already publishes its endpoint; ` +
		`set spec.publishClusterEndpoint: false on this one (it still holds its own hooks and serves its endpoint), or on that one first ` +
		`(kubectl get loadbalancers -n ns lists them with their Cluster)`
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

// gatedReader counts the Lists in flight through it and holds each until release is closed, so
// that concurrent reviews overlap for certain instead of by luck of scheduling.
type gatedReader struct {
	client.Reader
	release chan struct{}

	mu                    sync.Mutex
	calls, inFlight, peak int
}

func (r *gatedReader) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	r.mu.Lock()
	r.calls++
	r.inFlight++
	r.peak = max(r.peak, r.inFlight)
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		r.inFlight--
		r.mu.Unlock()
	}()
	select {
	case <-r.release:
	case <-ctx.Done():
		return ctx.Err()
	}
	return r.Reader.List(ctx, list, opts...)
}

func (r *gatedReader) counts() (calls, peak int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.calls, r.peak
}

// forgedReview is an AdmissionReview anyone who reaches :9443 can send (the webhook server does
// not authenticate its caller): a publisher create in namespace ns.
func forgedReview(t *testing.T, ns, name, cluster string) admission.Request {
	return admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		Operation: admissionv1.Create, Namespace: ns, Name: name, Object: raw(t, webhookLB(ns, name, cluster, 0, nil)),
	}}
}

// 100 concurrent forged reviews for another namespace cost at most the bound of live LISTs at a
// time: the reviews beyond it are refused at once (429, retry), never admitted and never queued;
// once the reads return, their slots serve the next review.
func TestPublisherValidatorBoundsLiveReads(t *testing.T) {
	const reviews = 100
	tests := []struct {
		name         string
		maxLiveReads int
		bound        int
	}{
		{"default", 0, DefaultMaxLiveReads},
		{"option", 1, 1},
	}
	s := runtime.NewScheme()
	if err := AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			reader := &gatedReader{Reader: fake.NewClientBuilder().WithScheme(s).Build(), release: make(chan struct{})}
			v := &PublisherValidator{Reader: reader, Decoder: admission.NewDecoder(s), MaxLiveReads: tt.maxLiveReads}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			responses := make(chan admission.Response, reviews)
			for i := range reviews {
				go func() {
					responses <- v.Handle(ctx, forgedReview(t, "victim", fmt.Sprintf("forged-%d", i), fmt.Sprintf("probe-%d", i)))
				}()
			}
			// Every review has either reached the reader, where it is held, or been answered without it.
			g.Eventually(func() int {
				calls, _ := reader.counts()
				return calls + len(responses)
			}, 10*time.Second, time.Millisecond).Should(Equal(reviews))
			calls, peak := reader.counts()
			close(reader.release)

			g.Expect(peak).To(BeNumerically("<=", tt.bound), "live LISTs in flight at once")
			g.Expect(calls).To(Equal(tt.bound), "the reviews within the bound read")
			var allowed, refused int
			for range reviews {
				var resp admission.Response
				g.Eventually(responses, 10*time.Second).Should(Receive(&resp))
				if resp.Allowed {
					allowed++
					continue
				}
				refused++
				g.Expect(resp.Result).NotTo(BeNil())
				g.Expect(resp.Result.Code).To(BeEquivalentTo(http.StatusTooManyRequests))
				g.Expect(resp.Result.Reason).To(Equal(metav1.StatusReasonTooManyRequests))
				g.Expect(resp.Result.Details).To(HaveField("RetryAfterSeconds", BeNumerically(">", 0)))
				g.Expect(resp.Result.Message).To(ContainSubstring("retry"))
			}
			g.Expect(allowed).To(Equal(calls), "only a review that read may be admitted (no conflict for a fresh Cluster)")
			g.Expect(refused).To(Equal(reviews - calls))

			resp := v.Handle(ctx, forgedReview(t, "victim", "after", "probe-after"))
			g.Expect(resp.Allowed).To(BeTrue(), "the slots were given back: %+v", resp.Result)
		})
	}
}

// A denial names no stored LoadBalancer: the caller is not authenticated and picks the
// namespace, so a name in the reply would disclose what it may not read. Reviews whose
// namespace does not match their object's, or that name none (a cluster-wide list), are
// refused before any read.
func TestPublisherValidatorNamesNoStoredObject(t *testing.T) {
	const secret = "victim-publisher-7f3a"
	s := runtime.NewScheme()
	if err := AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	stored := []client.Object{webhookLB("victim", secret, "c", 5, nil), webhookLB("other", secret+"-other", "c", 5, nil)}
	mismatched := forgedReview(t, "attacker", "probe", "c")
	mismatched.Object = raw(t, webhookLB("victim", "probe", "c", 0, nil))
	noNamespace := forgedReview(t, "", "probe", "c")
	tests := []struct {
		name string
		req  admission.Request
		code int32
		want string
	}{
		{"a conflict in the caller's chosen namespace", forgedReview(t, "victim", "probe", "c"), http.StatusUnprocessableEntity,
			"another LoadBalancer of Cluster c already publishes its endpoint"},
		{"no namespace: no cluster-wide list", noNamespace, http.StatusBadRequest, "names no namespace"},
		{"the object's namespace is not the request's", mismatched, http.StatusBadRequest, "is not the request's"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			v := &PublisherValidator{Reader: fake.NewClientBuilder().WithScheme(s).WithObjects(stored...).Build(), Decoder: admission.NewDecoder(s)}
			resp := v.Handle(context.Background(), tt.req)
			g.Expect(resp.Allowed).To(BeFalse())
			g.Expect(resp.Result).NotTo(BeNil())
			g.Expect(resp.Result.Message).NotTo(ContainSubstring(secret))
			g.Expect(fmt.Sprint(resp.Result.Details)).NotTo(ContainSubstring(secret))
			g.Expect(resp.Result.Code).To(Equal(tt.code))
			g.Expect(resp.Result.Message).To(ContainSubstring(tt.want))
		})
	}
}
