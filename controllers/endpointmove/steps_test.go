package endpointmove

import (
	"fmt"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	lbv1 "github.com/caplb/caplb/api/v1alpha1"
)

var (
	e1 = testMove.Old
	e2 = testMove.New
)

// observed is a move ready to start: the new LoadBalancer Ready on E2, the old one publishing
// E1, every member verified, both hosts in the control plane's certSANs.
func observed(mutate func(*Observed)) Observed {
	o := Observed{
		From: "old", Policy: lbv1.CertSANsReport, Ready: true, Endpoint: e2,
		Old:                  OldLB{Exists: true, Publishes: true, Endpoint: e1},
		ClusterEndpoint:      e1,
		Members:              []MemberCert{{Name: "cp-a", Verified: true}, {Name: "cp-b", Verified: true}},
		ControlPlaneCertSANs: []string{"api.prod.example.com", "10.0.0.10"}, ControlPlaneKnown: true,
		Machines: []string{"md-0-x", "cp-b", "cp-a"},
	}
	if mutate != nil {
		mutate(&o)
	}
	return o
}

func at2(step lbv1.EndpointMoveStep) *lbv1.EndpointMoveStatus {
	return &lbv1.EndpointMoveStatus{From: "old", OldEndpoint: e1, NewEndpoint: e2, Step: step}
}

func TestNext(t *testing.T) {
	tests := []struct {
		name       string
		o          Observed
		wantReason string // "" no condition
		wantStep   lbv1.EndpointMoveStep
		wantDo     lbv1.EndpointMoveStep
		wantMsg    []string
		wantAdd    []string
	}{
		{"no move", observed(func(o *Observed) { o.From = "" }), "", "", "", nil, nil},
		{"new LoadBalancer not Ready", observed(func(o *Observed) { o.Ready = false }),
			lbv1.WaitingForEndpointReason, lbv1.MoveStepServe, "", []string{"Ready on its own endpoint", "10.0.0.10:6443", "LoadBalancer old"}, nil},
		{"a member lacks E2", observed(func(o *Observed) {
			o.Members[1] = MemberCert{Name: "cp-b", Detail: "x509: certificate is valid for 10.0.0.10, not api.prod.example.com"}
		}), lbv1.WaitingForCertSANsReason, lbv1.MoveStepCertSANs, "", []string{"1 of 2 members", "cp-b (x509: certificate is valid for 10.0.0.10"}, nil},
		{"Report: control plane lacks E2, says what to add", observed(func(o *Observed) {
			o.ControlPlaneCertSANs = nil
			o.Members[0].Verified = false
		}), lbv1.WaitingForCertSANsReason, lbv1.MoveStepCertSANs, "", []string{"Add api.prod.example.com, 10.0.0.10 to KubeadmControlPlane", "certSANs: AddToControlPlane"}, nil},
		{"AddToControlPlane: caplb adds both hosts", observed(func(o *Observed) {
			o.Policy = lbv1.CertSANsAddToControlPlane
			o.ControlPlaneCertSANs = []string{"10.0.0.10"}
			o.Members[0].Verified = false
		}), lbv1.WaitingForCertSANsReason, lbv1.MoveStepCertSANs, "", []string{"Adding api.prod.example.com"}, []string{"api.prod.example.com"}},
		{"members verified, control plane lacks E1", observed(func(o *Observed) { o.ControlPlaneCertSANs = []string{"api.prod.example.com"} }),
			lbv1.WaitingForCertSANsReason, lbv1.MoveStepCertSANs, "", []string{"lack 10.0.0.10"}, nil},
		{"no members yet", observed(func(o *Observed) { o.Members = nil }),
			lbv1.WaitingForCertSANsReason, lbv1.MoveStepCertSANs, "", []string{"no member"}, nil},
		{"all gates pass: first rewrite", observed(nil), lbv1.SwitchingReason, lbv1.MoveStepClusterInfo, lbv1.MoveStepClusterInfo,
			[]string{"kube-public/cluster-info", "10.0.0.10:6443 stays served"}, nil},
		{"control plane of another kind: members decide", observed(func(o *Observed) { o.ControlPlaneKnown, o.ControlPlaneCertSANs = false, nil }),
			lbv1.SwitchingReason, lbv1.MoveStepClusterInfo, lbv1.MoveStepClusterInfo, nil, nil},
		{"old LoadBalancer refused", observed(func(o *Observed) { o.Old.Refusal = "spec.takeOverEndpointFrom.name: does not publish" }),
			lbv1.EndpointMoveRefusedReason, lbv1.MoveStepServe, "", []string{"does not publish"}, nil},
		{"Cluster not on the old LoadBalancer's endpoint", observed(func(o *Observed) { o.ClusterEndpoint = lbv1.APIEndpoint{Host: "10.0.0.99", Port: 6443} }),
			lbv1.EndpointMoveRefusedReason, lbv1.MoveStepServe, "", []string{"10.0.0.99:6443"}, nil},
		{"same endpoint", observed(func(o *Observed) { o.Endpoint = e1 }),
			lbv1.EndpointMoveRefusedReason, lbv1.MoveStepServe, "", []string{"the same"}, nil},
		{"Cluster edited mid-move", observed(func(o *Observed) { o.Status = at2(lbv1.MoveStepKubeProxy); o.ClusterEndpoint = e2 }),
			lbv1.EndpointMoveRefusedReason, lbv1.MoveStepKubeProxy, "", []string{"changed to api.prod.example.com:443", "GitOps"}, nil},
		{"resumed at ReleaseOld after the flip", observed(func(o *Observed) {
			o.Status = at2(lbv1.MoveStepReleaseOld)
			o.Old = OldLB{Exists: true, Endpoint: e1, Refusal: "does not publish"}
		}), lbv1.SwitchingReason, lbv1.MoveStepReleaseOld, lbv1.MoveStepReleaseOld, nil, nil},
		{"switch records the Machines", observed(func(o *Observed) { o.Status = at2(lbv1.MoveStepClusterEndpoint); o.Old.Publishes = false }),
			lbv1.SwitchingReason, lbv1.MoveStepClusterEndpoint, lbv1.MoveStepClusterEndpoint, []string{"Cluster spec.controlPlaneEndpoint"}, nil},
		{"resumed at ClusterEndpoint after the write", observed(func(o *Observed) { o.Status = at2(lbv1.MoveStepClusterEndpoint); o.ClusterEndpoint = e2 }),
			lbv1.SwitchingReason, lbv1.MoveStepClusterEndpoint, lbv1.MoveStepClusterEndpoint, nil, nil},
		{"resumed at Publish after the write", observed(func(o *Observed) {
			o.Status, o.From, o.Publishes, o.ClusterEndpoint = at2(lbv1.MoveStepPublish), "", true, e2
		}), lbv1.SwitchingReason, lbv1.MoveStepPublish, lbv1.MoveStepPublish, nil, nil},
		{"reverted after the switch", observed(func(o *Observed) { o.Status = at2(lbv1.MoveStepPublish) }),
			lbv1.EndpointMoveRefusedReason, lbv1.MoveStepPublish, "", []string{"went back to 10.0.0.10:6443"}, nil},
		{"done, field dropped", observed(func(o *Observed) {
			o.From = ""
			o.Status = at2(lbv1.MoveStepDone)
			o.Status.MachinesBeforeSwitch = []string{"cp-a", "md-0-x"}
		}), lbv1.SwitchedReason, lbv1.MoveStepDone, "", []string{"2 Machines", "cp-a, md-0-x", "rollout.after", "until LoadBalancer old is deleted"}, nil},
		{"aborted before any write", observed(func(o *Observed) { o.From = ""; o.Status = at2(lbv1.MoveStepCertSANs) }), "", "", "", nil, nil},
		{"field removed after writes began", observed(func(o *Observed) { o.From = ""; o.Status = at2(lbv1.MoveStepKubeadmConfig) }),
			lbv1.EndpointMoveRefusedReason, lbv1.MoveStepKubeadmConfig, "", []string{"removed after the rewrites began", "set it again"}, nil},
		{"field renamed mid-move", observed(func(o *Observed) { o.From = "other"; o.Status = at2(lbv1.MoveStepKubeProxy) }),
			lbv1.EndpointMoveRefusedReason, lbv1.MoveStepKubeProxy, "", []string{"started from old"}, nil},
		{"unknown step", observed(func(o *Observed) { o.Status = at2("Teleport") }),
			lbv1.EndpointMoveRefusedReason, "Teleport", "", []string{"newer manager"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			in := tt.o.Status.DeepCopy()
			d := Next(tt.o)
			g.Expect(tt.o.Status).To(Equal(in), "Next must not modify its input")
			g.Expect(d.Do).To(Equal(tt.wantDo))
			g.Expect(d.AddCertSANs).To(Equal(tt.wantAdd))
			if tt.wantReason == "" {
				g.Expect(d.Condition).To(BeNil())
				g.Expect(d.Status).To(BeNil())
				return
			}
			g.Expect(d.Condition).NotTo(BeNil())
			g.Expect(d.Condition.Type).To(Equal(lbv1.EndpointMoveCondition))
			g.Expect(d.Condition.Reason).To(Equal(tt.wantReason))
			g.Expect(d.Condition.Status == metav1.ConditionTrue).To(Equal(tt.wantReason == lbv1.SwitchedReason))
			for _, m := range tt.wantMsg {
				g.Expect(d.Condition.Message).To(ContainSubstring(m))
			}
			g.Expect(d.Status.Step).To(Equal(tt.wantStep))
			if d.Do != "" || tt.wantStep == lbv1.MoveStepCertSANs {
				g.Expect(d.Status.OldEndpoint).To(Equal(e1))
				g.Expect(d.Status.NewEndpoint).To(Equal(e2))
			}
			if tt.wantDo == lbv1.MoveStepClusterEndpoint && tt.o.Status.MachinesBeforeSwitch == nil {
				g.Expect(d.Status.MachinesBeforeSwitch).To(Equal([]string{"cp-a", "cp-b", "md-0-x"}))
			}
		})
	}
}

func TestAdvance(t *testing.T) {
	g := NewWithT(t)
	now := metav1.Unix(1000, 0)
	st := Advance(at2(lbv1.MoveStepClusterEndpoint), lbv1.MoveStepClusterEndpoint, now)
	g.Expect(st.Step).To(Equal(lbv1.MoveStepPublish))
	g.Expect(st.SwitchedAt).To(Equal(&now))
	g.Expect(Advance(st, lbv1.MoveStepClusterEndpoint, metav1.Unix(2000, 0))).To(Equal(st), "a stale report does not advance")
	g.Expect(Advance(at2(lbv1.MoveStepPublish), lbv1.MoveStepPublish, now).Step).To(Equal(lbv1.MoveStepDone))
	g.Expect(Advance(at2(lbv1.MoveStepDone), lbv1.MoveStepDone, now).Step).To(Equal(lbv1.MoveStepDone))
}

// world is a workload and management cluster in memory: the rewrites act on real fixtures;
// writes counts the writes that changed something, per step.
type world struct {
	clusterInfo, kubeadm, kubeProxy      map[string]string
	secret                               map[string][]byte
	oldPublishes, newPublishes, takeOver bool
	clusterEndpoint                      lbv1.APIEndpoint
	writes                               map[lbv1.EndpointMoveStep]int
}

func newWorld() *world {
	return &world{
		clusterInfo: clusterInfo().Data, kubeadm: kubeadmConfig(clusterConfiguration).Data, kubeProxy: kubeProxy().Data,
		secret: kubeconfigSecret(secretKubeconfig).Data, oldPublishes: true, takeOver: true, clusterEndpoint: e1,
		writes: map[lbv1.EndpointMoveStep]int{},
	}
}

func (w *world) observe(st *lbv1.EndpointMoveStatus) Observed {
	return observed(func(o *Observed) {
		o.Status = st
		o.From = map[bool]string{true: "old"}[w.takeOver]
		o.Old.Publishes = w.oldPublishes
		if !w.oldPublishes {
			o.Old.Refusal = "does not publish"
		}
		o.ClusterEndpoint = w.clusterEndpoint
		o.Publishes = w.newPublishes
	})
}

// do makes one step's write the way the reconciler does: read, rewrite, write if changed.
func (w *world) do(step lbv1.EndpointMoveStep) error {
	m := Move{Old: e1, New: e2}
	var changed bool
	var err error
	switch step {
	case lbv1.MoveStepClusterInfo:
		cm := clusterInfo()
		cm.Data = w.clusterInfo
		changed, err = m.RewriteClusterInfo(cm)
	case lbv1.MoveStepKubeadmConfig:
		changed, err = m.RewriteKubeadmConfig(kubeadmConfigOf(w.kubeadm))
	case lbv1.MoveStepKubeProxy:
		cm := kubeProxy()
		cm.Data = w.kubeProxy
		changed, err = m.RewriteKubeProxy(cm)
	case lbv1.MoveStepKubeconfigSecret:
		s := kubeconfigSecret("")
		s.Data = w.secret
		changed, err = m.RewriteKubeconfigSecret(s)
	case lbv1.MoveStepReleaseOld:
		changed, w.oldPublishes = w.oldPublishes, false
	case lbv1.MoveStepClusterEndpoint:
		changed, w.clusterEndpoint = w.clusterEndpoint != e2, e2
	case lbv1.MoveStepPublish:
		changed = !w.newPublishes || w.takeOver
		w.newPublishes, w.takeOver = true, false
	default:
		return fmt.Errorf("no write for step %s", step)
	}
	if changed {
		w.writes[step]++
	}
	return err
}

func kubeadmConfigOf(data map[string]string) *corev1.ConfigMap {
	cm := kubeadmConfig("")
	cm.Data = data
	return cm
}

// run drives the move as the reconciler does, from the persisted status; crashAfter makes it
// stop after that step's write and before the status recording it is persisted. It returns
// the persisted status.
func (w *world) run(g Gomega, persisted *lbv1.EndpointMoveStatus, crashAfter lbv1.EndpointMoveStep) *lbv1.EndpointMoveStatus {
	for range 20 {
		d := Next(w.observe(persisted))
		if d.Status != nil {
			persisted = d.Status
		}
		if d.Do == "" {
			return persisted
		}
		g.Expect(w.do(d.Do)).To(Succeed())
		if d.Do == crashAfter {
			return persisted
		}
		persisted = Advance(persisted, d.Do, metav1.Unix(1000, 0))
	}
	g.Expect("the move did not settle").To(BeEmpty())
	return nil
}

// TestMoveResumesAtEveryStep: a manager stopped right after any step's write (its status not
// yet saying so) resumes and finishes the move, and no object is written twice.
func TestMoveResumesAtEveryStep(t *testing.T) {
	writing := order[index(lbv1.MoveStepClusterInfo):index(lbv1.MoveStepDone)]
	for _, crash := range append([]lbv1.EndpointMoveStep{""}, writing...) {
		t.Run(fmt.Sprintf("crash after %q", crash), func(t *testing.T) {
			g := NewWithT(t)
			w := newWorld()
			st := w.run(g, nil, crash)
			if crash != "" {
				g.Expect(st.Step).To(Equal(crash), "stopped with the step in progress persisted")
				st = w.run(g, st, "")
			}
			g.Expect(st.Step).To(Equal(lbv1.MoveStepDone))
			g.Expect(st.SwitchedAt).NotTo(BeNil())
			g.Expect(st.MachinesBeforeSwitch).To(Equal([]string{"cp-a", "cp-b", "md-0-x"}))
			for _, s := range writing {
				g.Expect(w.writes[s]).To(Equal(1), "step %s wrote %d times", s, w.writes[s])
			}
			g.Expect(w.clusterInfo[ClusterInfoKubeconfigKey]).To(Equal(at(clusterInfoKubeconfig)))
			g.Expect(w.clusterInfo).NotTo(HaveKey("jws-kubeconfig-abcdef"))
			g.Expect(w.kubeProxy[KubeProxyKubeconfigKey]).To(Equal(at(kubeProxyKubeconfig)))
			g.Expect(string(w.secret[KubeconfigSecretKey])).To(Equal(at(secretKubeconfig)))
			g.Expect(w.kubeadm[ClusterConfigurationKey]).To(ContainSubstring("controlPlaneEndpoint: api.prod.example.com:443"))
			g.Expect(w.oldPublishes).To(BeFalse())
			g.Expect(w.newPublishes && !w.takeOver).To(BeTrue())
			g.Expect(w.clusterEndpoint).To(Equal(e2))
			d := Next(w.observe(st))
			g.Expect(d.Do).To(BeEmpty())
			g.Expect(d.Condition.Reason).To(Equal(lbv1.SwitchedReason))
		})
	}
}
