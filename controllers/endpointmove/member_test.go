package endpointmove

import (
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	lbv1 "github.com/caplb/caplb/api/v1alpha1"
)

// A member move: LoadBalancer "edge" (static, a member's address) moves the Cluster from the
// leaving member's address (A) to the one it publishes now (B).
var (
	memberA = lbv1.APIEndpoint{Host: "10.0.0.11", Port: 6443}
	memberB = lbv1.APIEndpoint{Host: "10.0.0.12", Port: 6443}
)

func memberObserved(step lbv1.EndpointMoveStep, mutate func(*Observed)) Observed {
	o := Observed{
		Self: "edge", Publishes: true, Ready: true, Endpoint: memberB, ClusterEndpoint: memberA,
		Status:  &lbv1.EndpointMoveStatus{From: "edge", OldEndpoint: memberA, Step: step},
		Members: []MemberCert{{Name: "cp-b", Verified: true}},
		// The control plane's certSANs are not a member move's business: the leaving address
		// need not be in new certificates, and the new one is the Cluster's endpoint for them.
		ControlPlaneKnown: true, ControlPlaneCertSANs: nil,
		Machines: []string{"cp-c", "cp-b"},
	}
	if step != lbv1.MoveStepServe {
		o.Status.NewEndpoint = memberB
	}
	if mutate != nil {
		mutate(&o)
	}
	return o
}

func TestNextMemberMove(t *testing.T) {
	tests := []struct {
		name       string
		o          Observed
		wantReason string
		wantStep   lbv1.EndpointMoveStep
		wantDo     lbv1.EndpointMoveStep
		wantMsg    string
	}{
		{"starts: gates pass, first rewrite", memberObserved(lbv1.MoveStepServe, nil),
			lbv1.SwitchingReason, lbv1.MoveStepClusterInfo, lbv1.MoveStepClusterInfo, "10.0.0.11:6443 stays served"},
		{"no other member publishes yet", memberObserved(lbv1.MoveStepServe, func(o *Observed) { o.Endpoint = memberA }),
			lbv1.WaitingForEndpointReason, lbv1.MoveStepServe, "", "waiting for another ready member"},
		{"the new member's certificate does not verify as its address", memberObserved(lbv1.MoveStepServe, func(o *Observed) {
			o.Members = []MemberCert{{Name: "cp-b", Detail: "x509: certificate is valid for 10.0.0.99"}}
		}), lbv1.WaitingForCertSANsReason, lbv1.MoveStepCertSANs, "", "cp-b (x509"},
		{"not on the Cluster's endpoint any more before the first write", memberObserved(lbv1.MoveStepServe, func(o *Observed) {
			o.ClusterEndpoint = lbv1.APIEndpoint{Host: "10.0.0.99", Port: 6443}
		}), lbv1.EndpointMoveRefusedReason, lbv1.MoveStepServe, "", "not 10.0.0.11:6443"},
		{"no spec.takeOverEndpointFrom needed mid-move", memberObserved(lbv1.MoveStepKubeProxy, nil),
			lbv1.SwitchingReason, lbv1.MoveStepKubeProxy, lbv1.MoveStepKubeProxy, "kube-proxy"},
		{"no old LoadBalancer to release: straight to the Cluster", memberObserved(lbv1.MoveStepReleaseOld, nil),
			lbv1.SwitchingReason, lbv1.MoveStepClusterEndpoint, lbv1.MoveStepClusterEndpoint, "Cluster spec.controlPlaneEndpoint"},
		{"no publisher to flip: done after the Cluster", memberObserved(lbv1.MoveStepPublish, func(o *Observed) { o.ClusterEndpoint = memberB }),
			lbv1.SwitchedReason, lbv1.MoveStepDone, "", "a member that left"},
		{"Cluster edited mid-move", memberObserved(lbv1.MoveStepKubeadmConfig, func(o *Observed) { o.ClusterEndpoint = memberB }),
			lbv1.EndpointMoveRefusedReason, lbv1.MoveStepKubeadmConfig, "", "GitOps"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			d := Next(tt.o)
			g.Expect(d.Condition).NotTo(BeNil())
			g.Expect(d.Condition.Reason).To(Equal(tt.wantReason), d.Condition.Message)
			g.Expect(d.Condition.Message).To(ContainSubstring(tt.wantMsg))
			g.Expect(d.Status.Step).To(Equal(tt.wantStep))
			g.Expect(d.Do).To(Equal(tt.wantDo))
			g.Expect(d.AddCertSANs).To(BeEmpty(), "a member move never edits the control plane")
		})
	}
}

// TestMemberMoveWalk walks a member move from its start to Done as the reconciler does (Next,
// the write, Advance): every rewrite once, in order, ReleaseOld and Publish never written.
func TestMemberMoveWalk(t *testing.T) {
	g := NewWithT(t)
	o := memberObserved(lbv1.MoveStepServe, nil)
	var writes []lbv1.EndpointMoveStep
	for range 20 {
		d := Next(o)
		if d.Do == "" {
			o.Status = d.Status
			if d.Status.Step == lbv1.MoveStepDone {
				break
			}
			continue
		}
		writes = append(writes, d.Do)
		if d.Do == lbv1.MoveStepClusterEndpoint {
			o.ClusterEndpoint = memberB
		}
		o.Status = AdvanceMember(d.Status, d.Do, metav1.Now())
		g.Expect(memberSkipped).NotTo(ContainElement(o.Status.Step), "a member move's status never names a step it does not take")
	}
	g.Expect(o.Status.Step).To(Equal(lbv1.MoveStepDone))
	g.Expect(writes).To(Equal([]lbv1.EndpointMoveStep{lbv1.MoveStepClusterInfo, lbv1.MoveStepKubeadmConfig,
		lbv1.MoveStepKubeProxy, lbv1.MoveStepKubeconfigSecret, lbv1.MoveStepClusterEndpoint}))
	g.Expect(o.Status.MachinesBeforeSwitch).To(Equal([]string{"cp-b", "cp-c"}))
	g.Expect(o.Status.SwitchedAt).NotTo(BeNil())
}

// TestNextNewTakeOverAfterADoneMove: a LoadBalancer keeps a finished move as its record; when it
// is asked to take an endpoint over again (it no longer publishes, spec.takeOverEndpointFrom set),
// the record does not stop the new move.
func TestNextNewTakeOverAfterADoneMove(t *testing.T) {
	g := NewWithT(t)
	o := observed(func(o *Observed) {
		o.Status = &lbv1.EndpointMoveStatus{From: "older", OldEndpoint: memberA, NewEndpoint: e1, Step: lbv1.MoveStepDone}
	})
	d := Next(o)
	g.Expect(d.Status.From).To(Equal("old"))
	g.Expect(d.Do).To(Equal(lbv1.MoveStepClusterInfo))
	// While it publishes, the record stays a record.
	o.Publishes, o.From = true, ""
	g.Expect(Next(o).Condition.Reason).To(Equal(lbv1.SwitchedReason))
}
