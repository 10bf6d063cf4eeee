//go:build linux

package realcp

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

func TestCountHolders(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	samples := []HolderSample{
		{At: at(0), Holders: []string{"cp-1"}},
		{At: at(50), Holders: []string{"cp-1", "cp-2"}},
		{At: at(100)},
		{At: at(150), Holders: []string{"cp-2"}},
		{At: at(200), Holders: []string{"cp-2"}},
	}
	for _, tc := range []struct {
		name     string
		from, to int
		want     HolderCounts
	}{
		{"every sample", 0, 250, HolderCounts{Samples: 5, NoOwner: 1, TwoOwners: 1}},
		{"from is inclusive, to exclusive", 50, 150, HolderCounts{Samples: 2, NoOwner: 1, TwoOwners: 1}},
		{"one owner throughout", 150, 250, HolderCounts{Samples: 2}},
		{"nothing in the stretch", 300, 400, HolderCounts{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			NewWithT(t).Expect(countHolders(samples, at(tc.from), at(tc.to))).To(Equal(tc.want))
		})
	}
	NewWithT(t).Expect(HolderCounts{Samples: 2, NoOwner: 1}.Add(HolderCounts{Samples: 3, TwoOwners: 2})).
		To(Equal(HolderCounts{Samples: 5, NoOwner: 1, TwoOwners: 2}))
}
