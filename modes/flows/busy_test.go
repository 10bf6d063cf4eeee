package flows

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

func TestBusyTracker(t *testing.T) {
	at := func(ms int) time.Time { return time.Unix(0, 0).Add(time.Duration(ms) * time.Millisecond) }
	type round struct {
		at    int // ms
		conns []ConnSample
		want  int
	}
	conn := func(key string, received uint64, sinceMS int) ConnSample {
		return ConnSample{Key: key, Received: received, SinceData: time.Duration(sinceMS) * time.Millisecond}
	}
	cases := []struct {
		name   string
		rounds []round
	}{
		{name: "seen for less than a window: busy when its client sent anything within it", rounds: []round{
			{at: 0, conns: []ConnSample{conn("recent", 10, 5), conn("idle", 10, 3000)}, want: 1},
			{at: 1500, conns: []ConnSample{conn("recent", 10, 1505), conn("idle", 10, 4500)}, want: 1},
		}},
		{name: "a writer: 512 bytes or more in the last two seconds (one ConfigMap PUT a second)", rounds: []round{
			{at: 0, conns: []ConnSample{conn("w", 0, 0)}, want: 1},
			{at: 2000, conns: []ConnSample{conn("w", 700, 10)}, want: 1},
			{at: 2100, conns: []ConnSample{conn("w", 700, 110)}, want: 1},
		}},
		{name: "a Lease renewal every 2 s alone: not busy", rounds: []round{
			{at: 0, conns: []ConnSample{conn("lease", 0, 500)}, want: 1},
			{at: 2000, conns: []ConnSample{conn("lease", 350, 10)}, want: 0},
		}},
		{name: "a watch left behind: flow-control updates only, not busy", rounds: []round{
			{at: 0, conns: []ConnSample{conn("watch", 5000, 50)}, want: 1},
			{at: 2000, conns: []ConnSample{conn("watch", 5100, 20)}, want: 0},
			{at: 4000, conns: []ConnSample{conn("watch", 5200, 20)}, want: 0},
		}},
		{name: "a writer that moved: busy until its last requests are two seconds old", rounds: []round{
			{at: 0, conns: []ConnSample{conn("w", 0, 0)}, want: 1},
			{at: 2000, conns: []ConnSample{conn("w", 5000, 0)}, want: 1},
			{at: 3000, conns: []ConnSample{conn("w", 6000, 1000)}, want: 1},
			{at: 4100, conns: []ConnSample{conn("w", 6000, 2100)}, want: 1},
			{at: 5100, conns: []ConnSample{conn("w", 6000, 3100)}, want: 0},
		}},
		{name: "a connection gone is forgotten; one that comes back starts afresh", rounds: []round{
			{at: 0, conns: []ConnSample{conn("a", 0, 0)}, want: 1},
			{at: 2000, conns: nil, want: 0},
			{at: 4000, conns: []ConnSample{conn("a", 9000, 4000)}, want: 0},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			var b BusyTracker
			for i, r := range tc.rounds {
				g.Expect(b.Due(at(r.at))).To(BeTrue(), "round %d is due", i)
				g.Expect(b.Observe(at(r.at), r.conns)).To(Equal(r.want), "round %d at %d ms", i, r.at)
				g.Expect(b.Count()).To(Equal(r.want))
			}
		})
	}
}

func TestBusyTrackerSamplesAtMostEvery100ms(t *testing.T) {
	g := NewWithT(t)
	var b BusyTracker
	t0 := time.Unix(0, 0)
	g.Expect(b.Due(t0)).To(BeTrue())
	b.Observe(t0, []ConnSample{{Key: "a", SinceData: 0}})
	g.Expect(b.Due(t0.Add(50 * time.Millisecond))).To(BeFalse())
	g.Expect(b.Due(t0.Add(BusySampleEvery))).To(BeTrue())
}
