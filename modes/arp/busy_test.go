package arp

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

func TestBusyTracker(t *testing.T) {
	at := func(ms int) time.Time { return time.Unix(0, 0).Add(time.Duration(ms) * time.Millisecond) }
	type round struct {
		at    int // ms
		conns []connSample
		want  int
	}
	conn := func(key string, received uint64, sinceMS int) connSample {
		return connSample{key: key, received: received, sinceData: time.Duration(sinceMS) * time.Millisecond}
	}
	cases := []struct {
		name   string
		rounds []round
	}{
		{name: "seen for less than a window: busy when its client sent anything within it", rounds: []round{
			{at: 0, conns: []connSample{conn("recent", 10, 5), conn("idle", 10, 3000)}, want: 1},
			{at: 500, conns: []connSample{conn("recent", 10, 505), conn("idle", 10, 3500)}, want: 1},
		}},
		{name: "a writer: a kilobyte or more in the last second", rounds: []round{
			{at: 0, conns: []connSample{conn("w", 0, 0)}, want: 1},
			{at: 1000, conns: []connSample{conn("w", 3000, 10)}, want: 1},
			{at: 1100, conns: []connSample{conn("w", 3100, 10)}, want: 1},
		}},
		{name: "a watch left behind: flow-control updates only, not busy", rounds: []round{
			{at: 0, conns: []connSample{conn("watch", 5000, 50)}, want: 1},
			{at: 1000, conns: []connSample{conn("watch", 5100, 20)}, want: 0},
			{at: 2000, conns: []connSample{conn("watch", 5200, 20)}, want: 0},
		}},
		{name: "a writer that moved: busy until its last requests are a second old", rounds: []round{
			{at: 0, conns: []connSample{conn("w", 0, 0)}, want: 1},
			{at: 1000, conns: []connSample{conn("w", 5000, 0)}, want: 1},
			{at: 1500, conns: []connSample{conn("w", 6500, 500)}, want: 1},
			{at: 2100, conns: []connSample{conn("w", 6500, 1100)}, want: 1},
			{at: 2600, conns: []connSample{conn("w", 6500, 1600)}, want: 0},
		}},
		{name: "a connection gone is forgotten; one that comes back starts afresh", rounds: []round{
			{at: 0, conns: []connSample{conn("a", 0, 0)}, want: 1},
			{at: 1000, conns: nil, want: 0},
			{at: 2000, conns: []connSample{conn("a", 9000, 2000)}, want: 0},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			var b busyTracker
			for i, r := range tc.rounds {
				g.Expect(b.due(at(r.at))).To(BeTrue(), "round %d is due", i)
				g.Expect(b.observe(at(r.at), r.conns)).To(Equal(r.want), "round %d at %d ms", i, r.at)
				g.Expect(b.count()).To(Equal(r.want))
			}
		})
	}
}

func TestBusyTrackerSamplesAtMostEvery100ms(t *testing.T) {
	g := NewWithT(t)
	var b busyTracker
	t0 := time.Unix(0, 0)
	g.Expect(b.due(t0)).To(BeTrue())
	b.observe(t0, []connSample{{key: "a", sinceData: 0}})
	g.Expect(b.due(t0.Add(50 * time.Millisecond))).To(BeFalse())
	g.Expect(b.due(t0.Add(busySampleEvery))).To(BeTrue())
}
