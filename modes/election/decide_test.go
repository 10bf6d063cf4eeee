package election

import (
	"testing"

	. "github.com/onsi/gomega"
)

func TestDecide(t *testing.T) {
	e := Meta{Eligible: true}
	eh := Meta{Eligible: true, Holding: true}
	qh := Meta{Holding: true, Quiescing: true} // quiescing holder: not eligible
	m := func(name string, alive bool, meta Meta) MemberView {
		return MemberView{Name: name, Alive: alive, Meta: meta}
	}
	cases := []struct {
		name       string
		view       View
		owner      string
		holds      bool
		quorum     bool
		seen       int
		reasonPart string
	}{
		{"most preferred eligible when nobody holds",
			View{Self: "b", Members: []MemberView{m("a", true, e), m("b", true, e), m("c", true, e)}}, "a", false, true, 3, "most preferred"},
		{"ineligible first member is skipped",
			View{Self: "b", Members: []MemberView{m("a", true, Meta{}), m("b", true, e), m("c", true, e)}}, "b", false, true, 3, "most preferred"},
		{"sticky: an eligible holder keeps the VIP over a more preferred member",
			View{Self: "a", Members: []MemberView{m("a", true, e), m("b", true, e), m("c", true, eh)}}, "c", true, true, 3, "already holds"},
		{"two holders: the most preferred wins",
			View{Self: "a", Members: []MemberView{m("a", true, e), m("b", true, eh), m("c", true, eh)}}, "b", true, true, 3, "already holds"},
		{"quiescing holder does not count: the next eligible is the owner",
			View{Self: "b", Members: []MemberView{m("a", true, qh), m("b", true, e), m("c", true, e)}}, "b", false, true, 3, "most preferred"},
		{"dead holder does not count",
			View{Self: "b", Members: []MemberView{m("a", false, eh), m("b", true, e), m("c", true, e)}}, "b", false, true, 2, "most preferred"},
		{"minority: no quorum",
			View{Self: "c", Members: []MemberView{m("a", false, eh), m("b", false, e), m("c", true, e)}}, "c", false, false, 1, "no quorum: 1 of 3"},
		{"self counts as seen even without gossip",
			View{Self: "a", Members: []MemberView{m("a", false, e)}}, "a", false, true, 1, "most preferred"},
		{"nobody eligible",
			View{Self: "a", Members: []MemberView{m("a", true, Meta{}), m("b", true, Meta{})}}, "", false, true, 2, "no member is eligible"},
		{"two of four is not a majority",
			View{Self: "a", Members: []MemberView{m("a", true, e), m("b", true, e), m("c", false, e), m("d", false, e)}}, "a", false, false, 2, "no quorum"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			d := Decide(tc.view)
			g.Expect(d.Owner).To(Equal(tc.owner))
			g.Expect(d.OwnerHolds).To(Equal(tc.holds))
			g.Expect(d.Quorum).To(Equal(tc.quorum))
			g.Expect(d.Seen).To(Equal(tc.seen))
			g.Expect(d.Reason).To(ContainSubstring(tc.reasonPart))
		})
	}
}

func TestMajority(t *testing.T) {
	g := NewWithT(t)
	for n, want := range map[int]int{1: 1, 2: 2, 3: 2, 4: 3, 5: 3, 7: 4} {
		g.Expect(Majority(n)).To(Equal(want), "n=%d", n)
	}
}
