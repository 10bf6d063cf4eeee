package flows

import (
	"net/netip"
	"testing"

	. "github.com/onsi/gomega"
)

// TestSelectFlows: one client address cannot take the others' places in the shared list, and
// the oldest connections keep theirs.
func TestSelectFlows(t *testing.T) {
	svc := netip.MustParseAddrPort("10.9.9.9:6443")
	greedy, other := netip.MustParseAddr("10.20.0.2"), netip.MustParseAddr("10.20.0.3")
	fl := func(a netip.Addr, port int) Flow {
		return Flow{Client: netip.AddrPortFrom(a, uint16(port)), Service: svc}
	}
	many := func(a netip.Addr, n int, rank0 uint64) []aged {
		out := make([]aged, n)
		for i := range out {
			out[i] = aged{flow: fl(a, i), rank: rank0 + uint64(i)}
		}
		return out
	}
	for _, tc := range []struct {
		name          string
		cands         []aged
		max, per      int
		wantLen       int
		wantCut       int
		wantKept      []Flow
		wantDroppedOf []Flow
	}{
		{
			name:     "one client's 65,536 flows do not push another's out",
			cands:    append(many(greedy, MaxFlows, 10), aged{flow: fl(other, 5000), rank: 1 << 40}),
			max:      MaxFlows,
			per:      PerClient,
			wantLen:  PerClient + 1,
			wantCut:  MaxFlows - PerClient,
			wantKept: []Flow{fl(other, 5000), fl(greedy, 0)},
		},
		{
			name:          "the oldest are kept when the list is full",
			cands:         []aged{{fl(greedy, 3), 30}, {fl(other, 1), 10}, {fl(greedy, 2), 20}},
			max:           2,
			per:           2,
			wantLen:       2,
			wantCut:       1,
			wantKept:      []Flow{fl(other, 1), fl(greedy, 2)},
			wantDroppedOf: []Flow{fl(greedy, 3)},
		},
		{
			name:          "an orphaned socket ranks last",
			cands:         []aged{{fl(greedy, 1), rankOfInode(0)}, {fl(other, 2), rankOfInode(99)}},
			max:           1,
			per:           1,
			wantLen:       1,
			wantCut:       1,
			wantKept:      []Flow{fl(other, 2)},
			wantDroppedOf: []Flow{fl(greedy, 1)},
		},
		{
			name:     "under the bounds nothing is cut, and the list is sorted",
			cands:    []aged{{fl(other, 2), 1}, {fl(greedy, 1), 2}},
			max:      MaxFlows,
			per:      PerClient,
			wantLen:  2,
			wantKept: []Flow{fl(greedy, 1), fl(other, 2)},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			got := selectFlows(tc.cands, tc.max, tc.per)
			g.Expect(got.Flows).To(HaveLen(tc.wantLen))
			g.Expect(got.Cut).To(Equal(tc.wantCut))
			g.Expect(got.Flows).To(ContainElements(tc.wantKept))
			for _, f := range tc.wantDroppedOf {
				g.Expect(got.Flows).NotTo(ContainElement(f))
			}
			g.Expect(got.Flows).To(Equal(sortFlows(append([]Flow(nil), got.Flows...))), "sorted by service, then client")
			shared, err := Decode(Encode(got.Flows))
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(shared).To(ContainElements(tc.wantKept), "and shared so")
		})
	}
}
