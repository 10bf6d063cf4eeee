package flows

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

// TestSettled: a connection counts as quiet only once its byte counts stayed the same for
// settleFor; any byte either way starts the wait again (a response's DATA after its HEADERS).
func TestSettled(t *testing.T) {
	t0 := time.Unix(1000, 0)
	type sample struct {
		at             time.Duration
		received, sent uint64
		want           bool
	}
	cases := []struct {
		name    string
		samples []sample
	}{
		{"first sight is not settled", []sample{{0, 10, 20, false}}},
		{"unchanged for settleFor", []sample{{0, 10, 20, false}, {2 * time.Millisecond, 10, 20, false}, {settleFor, 10, 20, true}}},
		{"HEADERS then DATA: sent grows", []sample{
			{0, 10, 20, false}, {4 * time.Millisecond, 10, 60, false}, {settleFor + time.Millisecond, 10, 60, false},
			{4*time.Millisecond + settleFor, 10, 60, true}}},
		{"a new request: received grows", []sample{{0, 10, 20, false}, {settleFor, 90, 20, false}, {2 * settleFor, 90, 20, true}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g := NewWithT(t)
			var s settler
			for i, x := range c.samples {
				g.Expect(s.settled(7, x.received, x.sent, t0.Add(x.at))).To(Equal(x.want), "sample %d", i)
			}
			var other settler
			g.Expect(other.settled(8, 10, 20, t0)).To(BeFalse(), "each connection on its own")
		})
	}
}
