//go:build linux

package lifecycle

import (
	"strings"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/caplb/caplb/e2e/lifecycle/observe"
	"github.com/caplb/caplb/e2e/lifecycle/observe/clients"
)

// Goals names every goal a run missed; TestLifecycleReal* assert all but the one that begins with
// MaxGapMiss, so behind BGP too a VIP without an announcing member fails the test.
func TestGoals(t *testing.T) {
	ms := func(v float64) *float64 { return &v }
	good := clients.Result{Writes: 900, StoreMatches: true}
	for _, tc := range []struct {
		name    string
		backend Backend
		r       observe.Result
		c       *clients.Result // default good
		want    []string        // prefixes of the misses, in order
	}{
		{"all met", BGP, observe.Result{MaxGapMS: 150, HolderLessMSMax: ms(0)}, nil, nil},
		{"only the gap", ARP, observe.Result{MaxGapMS: 340, HolderLessMSMax: ms(0)}, nil, []string{MaxGapMiss}},
		{"BGP without an announcer", BGP, observe.Result{MaxGapMS: 150, HolderLessMSMax: ms(250)}, nil, []string{"the VIP had no holder"}},
		{"holders never sampled", BGP, observe.Result{MaxGapMS: 150}, nil, []string{"the VIP's holders were never sampled"}},
		{"ARP spurious claim", ARP, observe.Result{MaxGapMS: 150, HolderLessMSMax: ms(0), SpuriousClaims: []string{"+1s n2 beside [n1]"}},
			nil, []string{"1 spurious claims"}},
		{"a failed write", BGP, observe.Result{MaxGapMS: 150, HolderLessMSMax: ms(0)},
			&clients.Result{Writes: 900, StoreMatches: true, FailedWrites: 1, FirstFailure: "connection reset by peer"}, []string{"1 of 900 client-go writes failed"}},
		{"etcd refusals a membership change explains", BGP, observe.Result{MaxGapMS: 150, HolderLessMSMax: ms(0)},
			&clients.Result{Writes: 900, StoreMatches: true, EtcdRefusals: 2}, nil},
		{"an etcd refusal nothing explains", BGP, observe.Result{MaxGapMS: 150, HolderLessMSMax: ms(0)},
			&clients.Result{Writes: 900, StoreMatches: true, EtcdRefusals: 2, EtcdRefusalsUnexplained: 1}, []string{"1 of 2 etcd refusals came with no etcd membership change"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			c := good
			if tc.c != nil {
				c = *tc.c
			}
			missed := Goals(tc.backend, Real, tc.r, &c)
			g.Expect(missed).To(HaveLen(len(tc.want)), "%q", missed)
			for i, p := range tc.want {
				g.Expect(strings.HasPrefix(missed[i], p)).To(BeTrue(), "%q begins with %q", missed[i], p)
			}
		})
	}
}
