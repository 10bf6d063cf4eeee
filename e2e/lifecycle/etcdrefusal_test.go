//go:build linux

package lifecycle

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/caplb/caplb/e2e/lifecycle/observe"
)

func TestUnexplainedEtcdRefusals(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 9, 19, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	samples := func(secs ...float64) []observe.EtcdSample {
		var out []observe.EtcdSample
		for _, s := range secs {
			out = append(out, observe.EtcdSample{At: at(s)})
		}
		return out
	}
	for _, tc := range []struct {
		name    string
		refused []time.Time
		etcd    []observe.EtcdSample
		want    []time.Time
	}{
		{"no refusal", nil, samples(0, 10), nil},
		// ci12: edge-cp-2 removed at 16.8 s, the write refused at 23.4 s.
		{"a member removed 6.6 s before", []time.Time{at(23.4)}, samples(0, 16.8), nil},
		{"the change sampled just after the refusal", []time.Time{at(23.4)}, samples(0, 24.5), nil},
		{"the first sample is the start, not a change", []time.Time{at(3)}, samples(0), []time.Time{at(3)}},
		{"a change too long before", []time.Time{at(30)}, samples(0, 16.8), []time.Time{at(30)}},
		{"a change too long after", []time.Time{at(10)}, samples(0, 12.5), []time.Time{at(10)}},
		{"one change explains one refusal", []time.Time{at(20), at(21)}, samples(0, 15), []time.Time{at(21)}},
		{"two changes, two refusals", []time.Time{at(20), at(21)}, samples(0, 15, 16), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			NewWithT(t).Expect(unexplainedEtcdRefusals(tc.refused, tc.etcd)).To(Equal(tc.want))
		})
	}
}
