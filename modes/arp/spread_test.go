package arp

import (
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/go-logr/logr"
	. "github.com/onsi/gomega"

	"github.com/caplb/caplb/modes/dataplane"
)

// fakeSpreadKernel records what the spreader asks and answers from fields.
type fakeSpreadKernel struct {
	installs, removes int
	set               []netip.Addr
	counts            map[netip.Addr]int
	failInstall       error
}

func (k *fakeSpreadKernel) install(_ []netip.Addr, s dataplane.Spread) error {
	k.installs++
	if k.failInstall != nil {
		return k.failInstall
	}
	k.set = s.Backends
	return nil
}
func (k *fakeSpreadKernel) remove() error { k.removes++; k.set = nil; return nil }
func (k *fakeSpreadKernel) backends() ([]netip.Addr, error) {
	return k.set, nil
}
func (k *fakeSpreadKernel) count([]netip.Addr) (map[netip.Addr]int, error) { return k.counts, nil }

var (
	spreadVIPs = []netip.Addr{netip.MustParseAddr("10.0.0.100")}
	addrA      = netip.MustParseAddr("10.0.0.11")
	addrB      = netip.MustParseAddr("10.0.0.12")
	addrC      = netip.MustParseAddr("10.0.0.13")
)

func spreadTo(bs ...netip.Addr) *dataplane.Spread {
	return &dataplane.Spread{Ports: []uint16{6443}, Source: addrA, Backends: bs}
}

func TestSpreader(t *testing.T) {
	t0 := time.Unix(1000, 0)
	type step struct {
		at     time.Duration
		set    *dataplane.Spread
		unset  bool // call set(nil)
		counts map[netip.Addr]int
		fail   error
		// want after the step
		installs, removes int
		backends          []netip.Addr
		draining          map[netip.Addr]int
		err               string
		nilStatus         bool
	}
	cases := []struct {
		name  string
		steps []step
	}{
		{"install once, the same set again is no change", []step{
			{set: spreadTo(addrA, addrB, addrC), installs: 1, backends: []netip.Addr{addrA, addrB, addrC}},
			{at: time.Second, set: spreadTo(addrA, addrB, addrC), installs: 1, backends: []netip.Addr{addrA, addrB, addrC}},
		}},
		{"a member that leaves drains until a count after it left finds none", []step{
			{set: spreadTo(addrA, addrB, addrC), installs: 1, backends: []netip.Addr{addrA, addrB, addrC}},
			{at: time.Second, set: spreadTo(addrA, addrC), counts: map[netip.Addr]int{addrB: 2, addrA: 1}, installs: 2,
				backends: []netip.Addr{addrA, addrC}, draining: map[netip.Addr]int{addrB: 2}},
			{at: 2 * time.Second, counts: map[netip.Addr]int{addrA: 1}, installs: 2, backends: []netip.Addr{addrA, addrC}},
		}},
		{"back in the set before it drained: no longer draining", []step{
			{set: spreadTo(addrA, addrB), installs: 1, backends: []netip.Addr{addrA, addrB}},
			{at: time.Second, set: spreadTo(addrA), counts: map[netip.Addr]int{addrB: 1}, installs: 2,
				backends: []netip.Addr{addrA}, draining: map[netip.Addr]int{addrB: 1}},
			{at: 2 * time.Second, set: spreadTo(addrA, addrB), counts: map[netip.Addr]int{addrB: 1}, installs: 3,
				backends: []netip.Addr{addrA, addrB}},
		}},
		{"nobody else eligible: the table goes, the others drain, this node is not listed", []step{
			{set: spreadTo(addrA, addrB), installs: 1, backends: []netip.Addr{addrA, addrB}},
			{at: time.Second, unset: true, counts: map[netip.Addr]int{addrA: 3, addrB: 1}, installs: 1, removes: 1,
				draining: map[netip.Addr]int{addrB: 1}},
			{at: 2 * time.Second, unset: true, counts: map[netip.Addr]int{addrA: 3}, installs: 1, removes: 1, nilStatus: true},
		}},
		{"a refused install is reported and retried by the next set", []step{
			{set: spreadTo(addrA, addrB), fail: errors.New("no forwarding"), installs: 1, err: "no forwarding"},
			{at: time.Second, set: spreadTo(addrA, addrB), installs: 2, backends: []netip.Addr{addrA, addrB}},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			k := &fakeSpreadKernel{}
			now := t0
			s := newSpreader(k, logr.Discard(), func() time.Time { return now })
			for i, st := range tc.steps {
				now = t0.Add(st.at)
				k.counts, k.failInstall = st.counts, st.fail
				if st.set != nil || st.unset {
					s.set(spreadVIPs, st.set)
				}
				status := s.status()
				g.Expect(k.installs).To(Equal(st.installs), "step %d: installs", i)
				g.Expect(k.removes).To(Equal(st.removes), "step %d: removes", i)
				if st.nilStatus {
					g.Expect(status).To(BeNil(), "step %d", i)
					continue
				}
				g.Expect(status).NotTo(BeNil(), "step %d", i)
				var bs []netip.Addr
				for _, b := range status.Backends {
					bs = append(bs, b.Address)
				}
				g.Expect(bs).To(Equal(st.backends), "step %d: backends", i)
				dr := map[netip.Addr]int{}
				for _, d := range status.Draining {
					dr[d.Address] = d.Connections
				}
				if st.draining == nil {
					st.draining = map[netip.Addr]int{}
				}
				g.Expect(dr).To(Equal(st.draining), "step %d: draining", i)
				g.Expect(status.Error).To(ContainSubstring(st.err), "step %d: error", i)
				if st.err == "" {
					g.Expect(status.Error).To(BeEmpty(), "step %d: error", i)
				}
			}
			s.release()
			g.Expect(s.status()).To(BeNil(), "released: nothing spread or draining")
		})
	}
}
