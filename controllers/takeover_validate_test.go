package controllers

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	lbv1 "github.com/caplb/caplb/api/v1alpha1"
	"github.com/caplb/caplb/providers"
	"github.com/caplb/caplb/providers/static"
)

// takeOverLB is a LoadBalancer of Cluster c in namespace ns taking the endpoint over from "old".
func takeOverLB(name, from string) *lbv1.LoadBalancer {
	lb := webhookLB("ns", name, "c", 10, ptr.To(false))
	lb.Spec.Endpoint = lbv1.APIEndpoint{Host: "10.0.0.20", Port: 6443}
	lb.Spec.TakeOverEndpointFrom = &lbv1.EndpointTakeOver{Name: from}
	return lb
}

func TestValidateTakeOverSpec(t *testing.T) {
	reg, err := providers.NewRegistry(static.New())
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		mutate  func(*lbv1.LoadBalancer)
		wantErr []string
	}{
		{"valid", func(*lbv1.LoadBalancer) {}, nil},
		{"publishes while moving", func(lb *lbv1.LoadBalancer) { lb.Spec.PublishClusterEndpoint = nil },
			[]string{"spec.publishClusterEndpoint", "must be false while spec.takeOverEndpointFrom is set"}},
		{"no cluster", func(lb *lbv1.LoadBalancer) { lb.Spec.ClusterName = "" },
			[]string{"spec.clusterName", "same Cluster"}},
		{"names itself", func(lb *lbv1.LoadBalancer) { lb.Spec.TakeOverEndpointFrom.Name = lb.Name },
			[]string{"spec.takeOverEndpointFrom.name", "names this LoadBalancer itself"}},
		{"empty name", func(lb *lbv1.LoadBalancer) { lb.Spec.TakeOverEndpointFrom.Name = "" },
			[]string{"spec.takeOverEndpointFrom.name", "Required"}},
		{"unknown certSANs policy", func(lb *lbv1.LoadBalancer) { lb.Spec.TakeOverEndpointFrom.CertSANs = "Always" },
			[]string{"spec.takeOverEndpointFrom.certSANs", "AddToControlPlane"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			lb := takeOverLB("new", "old")
			tt.mutate(lb)
			errs := Validate(lb, reg)
			if len(tt.wantErr) == 0 {
				g.Expect(errs).To(BeEmpty())
				return
			}
			g.Expect(errs).NotTo(BeEmpty())
			for _, want := range tt.wantErr {
				g.Expect(errs.ToAggregate().Error()).To(ContainSubstring(want))
			}
		})
	}
}

func TestValidateTakeOver(t *testing.T) {
	old := func(mutate func(*lbv1.LoadBalancer)) *lbv1.LoadBalancer {
		o := webhookLB("ns", "old", "c", 5, nil)
		o.Spec.Endpoint = lbv1.APIEndpoint{Host: "10.0.0.10", Port: 6443}
		if mutate != nil {
			mutate(o)
		}
		return o
	}
	tests := []struct {
		name string
		old  *lbv1.LoadBalancer
		want string // "" valid
	}{
		{"the publisher of the same Cluster", old(nil), ""},
		{"missing", nil, "no LoadBalancer old in namespace ns"},
		{"other namespace", old(func(o *lbv1.LoadBalancer) { o.Namespace = "x" }), "is in namespace x, not ns"},
		{"other Cluster", old(func(o *lbv1.LoadBalancer) { o.Spec.ClusterName = "c2" }), "does not front Cluster c"},
		{"not the publisher", old(func(o *lbv1.LoadBalancer) { o.Spec.PublishClusterEndpoint = ptr.To(false) }), "does not publish"},
		{"being deleted", deleting(old(nil)), "is being deleted"},
		{"moving itself", old(func(o *lbv1.LoadBalancer) { o.Spec.TakeOverEndpointFrom = &lbv1.EndpointTakeOver{Name: "older"} }),
			"itself taking the endpoint over"},
		{"same endpoint", old(func(o *lbv1.LoadBalancer) { o.Spec.Endpoint.Host = "10.0.0.20" }), "needs a new endpoint"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			errs := ValidateTakeOver(takeOverLB("new", "old"), tt.old)
			if tt.want == "" {
				g.Expect(errs).To(BeEmpty())
				return
			}
			g.Expect(errs).To(HaveLen(1))
			g.Expect(errs[0].Field).To(Equal("spec.takeOverEndpointFrom.name"))
			g.Expect(errs[0].Error()).To(ContainSubstring(tt.want))
			g.Expect(errs[0].Error()).NotTo(ContainSubstring("c2"), "names a field of the stored object")
		})
	}
}

// TestTakeOverWebhook: the webhook reads the old LoadBalancer when a move starts (create, or an
// update adding the field) and leaves a stored move alone.
func TestTakeOverWebhook(t *testing.T) {
	s := runtime.NewScheme()
	if err := AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	stored := []client.Object{webhookLB("ns", "old", "c", 5, nil), webhookLB("ns", "extra", "c", 6, ptr.To(false))}
	v := &PublisherValidator{Reader: fake.NewClientBuilder().WithScheme(s).WithObjects(stored...).Build(), Decoder: admission.NewDecoder(s)}
	plain := webhookLB("ns", "new", "c", 10, ptr.To(false))
	tests := []struct {
		name     string
		op       admissionv1.Operation
		obj, old *lbv1.LoadBalancer
		want     string
	}{
		{"create taking over from the publisher", admissionv1.Create, takeOverLB("new", "old"), nil, ""},
		{"create taking over from a non-publisher", admissionv1.Create, takeOverLB("new", "extra"), nil, "does not publish"},
		{"create taking over from nothing", admissionv1.Create, takeOverLB("new", "ghost"), nil, "no LoadBalancer ghost"},
		{"update adding the field", admissionv1.Update, takeOverLB("new", "extra"), plain, "does not publish"},
		{"a stored move is the reconciler's", admissionv1.Update, takeOverLB("new", "extra"), takeOverLB("new", "extra"), ""},
		{"set again after the old one let go", admissionv1.Update, takeOverLB("new", "extra"), func() *lbv1.LoadBalancer {
			lb := webhookLB("ns", "new", "c", 10, ptr.To(false))
			lb.Status.EndpointMove = &lbv1.EndpointMoveStatus{From: "extra", Step: lbv1.MoveStepClusterEndpoint}
			return lb
		}(), ""},
		{"set again before the old one let go", admissionv1.Update, takeOverLB("new", "extra"), func() *lbv1.LoadBalancer {
			lb := webhookLB("ns", "new", "c", 10, ptr.To(false))
			lb.Status.EndpointMove = &lbv1.EndpointMoveStatus{From: "extra", Step: lbv1.MoveStepKubeProxy}
			return lb
		}(), "does not publish"},
		{"create publishing while taking over", admissionv1.Create, func() *lbv1.LoadBalancer {
			lb := takeOverLB("new", "old")
			lb.Spec.PublishClusterEndpoint = nil
			return lb
		}(), nil, "must be false while spec.takeOverEndpointFrom is set"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			req := admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{Operation: tt.op, Object: raw(t, tt.obj),
				OldObject: raw(t, tt.old), Namespace: "ns", Name: tt.obj.Name}}
			resp := v.Handle(context.Background(), req)
			if tt.want == "" {
				g.Expect(resp.Allowed).To(BeTrue(), "refused: %+v", resp.Result)
				return
			}
			g.Expect(resp.Allowed).To(BeFalse())
			g.Expect(resp.Result.Message).To(ContainSubstring(tt.want))
		})
	}
}
