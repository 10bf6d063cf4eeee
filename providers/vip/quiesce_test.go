package vip

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	agentv1 "github.com/caplb/caplb/api/agent/v1alpha1"
	lbv1 "github.com/caplb/caplb/api/v1alpha1"
	"github.com/caplb/caplb/providers"
)

// sameCluster serves the management client as the workload cluster's.
type sameCluster struct{ c client.Client }

func (s sameCluster) GetClient(context.Context, client.ObjectKey) (client.Client, error) {
	return s.c, nil
}

type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func readyNode(name string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}}
}

// quiesceEnv is an arp LoadBalancer with three members at version 3, n1 holding.
func quiesceEnv(t *testing.T) (*Backend, client.Client, *lbv1.LoadBalancer, *clock) {
	lb := arpLB()
	lb.Spec.Quiesce.DrainPeriod = &lbv1.Duration{Duration: 5 * time.Second}
	objs := []client.Object{lb}
	for _, n := range []string{"n1", "n2", "n3"} {
		objs = append(objs, readyNode(n))
	}
	c := fake.NewClientBuilder().WithScheme(newScheme(t)).WithObjects(objs...).Build()
	clk := &clock{t: time.Date(2026, 11, 23, 6, 0, 0, 0, time.UTC)}
	b := NewARP(Options{Client: c, Workload: sameCluster{c}, AgentImage: "img", Now: clk.now})
	ctx := context.Background()
	if _, err := b.Ensure(ctx, lb, nil); err != nil {
		t.Fatal(err)
	}
	sec := &corev1.Secret{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "ns", Name: "c-caplb-agent"}, sec); err != nil {
		t.Fatal(err)
	}
	m := agentv1.Membership{Version: 3, Members: []agentv1.MemberConfig{
		{Name: "n1", Address: "10.0.0.1"}, {Name: "n2", Address: "10.0.0.2"}, {Name: "n3", Address: "10.0.0.3"}}}
	sec.Data[agentv1.SecretMembershipKey] = []byte(m.String())
	if err := c.Update(ctx, sec); err != nil {
		t.Fatal(err)
	}
	return b, c, lb, clk
}

func setReport(t *testing.T, c client.Client, clk *clock, node string, st agentv1.AgentStatus) {
	n := &corev1.Node{}
	if err := c.Get(context.Background(), client.ObjectKey{Name: node}, n); err != nil {
		t.Fatal(err)
	}
	st.UpdatedAt = metav1.NewMicroTime(clk.t)
	if n.Annotations == nil {
		n.Annotations = map[string]string{}
	}
	n.Annotations[agentv1.AgentStatusAnnotation] = st.String()
	if err := c.Update(context.Background(), n); err != nil {
		t.Fatal(err)
	}
}

// Removing the VIP owner: quiesce asks the agent, waits for its report, then the drain, then the
// membership without it acknowledged by a majority of it — each step observable, none on time.
func TestQuiesceRemovingWaitsForReportDrainAndMembership(t *testing.T) {
	g := NewWithT(t)
	b, c, lb, clk := quiesceEnv(t)
	ctx := context.Background()
	members := []providers.Member{
		{Name: "m1", NodeName: "n1", Address: "10.0.0.1", State: lbv1.TargetRemoving},
		{Name: "m2", NodeName: "n2", Address: "10.0.0.2", State: lbv1.TargetActive},
		{Name: "m3", NodeName: "n3", Address: "10.0.0.3", State: lbv1.TargetActive},
	}
	setReport(t, c, clk, "n1", agentv1.AgentStatus{MembershipVersion: 3, Member: true, InDataPlane: true, Holding: true})
	setReport(t, c, clk, "n2", agentv1.AgentStatus{MembershipVersion: 3, Member: true, InDataPlane: true})
	setReport(t, c, clk, "n3", agentv1.AgentStatus{MembershipVersion: 3, Member: true, InDataPlane: true})

	qs, err := b.Quiesce(ctx, lb, members[0])
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(qs.Done).To(BeFalse())
	n := &corev1.Node{}
	g.Expect(c.Get(ctx, client.ObjectKey{Name: "n1"}, n)).To(Succeed())
	g.Expect(n.Annotations).To(HaveKeyWithValue(agentv1.QuiesceAnnotation, "removing"))

	// An hour of silence changes nothing while the agent is alive and holding.
	clk.t = clk.t.Add(time.Hour)
	setReport(t, c, clk, "n1", agentv1.AgentStatus{MembershipVersion: 3, Member: true, InDataPlane: true, Holding: true})
	setReport(t, c, clk, "n2", agentv1.AgentStatus{MembershipVersion: 3, Member: true, InDataPlane: true})
	qs, _ = b.Quiesce(ctx, lb, members[0])
	g.Expect(qs.Done).To(BeFalse())

	// Hand-over reported: still the drain period.
	setReport(t, c, clk, "n1", agentv1.AgentStatus{MembershipVersion: 3, Member: true, Quiesced: true})
	setReport(t, c, clk, "n2", agentv1.AgentStatus{MembershipVersion: 3, Member: true, InDataPlane: true, Holding: true})
	qs, _ = b.Quiesce(ctx, lb, members[0])
	g.Expect(qs.Done).To(BeFalse())
	g.Expect(qs.RequeueAfter).To(BeNumerically(">", 0))

	// Ensure issues version 4 without n1 (version 3 is acknowledged by all three).
	st, err := b.Ensure(ctx, lb, members)
	g.Expect(err).NotTo(HaveOccurred())
	sec := &corev1.Secret{}
	g.Expect(c.Get(ctx, client.ObjectKey{Namespace: "ns", Name: "c-caplb-agent"}, sec)).To(Succeed())
	m, err := agentv1.ParseMembership(string(sec.Data[agentv1.SecretMembershipKey]))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(m.Version).To(Equal(int64(4)))
	g.Expect(m.Has("n1")).To(BeFalse())
	g.Expect(st.InRotation).NotTo(HaveKey("m2"), "m2 runs version 3, not the current 4")

	clk.t = clk.t.Add(5 * time.Second)
	qs, _ = b.Quiesce(ctx, lb, members[0])
	g.Expect(qs.Done).To(BeFalse(), "version 4 is not acknowledged yet")

	setReport(t, c, clk, "n2", agentv1.AgentStatus{MembershipVersion: 4, Member: true, InDataPlane: true, Holding: true})
	qs, _ = b.Quiesce(ctx, lb, members[0])
	g.Expect(qs.Done).To(BeFalse(), "1 of 2 is not a majority")
	setReport(t, c, clk, "n3", agentv1.AgentStatus{MembershipVersion: 4, Member: true, InDataPlane: true})
	qs, _ = b.Quiesce(ctx, lb, members[0])
	g.Expect(qs.Done).To(BeTrue())
}

// A node that is not a member holds nothing: its quiesce is done after the drain (and with the
// current membership acknowledged, as for any removal), unless it reports holding the VIP (the
// version-0 bootstrap), which it must hand over first.
func TestQuiesceNonMember(t *testing.T) {
	g := NewWithT(t)
	b, c, lb, clk := quiesceEnv(t)
	lb.Spec.Quiesce.DrainPeriod = &lbv1.Duration{Duration: time.Nanosecond}
	ctx := context.Background()
	g.Expect(c.Create(ctx, readyNode("n9"))).To(Succeed())
	for _, n := range []string{"n1", "n2", "n3"} {
		setReport(t, c, clk, n, agentv1.AgentStatus{MembershipVersion: 3, Member: true, InDataPlane: true, Holding: n == "n1"})
	}
	m := providers.Member{Name: "m9", NodeName: "n9", Address: "10.0.0.9", State: lbv1.TargetRemoving}
	setReport(t, c, clk, "n9", agentv1.AgentStatus{MembershipVersion: 0, Holding: true})
	qs, err := b.Quiesce(ctx, lb, m)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(qs.Done).To(BeFalse())
	setReport(t, c, clk, "n9", agentv1.AgentStatus{MembershipVersion: 3})
	qs, _ = b.Quiesce(ctx, lb, m)
	g.Expect(qs.Done).To(BeFalse(), "the drain counts from the first report")
	clk.t = clk.t.Add(time.Second)
	qs, _ = b.Quiesce(ctx, lb, m)
	g.Expect(qs.Done).To(BeTrue())
	qs, _ = b.Quiesce(ctx, lb, providers.Member{Name: "m0", State: lbv1.TargetRemoving})
	g.Expect(qs.Done).To(BeTrue(), "no Node, nothing to hand over")
}

// During a kube-vip takeover a machine from before caplb (no agent, outside the membership: it
// runs kube-vip) leaves only once a caplb member holds the VIP (bgp: announces it, with every
// router's session Established: an announcement no router took is no path); without the
// takeover it leaves at once, as any non-member that holds nothing.
func TestQuiesceKubeVIPMachineWaitsForCaplbHolder(t *testing.T) {
	for _, tc := range []struct {
		name     string
		bgp      bool
		takeOver bool
		holder   string
		est, of  int // the holder's sessions: Established, configured
		done     bool
	}{
		{"no takeover: nothing of caplb's to wait for", false, false, "", 0, 0, true},
		{"takeover, nobody of caplb's holds yet: held", false, true, "", 0, 0, false},
		{"takeover, a caplb member holds: leaves", false, true, "n2", 0, 0, true},
		{"bgp, no takeover: leaves", true, false, "", 0, 0, true},
		{"bgp, no takeover, no session up: leaves", true, false, "n3", 0, 2, true},
		{"bgp takeover, no caplb member announces yet: held", true, true, "", 0, 0, false},
		{"bgp takeover, a caplb member announces, 0 of 2 sessions up: held", true, true, "n3", 0, 2, false},
		{"bgp takeover, a caplb member announces, 1 of 2 sessions up: held", true, true, "n3", 1, 2, false},
		{"bgp takeover, an agent that reports no sessions: held", true, true, "n3", 0, 0, false},
		{"bgp takeover, a caplb member announces, 2 of 2 sessions up: leaves", true, true, "n3", 2, 2, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			b, c, lb, clk := quiesceEnv(t)
			lb.Spec.Quiesce.DrainPeriod = &lbv1.Duration{Duration: time.Nanosecond}
			if tc.bgp {
				// The membership and reports are the same for bgp; Holding is "announces".
				lb.Spec.Backend = bgpLB().Spec.Backend
				b = NewBGP(b.opts)
			}
			if tc.takeOver && tc.bgp {
				lb.Spec.Backend.BGP.TakeOver = &lbv1.TakeOver{KubeVIP: &lbv1.KubeVIPTakeOver{}}
			} else if tc.takeOver {
				lb.Spec.Backend.ARP.TakeOver = &lbv1.TakeOver{KubeVIP: &lbv1.KubeVIPTakeOver{}}
			}
			ctx := context.Background()
			g.Expect(c.Create(ctx, readyNode("old-1"))).To(Succeed())
			for _, n := range []string{"n1", "n2", "n3"} {
				st := agentv1.AgentStatus{MembershipVersion: 3, Member: true, InDataPlane: true, Holding: n == tc.holder}
				if n == tc.holder {
					st.PeersEstablished, st.Peers = tc.est, tc.of
				}
				setReport(t, c, clk, n, st)
			}
			m := providers.Member{Name: "old-1", NodeName: "old-1", Address: "10.0.0.21", State: lbv1.TargetRemoving}
			qs, err := b.Quiesce(ctx, lb, m)
			g.Expect(err).NotTo(HaveOccurred())
			if !qs.Done {
				clk.t = clk.t.Add(time.Second)
				qs, err = b.Quiesce(ctx, lb, m)
				g.Expect(err).NotTo(HaveOccurred())
			}
			g.Expect(qs.Done).To(Equal(tc.done))
		})
	}
}

// Restore removes the quiesce request.
func TestRestoreRemovesQuiesceRequest(t *testing.T) {
	g := NewWithT(t)
	b, c, lb, _ := quiesceEnv(t)
	ctx := context.Background()
	m := providers.Member{Name: "m2", NodeName: "n2", Address: "10.0.0.2", State: lbv1.TargetDisabling}
	_, err := b.Quiesce(ctx, lb, m)
	g.Expect(err).NotTo(HaveOccurred())
	n := &corev1.Node{}
	g.Expect(c.Get(ctx, client.ObjectKey{Name: "n2"}, n)).To(Succeed())
	g.Expect(n.Annotations).To(HaveKeyWithValue(agentv1.QuiesceAnnotation, "disabled"))
	qs, err := b.Restore(ctx, lb, m)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(qs.Done).To(BeTrue())
	g.Expect(c.Get(ctx, client.ObjectKey{Name: "n2"}, n)).To(Succeed())
	g.Expect(n.Annotations).NotTo(HaveKey(agentv1.QuiesceAnnotation))
}
