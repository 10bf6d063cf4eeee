package observe

import (
	"testing"

	. "github.com/onsi/gomega"
)

func TestSpuriousClaims(t *testing.T) {
	leaving := func(ms int, m string) Event { return Event{At: at(ms), Type: EventLeaving, Machine: m} }
	back := func(ms int, m string) Event { return Event{At: at(ms), Type: EventBack, Machine: m} }
	for _, tc := range []struct {
		name    string
		holders []HolderSample
		events  []Event
		want    []string
	}{
		{name: "one holder throughout", holders: holders("n1", "n1", "n1")},
		{name: "the first claim has nobody beside it", holders: holders("", "", "n1", "n1")},
		{name: "a claim after a holder-less stretch is not beside anyone", holders: holders("n1", "", "n2")},
		{
			name: "a hand-over off a leaving holder", holders: holders("n1", "n1", "n1,n2", "n2"),
			events: []Event{leaving(5, "n1")},
		},
		{
			name: "a claim beside a live holder, the VIP goes back", holders: holders("n1", "n1,n2", "n1"),
			want: []string{"+0.010s n2 beside [n1]"},
		},
		{
			name: "a claim beside a live holder that then lets go", holders: holders("n1", "n1,n2", "n2"),
			want: []string{"+0.010s n2 beside [n1]"},
		},
		{
			name: "the leaving machine came back before the claim", holders: holders("n1", "n1", "n1", "n1,n2"),
			events: []Event{leaving(0, "n1"), back(15, "n1")},
			want:   []string{"+0.030s n2 beside [n1]"},
		},
		{
			name: "a leaving non-holder excuses nothing", holders: holders("n1", "n1,n3"),
			events: []Event{leaving(0, "n2")},
			want:   []string{"+0.010s n3 beside [n1]"},
		},
		{name: "a failed read is skipped, not a change", holders: holders("n1", "!", "n1")},
		{
			name: "each flicker counts", holders: holders("n1", "n1,n2", "n1", "n1,n3", "n1"),
			want: []string{"+0.010s n2 beside [n1]", "+0.030s n3 beside [n1]"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			r := Summarize(Input{Samples: every(Fresh, 0, 100, 10, true), Timeline: Timeline{Holders: tc.holders, Events: tc.events}})
			g.Expect(r.SpuriousClaims).NotTo(BeNil(), "counted whenever holders were sampled")
			if tc.want == nil {
				g.Expect(r.SpuriousClaims).To(BeEmpty())
			} else {
				g.Expect(r.SpuriousClaims).To(Equal(tc.want))
			}
		})
	}
}
