package election

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

// TestAnswersSilent: a member is silent after two probe intervals without an
// answer, and stays silent through one answer after that silence (a link up
// for a moment between two downs) until its answers span half a probe
// interval; a member never heard is not silent (nothing to miss).
func TestAnswersSilent(t *testing.T) {
	const probe = 100 * time.Millisecond
	t0 := time.Now()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	record := func(ms ...int) Answers {
		var a Answers
		for _, m := range ms {
			a = a.record(at(m), probe)
		}
		return a
	}
	for _, tc := range []struct {
		name    string
		answers Answers
		now     int
		silent  bool
	}{
		{"never heard", Answers{}, 1000, false},
		{"answering every round", record(0, 100, 200, 300), 350, false},
		{"one round missed", record(0, 100), 290, false},
		{"two rounds missed", record(0, 100), 300, true},
		{"one answer after a silence", record(0, 100, 350), 360, true},
		{"one answer after a silence, then silent again", record(0, 100, 350), 700, true},
		{"two answers in one moment after a silence", record(0, 100, 350, 351), 360, true},
		{"the next round answered too", record(0, 100, 350, 450), 460, false},
		{"first answers ever", record(500), 510, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			NewWithT(t).Expect(tc.answers.Silent(at(tc.now), probe)).To(Equal(tc.silent))
		})
	}
}
