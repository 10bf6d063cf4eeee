package clients

import (
	"errors"
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

// A successful write is delivered, coalesced by a relist, or lost; the classification is what
// the benchmarks report, so each case must be told apart.
func TestMissed(t *testing.T) {
	t0 := time.Now()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	w := write{key: "k", seq: 5, at: at(100)}
	for _, tc := range []struct {
		name  string
		seen  []observation
		lists []time.Time
		want  missedKind
	}{
		{"delivered", []observation{{4, at(50)}, {5, at(120)}}, []time.Time{at(0)}, delivered},
		{"delivered out of order in the record", []observation{{6, at(200)}, {5, at(120)}}, []time.Time{at(0)}, delivered},
		{"skipped with no relist: lost", []observation{{4, at(50)}, {6, at(200)}}, []time.Time{at(0)}, missedLost},
		{"never seen, nothing later: lost", []observation{{4, at(50)}}, []time.Time{at(0)}, missedLost},
		{"a relist before the next value coalesced it", []observation{{4, at(50)}, {6, at(300)}}, []time.Time{at(0), at(250)}, missedAcrossRelist},
		{"the first list does not count", []observation{{6, at(300)}}, []time.Time{at(150)}, missedLost},
		{"a relist after the next value explains nothing", []observation{{4, at(50)}, {6, at(200)}}, []time.Time{at(0), at(400)}, missedLost},
	} {
		t.Run(tc.name, func(t *testing.T) {
			NewWithT(t).Expect(missed(w, tc.seen, tc.lists)).To(Equal(tc.want))
		})
	}
}

// lastSuccess ignores failed writes: a value the writer never got a success for is not owed.
func TestLastSuccess(t *testing.T) {
	got := lastSuccess([]write{{key: "a", seq: 1}, {key: "a", seq: 2, err: errors.New("timeout")}, {key: "b", seq: 3}})
	NewWithT(t).Expect(got).To(Equal(map[string]int{"a": 1, "b": 3}))
}

// The first write that succeeded after a moment (etcd's quorum back): what the benchmark reports
// as the time until writes succeed again.
func TestFirstSuccessAfter(t *testing.T) {
	t0 := time.Now()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	fail := errors.New("timeout")
	writes := []write{{at: at(0)}, {at: at(5000), err: fail}, {at: at(10000), err: fail}, {at: at(12500)}, {at: at(12600)}}
	for _, tc := range []struct {
		name  string
		after int
		want  time.Duration
	}{
		{"failures after the moment do not count", 1000, 11500 * time.Millisecond},
		{"a success right after", 12550, 50 * time.Millisecond},
		{"nothing succeeded after", 13000, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			NewWithT(t).Expect(firstSuccessAfter(writes, at(tc.after))).To(Equal(tc.want))
		})
	}
}
