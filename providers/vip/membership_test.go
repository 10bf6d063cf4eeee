package vip

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	agentv1 "github.com/caplb/caplb/api/agent/v1alpha1"
	lbv1 "github.com/caplb/caplb/api/v1alpha1"
	"github.com/caplb/caplb/providers"
)

func mc(names ...string) []agentv1.MemberConfig {
	out := []agentv1.MemberConfig{}
	for i, n := range names {
		out = append(out, agentv1.MemberConfig{Name: n, Address: "10.0.0." + string(rune('1'+i))})
	}
	return out
}

func ms(v int64, names ...string) agentv1.Membership {
	return agentv1.Membership{Version: v, Members: mc(names...)}
}

// report is a fresh report on a Ready Node.
func report(version int64, member, inDP, holding, quiesced bool) agentView {
	return agentView{nodeFound: true, nodeReady: true, reported: true, fresh: true, status: agentv1.AgentStatus{
		MembershipVersion: version, Member: member, InDataPlane: inDP, Holding: holding, Quiesced: quiesced}}
}

func TestNextOneChangeAtATime(t *testing.T) {
	for _, tc := range []struct {
		name       string
		cur        agentv1.Membership
		want       []agentv1.MemberConfig
		wantNames  []string
		wantChange string
		changed    bool
	}{
		{"bootstrap adds the first", ms(0), mc("a"), []string{"a"}, "add a", true},
		{"adds one of two", ms(1, "a"), mc("a", "b", "c"), []string{"a", "b"}, "add b", true},
		{"addition before removal (rollout)", ms(3, "a", "b", "c"), mc("b", "c", "d"), []string{"a", "b", "c", "d"}, "add d", true},
		{"removes one", ms(4, "a", "b", "c", "d"), mc("b", "c", "d"), []string{"b", "c", "d"}, "remove a", true},
		{"in sync", ms(2, "a", "b"), mc("a", "b"), []string{"a", "b"}, "", false},
		{"keeps preference order", ms(2, "b", "a"), mc("a", "b", "c"), []string{"b", "a", "c"}, "add c", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			// Addresses come from mc by position; align want's addresses with cur's.
			addr := map[string]string{}
			for _, m := range tc.cur.Members {
				addr[m.Name] = m.Address
			}
			for i := range tc.want {
				if a, ok := addr[tc.want[i].Name]; ok {
					tc.want[i].Address = a
				} else {
					tc.want[i].Address = "10.0.1." + string(rune('1'+i))
				}
			}
			nm, ch, ok := next(tc.cur, tc.want)
			g.Expect(ok).To(Equal(tc.changed))
			names := []string{}
			for _, m := range nm.Members {
				names = append(names, m.Name)
			}
			g.Expect(names).To(Equal(tc.wantNames))
			if ok {
				g.Expect(nm.Version).To(Equal(tc.cur.Version + 1))
				g.Expect(ch.String()).To(Equal(tc.wantChange))
				g.Expect(nm.Validate()).To(Succeed())
			}
		})
	}
}

func TestNextReaddress(t *testing.T) {
	g := NewWithT(t)
	cur := ms(3, "a", "b")
	want := []agentv1.MemberConfig{{Name: "a", Address: "10.9.9.9"}, cur.Members[1]}
	nm, ch, ok := next(cur, want)
	g.Expect(ok).To(BeTrue())
	g.Expect(ch.String()).To(Equal("readdress a"))
	g.Expect(nm.Members).To(Equal(want))
	g.Expect(nm.Version).To(Equal(int64(4)))
}

func TestAcknowledgedNeedsAMajority(t *testing.T) {
	for _, tc := range []struct {
		name string
		m    agentv1.Membership
		vs   views
		want bool
	}{
		{"bootstrap needs nobody", ms(0), views{}, true},
		{"single member acked", ms(1, "a"), views{"a": report(1, true, true, true, false)}, true},
		{"single member lagging", ms(1, "a"), views{"a": report(0, false, false, true, false)}, false},
		{"2 of 3", ms(5, "a", "b", "c"), views{"a": report(5, true, true, true, false), "b": report(6, true, true, false, false)}, true},
		{"1 of 3", ms(5, "a", "b", "c"), views{"a": report(5, true, true, true, false), "b": report(4, true, true, false, false)}, false},
		{"2 of 4 is not a majority", ms(5, "a", "b", "c", "d"), views{"a": report(5, true, true, true, false), "b": report(5, true, true, false, false)}, false},
		{"stale reports still count (versions never go back)", ms(2, "a"), views{"a": {nodeFound: true, reported: true, status: agentv1.AgentStatus{MembershipVersion: 2}}}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			NewWithT(t).Expect(tc.vs.acknowledged(tc.m)).To(Equal(tc.want))
		})
	}
}

func TestQuiescedNeverOnSilence(t *testing.T) {
	m := ms(3, "a", "b", "c")
	dead := agentView{nodeFound: true, nodeReady: false, reported: true, status: agentv1.AgentStatus{MembershipVersion: 3, Holding: true}}
	for _, tc := range []struct {
		name string
		vs   views
		want bool
	}{
		{"agent reports quiesced", views{"a": report(3, true, false, false, true)}, true},
		{"agent still holding", views{"a": report(3, true, true, true, false)}, false},
		{"no report", views{"a": {nodeFound: true, nodeReady: true}}, false},
		{"stale quiesced report does not count", views{"a": {nodeFound: true, nodeReady: true, reported: true, status: agentv1.AgentStatus{Quiesced: true}}}, false},
		{"dead, nobody else holds", views{"a": dead, "b": report(3, true, true, false, false)}, false},
		{"dead, another holds (scenario 13)", views{"a": dead, "b": report(3, true, true, true, false)}, true},
		{"dead, another holds an older version", views{"a": dead, "b": report(2, true, true, true, false)}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ok, why := tc.vs.quiesced(m, "a")
			NewWithT(t).Expect(ok).To(Equal(tc.want), why)
		})
	}
}

func TestDesiredMakeBeforeBreak(t *testing.T) {
	g := NewWithT(t)
	cur := ms(3, "a", "b", "c")
	cands := []candidate{
		{node: "a", address: "10.0.0.1", state: lbv1.TargetRemoving},
		{node: "b", address: "10.0.0.2", state: lbv1.TargetActive},
		{node: "c", address: "10.0.0.3", state: lbv1.TargetActive},
		{node: "d", address: "10.0.0.4", state: lbv1.TargetAdding},
		{node: "e", address: "10.0.0.5", state: lbv1.TargetAdding},
	}
	vs := views{
		"a": report(3, true, true, true, false), // still holds: stays a member
		"b": report(3, true, true, false, false),
		"c": report(3, true, true, false, false),
		"d": report(3, false, false, false, false), // reported: may join
		// e never reported: may not join
	}
	names := func(ms []agentv1.MemberConfig) []string {
		out := []string{}
		for _, m := range ms {
			out = append(out, m.Name)
		}
		return out
	}
	g.Expect(names(desired(cur, cands, vs))).To(Equal([]string{"a", "b", "c", "d"}))
	vs["a"] = report(3, true, false, false, true)
	g.Expect(names(desired(cur, cands, vs))).To(Equal([]string{"b", "c", "d"}))
	// A Ready Node with a dead agent report does not join.
	vs["e"] = agentView{nodeFound: true, nodeReady: false, reported: true}
	g.Expect(names(desired(cur, cands, vs))).NotTo(ContainElement("e"))
}

func TestInRotationOnlyOnReport(t *testing.T) {
	g := NewWithT(t)
	m := ms(2, "a", "b")
	vs := views{
		"a": report(2, true, true, true, false),
		"b": report(1, true, true, false, false), // older version
		"c": report(2, false, false, false, false),
	}
	g.Expect(vs.inRotation(m, "a")).To(BeTrue())
	g.Expect(vs.inRotation(m, "b")).To(BeFalse())
	g.Expect(vs.inRotation(m, "c")).To(BeFalse())
	stale := vs["a"]
	stale.fresh = false
	vs["a"] = stale
	g.Expect(vs.inRotation(m, "a")).To(BeFalse())
}

func TestViewOfStaleness(t *testing.T) {
	g := NewWithT(t)
	now := time.Date(2026, 11, 23, 6, 0, 0, 0, time.UTC)
	st := agentv1.AgentStatus{MembershipVersion: 1, UpdatedAt: metav1.NewMicroTime(now.Add(-10 * time.Second))}
	g.Expect(viewOf(true, true, st.String(), now, 45*time.Second).fresh).To(BeTrue())
	g.Expect(viewOf(true, true, st.String(), now, 5*time.Second).fresh).To(BeFalse())
	g.Expect(viewOf(true, true, "{not json", now, time.Minute).reported).To(BeFalse())
}

func TestCandidatesNeedNodeAndIP(t *testing.T) {
	g := NewWithT(t)
	cs := candidates([]providers.Member{
		{Name: "m1", NodeName: "n1", Address: "10.0.0.1"},
		{Name: "m2", Address: "10.0.0.2"},                     // no Node yet
		{Name: "m3", NodeName: "n3", Address: "cp3.internal"}, // DNS only
		{Name: "m4", NodeName: "n4", Address: "cp4.internal", Addresses: map[string]string{"ExternalIP": "192.0.2.4"}},
	})
	g.Expect(cs).To(Equal([]candidate{{node: "n1", address: "10.0.0.1"}, {node: "n4", address: "192.0.2.4"}}))
}
