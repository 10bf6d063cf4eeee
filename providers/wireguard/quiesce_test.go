package wireguard

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	lbv1 "github.com/caplb/caplb/api/v1alpha1"
	wg "github.com/caplb/caplb/api/wireguard/v1alpha1"
	"github.com/caplb/caplb/providers"
)

func (e *env) quiescedList(t *testing.T) []string {
	var q []string
	if err := json.Unmarshal(e.secret(t, GatewaySecretName(e.lb)).Data[QuiescedKey], &q); err != nil {
		t.Fatal(err)
	}
	return q
}

// Quiesce asks every gateway (the Secret's quiesced list) and is Done only from their reports:
// every gateway must have the node out of rotation, then zero open connections release it at
// once, and otherwise the drain timeout counted from the last acknowledgement — never a timer
// alone. A silent gateway holds it (the controller's spec.quiesce.timeout bounds the wait).
func TestQuiesceWaitsForEveryGateway(t *testing.T) {
	m := providers.Member{Name: "m1", NodeName: "n1", State: lbv1.TargetDisabling}
	active := wg.MemberStatus{Node: "n1", PublicKey: "k", State: "active", Healthy: true, Connections: 4}
	out := func(conns int) wg.MemberStatus {
		return wg.MemberStatus{Node: "n1", PublicKey: "k", State: "draining", Healthy: true, Connections: conns}
	}
	type step struct {
		what    string
		advance time.Duration
		gw1     []wg.MemberStatus // nil: gw-1 does not report at this step
		gw1Q    []string
		gw2     []wg.MemberStatus
		gw2Q    []string
		gw2Age  time.Duration
		done    bool
	}
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"zero connections release at once", []step{
			{what: "both still active", gw1: []wg.MemberStatus{active}, gw2: []wg.MemberStatus{active}},
			{what: "gw-1 acknowledged, gw-2 not", advance: time.Minute, gw1: []wg.MemberStatus{out(0)}, gw1Q: []string{"n1"}, gw2: []wg.MemberStatus{active}},
			{what: "both acknowledged, gw-2 has 2 open", gw1: []wg.MemberStatus{out(0)}, gw1Q: []string{"n1"}, gw2: []wg.MemberStatus{out(2)}, gw2Q: []string{"n1"}},
			{what: "both at zero", advance: time.Second, gw1: []wg.MemberStatus{out(0)}, gw1Q: []string{"n1"}, gw2: []wg.MemberStatus{out(0)}, gw2Q: []string{"n1"}, done: true},
		}},
		{"drain timeout from the acknowledgement", []step{
			{what: "both acknowledged, connections open", gw1: []wg.MemberStatus{out(1)}, gw1Q: []string{"n1"}, gw2: []wg.MemberStatus{out(2)}, gw2Q: []string{"n1"}},
			{what: "9s later", advance: 9 * time.Second, gw1: []wg.MemberStatus{out(1)}, gw1Q: []string{"n1"}, gw2: []wg.MemberStatus{out(2)}, gw2Q: []string{"n1"}},
			{what: "10s after the acknowledgement", advance: time.Second, gw1: []wg.MemberStatus{out(1)}, gw1Q: []string{"n1"}, gw2: []wg.MemberStatus{out(1)}, gw2Q: []string{"n1"}, done: true},
		}},
		{"a gateway that does not know the node sends it nothing", []step{
			{what: "gw-2 has no key of n1", gw1: []wg.MemberStatus{out(0)}, gw1Q: []string{"n1"}, gw2: []wg.MemberStatus{}, done: true},
		}},
		{"a silent gateway holds the quiesce", []step{
			{what: "gw-2 stale", gw1: []wg.MemberStatus{out(0)}, gw1Q: []string{"n1"}, gw2: []wg.MemberStatus{out(0)}, gw2Q: []string{"n1"}, gw2Age: time.Minute},
			{what: "an hour later, gw-2 never reported again", advance: time.Hour, gw1: []wg.MemberStatus{out(0)}, gw1Q: []string{"n1"}},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			e := newEnv(t)
			ctx := context.Background()
			_, err := e.b.Ensure(ctx, e.lb, nil)
			g.Expect(err).NotTo(HaveOccurred())
			for _, s := range tc.steps {
				e.clk.t = e.clk.t.Add(s.advance)
				if s.gw1 != nil {
					e.report(t, "gw-1", 0, s.gw1Q, s.gw1...)
				}
				if s.gw2 != nil {
					e.report(t, "gw-2", s.gw2Age, s.gw2Q, s.gw2...)
				}
				qs, err := e.b.Quiesce(ctx, e.lb, m)
				g.Expect(err).NotTo(HaveOccurred(), s.what)
				g.Expect(qs.Done).To(Equal(s.done), s.what)
				if !s.done {
					g.Expect(qs.RequeueAfter).To(BeNumerically(">", 0), s.what)
				}
				g.Expect(e.quiescedList(t)).To(Equal([]string{"n1"}), "the gateways are asked: %s", s.what)
			}
		})
	}
}

// Restore takes the node off the list; a member without a Node has nothing to quiesce.
func TestRestoreAndNodeless(t *testing.T) {
	g := NewWithT(t)
	e := newEnv(t)
	ctx := context.Background()
	_, err := e.b.Ensure(ctx, e.lb, nil)
	g.Expect(err).NotTo(HaveOccurred())
	m := providers.Member{Name: "m1", NodeName: "n1", State: lbv1.TargetDisabling}
	_, err = e.b.Quiesce(ctx, e.lb, m)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(e.quiescedList(t)).To(Equal([]string{"n1"}))
	qs, err := e.b.Restore(ctx, e.lb, m)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(qs.Done).To(BeTrue())
	g.Expect(e.quiescedList(t)).To(BeEmpty())

	qs, err = e.b.Quiesce(ctx, e.lb, providers.Member{Name: "m2", State: lbv1.TargetRemoving})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(qs.Done).To(BeTrue())
	g.Expect(e.quiescedList(t)).To(BeEmpty())
}
