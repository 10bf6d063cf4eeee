package observe

import (
	"encoding/json"
	"errors"
	"sort"
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

var t0 = time.Date(2026, 11, 23, 8, 0, 0, 0, time.UTC)

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

// every returns samples of kind every step ms in [from, to], ok or not.
func every(kind Kind, from, to, step int, ok bool) []Sample {
	var out []Sample
	for ms := from; ms <= to; ms += step {
		s := Sample{At: at(ms), Kind: kind, OK: ok, Node: "n1"}
		if !ok {
			s.Node, s.Err = "", "connection refused"
		}
		out = append(out, s)
	}
	return out
}

func lines(from, to, step int) []Sample {
	out := every(Stream, from, to, step, true)
	for i := range out {
		out[i].Event = true
	}
	return out
}

func cat(ss ...[]Sample) []Sample {
	var out []Sample
	for _, s := range ss {
		out = append(out, s...)
	}
	return out
}

func TestSummarizeClient(t *testing.T) {
	for _, tc := range []struct {
		name               string
		samples            []Sample
		from, to           time.Time
		requests, failed   int
		streamLines        int
		maxGap             float64
		gapByKind          map[Kind]float64
		failedByKind       map[Kind]int
		firstErrorsPerKind int
		answeredByN1       int
	}{
		{
			name: "steady", samples: every(Fresh, 0, 100, 10, true),
			requests: 11, maxGap: 10, gapByKind: map[Kind]float64{Fresh: 10}, answeredByN1: 11,
		},
		{
			name:     "failures in the middle",
			samples:  cat(every(Fresh, 0, 40, 10, true), every(Fresh, 50, 150, 10, false), every(Fresh, 160, 200, 10, true)),
			requests: 21, failed: 11, maxGap: 120, failedByKind: map[Kind]int{Fresh: 11}, firstErrorsPerKind: 3, answeredByN1: 10,
		},
		{
			name:     "leading failures count from the window's start",
			samples:  cat(every(Kept, 0, 90, 10, false), every(Kept, 100, 200, 10, true)),
			requests: 21, failed: 10, maxGap: 100, failedByKind: map[Kind]int{Kept: 10}, firstErrorsPerKind: 3, answeredByN1: 11,
		},
		{
			name:     "trailing failures count to the window's end",
			samples:  cat(every(Kept, 0, 100, 10, true), every(Kept, 110, 300, 10, false)),
			requests: 31, failed: 20, maxGap: 200, failedByKind: map[Kind]int{Kept: 20}, firstErrorsPerKind: 3, answeredByN1: 11,
		},
		{
			name:     "nothing succeeded: the whole window is the gap",
			samples:  every(Fresh, 0, 500, 100, false),
			requests: 6, failed: 6, maxGap: 500, gapByKind: map[Kind]float64{Fresh: 500}, failedByKind: map[Kind]int{Fresh: 6}, firstErrorsPerKind: 3,
		},
		{
			name:    "an explicit window drops samples outside it and widens the edges",
			samples: cat(every(Fresh, 0, 40, 10, false), every(Fresh, 100, 200, 10, true), every(Fresh, 300, 400, 10, false)),
			from:    at(50), to: at(260),
			requests: 11, maxGap: 60, answeredByN1: 11,
		},
		{
			name: "stream lines close gaps but are not requests",
			samples: cat(every(Fresh, 0, 200, 10, false), lines(0, 200, 50),
				[]Sample{{At: at(0), Kind: Stream, OK: true, Node: "n1"}}),
			requests: 22, failed: 21, streamLines: 5, maxGap: 50, answeredByN1: 1,
			gapByKind:    map[Kind]float64{Fresh: 200, Stream: 50},
			failedByKind: map[Kind]int{Fresh: 21}, firstErrorsPerKind: 3,
		},
		{
			name:     "gaps are taken over every kind together",
			samples:  cat(every(Fresh, 0, 100, 20, true), every(Kept, 10, 110, 20, true)),
			requests: 12, maxGap: 10, gapByKind: map[Kind]float64{Fresh: 20, Kept: 20}, answeredByN1: 12,
		},
		{
			name:     "unordered samples",
			samples:  []Sample{{At: at(100), Kind: Fresh, OK: true}, {At: at(0), Kind: Fresh, OK: true}, {At: at(30), Kind: Kept, OK: true}},
			requests: 3, maxGap: 70,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			r := Summarize(Input{Backend: "arp", Samples: tc.samples, From: tc.from, To: tc.to})
			g.Expect(r.Requests).To(Equal(tc.requests), "requests")
			g.Expect(r.FailedRequests).To(Equal(tc.failed), "failed")
			g.Expect(r.StreamLines).To(Equal(tc.streamLines), "stream lines")
			g.Expect(r.MaxGapMS).To(Equal(tc.maxGap), "max gap")
			for k, v := range tc.gapByKind {
				g.Expect(r.MaxGapMSByKind).To(HaveKeyWithValue(k, v), "gap of %s", k)
			}
			for k, v := range tc.failedByKind {
				g.Expect(r.FailedByKind).To(HaveKeyWithValue(k, v))
				g.Expect(r.FirstErrors[k]).To(HaveLen(tc.firstErrorsPerKind))
				g.Expect(r.FirstErrors[k][0]).To(ContainSubstring("connection refused"))
			}
			if tc.answeredByN1 > 0 {
				g.Expect(r.AnsweredBy).To(HaveKeyWithValue("n1", tc.answeredByN1))
			}
			g.Expect(r.DualOwnerMSMax).To(BeNil(), "no holder samples")
		})
	}
}

// holders builds holder samples every 10 ms from 0: one entry per sample,
// "" for none, "!" for a failed read, "a,b" for two holders.
func holders(spec ...string) []HolderSample {
	var out []HolderSample
	for i, s := range spec {
		h := HolderSample{At: at(i * 10)}
		switch s {
		case "":
		case "!":
			h.Err = "netlink: busy"
		default:
			h.Holders = splitComma(s)
		}
		out = append(out, h)
	}
	return out
}

func splitComma(s string) []string {
	var out []string
	start := 0
	for i := 0; i <= len(s); i++ {
		if i == len(s) || s[i] == ',' {
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	return out
}

func TestSummarizeHolders(t *testing.T) {
	for _, tc := range []struct {
		name       string
		holders    []HolderSample
		from, to   time.Time
		dual, none float64
		samples    int
	}{
		{name: "one holder throughout", holders: holders("n1", "n1", "n1", "n1"), samples: 4},
		{name: "handover with overlap: up to the sample that ended it", holders: holders("n1", "n1", "n1,n2", "n1,n2", "n2", "n2"), dual: 20, samples: 6},
		{name: "overlap seen in one sample only", holders: holders("n1", "n1,n2", "n2"), dual: 10, samples: 3},
		{name: "overlap until the last sample", holders: holders("n1", "n1,n2", "n1,n2", "n1,n2"), dual: 20, samples: 4},
		{name: "the longest of several", holders: holders("n1,n2", "n2", "n2,n3", "n2,n3", "n2,n3", "n3", "n1,n3"), dual: 30, samples: 7},
		{name: "a failed read ends a run and is not counted", holders: holders("n1,n2", "!", "n1,n2", "n1"), dual: 10, samples: 3},
		{name: "three holders are dual owners too", holders: holders("n1", "n1,n2,n3", "n1"), dual: 10, samples: 3},
		{name: "no holder", holders: holders("n1", "", "", "", "n2"), none: 30, samples: 5},
		{name: "no holder at the start", holders: holders("", "", "n1", "n1"), none: 20, samples: 4},
		{
			name: "window clips the samples", holders: holders("n1,n2", "n1,n2", "n1,n2", "n1", "n1,n2", "n1"),
			from: at(25), to: at(60), dual: 10, samples: 3,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			// A steady client so that the default window spans the holders.
			in := Input{Samples: every(Fresh, 0, 100, 10, true), Timeline: Timeline{Holders: tc.holders}, From: tc.from, To: tc.to}
			r := Summarize(in)
			g.Expect(r.HolderSamples).To(Equal(tc.samples))
			g.Expect(r.DualOwnerMSMax).NotTo(BeNil())
			g.Expect(*r.DualOwnerMSMax).To(Equal(tc.dual), "dual owner")
			g.Expect(r.HolderLessMSMax).NotTo(BeNil())
			g.Expect(*r.HolderLessMSMax).To(Equal(tc.none), "no owner")
		})
	}
}

func TestSummarizeReplacementsAndHooks(t *testing.T) {
	s := func(sec float64) time.Time { return t0.Add(time.Duration(sec * float64(time.Second))) }
	for _, tc := range []struct {
		name               string
		events             []Event
		to                 time.Time
		n, unfinished      int
		p50, max, hookMax  float64
		hooksUnreleased    int
		replacementSeconds map[string]float64
	}{
		{name: "none"},
		{
			name: "three rounds, p50 by nearest rank",
			events: []Event{
				{At: s(0), Type: EventReplacementStart, Round: 1}, {At: s(10), Type: EventReplacementEnd, Round: 1},
				{At: s(20), Type: EventReplacementStart, Round: 2}, {At: s(50), Type: EventReplacementEnd, Round: 2},
				{At: s(60), Type: EventReplacementStart, Round: 3}, {At: s(80), Type: EventReplacementEnd, Round: 3},
			},
			n: 3, p50: 20, max: 30, replacementSeconds: map[string]float64{"1": 10, "2": 30, "3": 20},
		},
		{
			name: "two rounds: the lower middle; an unfinished round is not a replacement",
			events: []Event{
				{At: s(0), Type: EventReplacementStart, Round: 1}, {At: s(10.5), Type: EventReplacementEnd, Round: 1},
				{At: s(20), Type: EventReplacementStart, Round: 2}, {At: s(50), Type: EventReplacementEnd, Round: 2},
				{At: s(60), Type: EventReplacementStart, Round: 3},
				{At: s(70), Type: EventReplacementEnd, Round: 9}, // never started
			},
			n: 2, unfinished: 1, p50: 10.5, max: 30,
		},
		{
			name: "hooks: longest hold; a hold never released lasts to the end",
			events: []Event{
				{At: s(1), Type: EventHookHeld, Machine: "m1"}, {At: s(3), Type: EventHookReleased, Machine: "m1"},
				{At: s(4), Type: EventHookHeld, Machine: "m2"}, {At: s(4.25), Type: EventHookReleased, Machine: "m2"},
				{At: s(5), Type: EventHookHeld, Machine: "m3"},
				{At: s(6), Type: EventHookReleased, Machine: "m4"}, // never held
			},
			to: s(12), hookMax: 7, hooksUnreleased: 1,
		},
		{
			name: "hooks: all released",
			events: []Event{
				{At: s(1), Type: EventHookHeld, Machine: "m1"}, {At: s(3.5), Type: EventHookReleased, Machine: "m1"},
				{At: s(5), Type: EventHookHeld, Machine: "m2"}, {At: s(6), Type: EventHookReleased, Machine: "m2"},
			},
			hookMax: 2.5,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			r := Summarize(Input{Samples: every(Fresh, 0, 100, 10, true), Timeline: Timeline{Events: tc.events}, To: tc.to})
			g.Expect(r.Replacements).To(Equal(tc.n))
			g.Expect(r.Unfinished).To(Equal(tc.unfinished))
			g.Expect(r.ReplacementSecondsP50).To(Equal(tc.p50))
			g.Expect(r.ReplacementSecondsMax).To(Equal(tc.max))
			g.Expect(r.HookHoldSecondsMax).To(Equal(tc.hookMax))
			g.Expect(r.HooksUnreleased).To(Equal(tc.hooksUnreleased))
			if tc.replacementSeconds != nil {
				g.Expect(r.ReplacementSeconds).To(Equal(tc.replacementSeconds))
			}
		})
	}
}

func TestResultJSONKeys(t *testing.T) {
	g := NewWithT(t)
	keys := func(r Result) map[string]any {
		b, err := json.Marshal(r)
		g.Expect(err).NotTo(HaveOccurred())
		var m map[string]any
		g.Expect(json.Unmarshal(b, &m)).To(Succeed())
		return m
	}
	r := Summarize(Input{Backend: "bgp", Samples: every(Fresh, 0, 100, 10, true)})
	m := keys(r)
	for _, k := range []string{"backend", "replacements", "requests", "failed_requests", "max_gap_ms", "dual_owner_ms_max",
		"replacement_seconds_p50", "replacement_seconds_max", "hook_hold_seconds_max", "holder_less_ms_max", "duration_s",
		"requests_by_kind", "failed_by_kind"} {
		g.Expect(m).To(HaveKey(k))
	}
	g.Expect(m["backend"]).To(Equal("bgp"))
	g.Expect(m["dual_owner_ms_max"]).To(BeNil(), "no holder samples (BGP): null, not 0")
	g.Expect(m["duration_s"]).To(Equal(0.1))

	r = Summarize(Input{Samples: every(Fresh, 0, 100, 10, true), Timeline: Timeline{Holders: holders("n1", "n1,n2", "n2")}})
	g.Expect(keys(r)["dual_owner_ms_max"]).To(Equal(10.0))
}

func TestRecorder(t *testing.T) {
	g := NewWithT(t)
	r := NewRecorder()
	r.Phase("m1", "Provisioning")
	r.Phase("m1", "Provisioning") // no change: not an event
	r.Phase("m1", "Running")
	r.HookHeld("m1")
	r.HookHeld("m1")
	r.HookReleased("m1")
	r.HookReleased("m1")
	r.HookReleased("m2") // never held
	r.Step("scale to 3")
	r.ReplacementStart(1)
	r.ReplacementEnd(1)
	var types []EventType
	for _, e := range r.Timeline().Events {
		types = append(types, e.Type)
		g.Expect(e.At).NotTo(BeZero())
	}
	g.Expect(types).To(Equal([]EventType{EventPhase, EventPhase, EventHookHeld, EventHookReleased, EventStep,
		EventReplacementStart, EventReplacementEnd}))

	// The holder loop: sorted holders, errors kept as unknown samples.
	calls := 0
	r.SampleHolders(t.Context(), time.Millisecond, func() ([]string, error) {
		calls++
		switch {
		case calls%3 == 0:
			return nil, errors.New("netlink: busy")
		default:
			return []string{"n2", "n1"}, nil
		}
	})
	g.Eventually(func() int { return len(r.Timeline().Holders) }).WithTimeout(5 * time.Second).Should(BeNumerically(">=", 6))
	r.Stop()
	n := len(r.Timeline().Holders)
	hs := r.Timeline().Holders
	g.Expect(sort.SliceIsSorted(hs, func(i, j int) bool { return hs[i].At.Before(hs[j].At) })).To(BeTrue())
	g.Expect(hs[0].Holders).To(Equal([]string{"n1", "n2"}))
	g.Expect(hs[2].Err).To(Equal("netlink: busy"))
	g.Expect(hs[2].Holders).To(BeNil())
	g.Consistently(func() []HolderSample { return r.Timeline().Holders }).WithTimeout(50*time.Millisecond).
		Should(HaveLen(n), "Stop stops the sampling")
}

func TestRecorderEtcd(t *testing.T) {
	voters := []EtcdMember{{Name: "cp-2"}, {Name: "cp-1", Leader: true}}
	withLearner := []EtcdMember{{Name: "cp-1", Leader: true}, {Name: "cp-2"}, {Name: "cp-3", Learner: true}}
	type read struct {
		members []EtcdMember
		err     error
	}
	for _, tc := range []struct {
		name  string
		reads []read
		want  []EtcdSample // without At
	}{
		{"only changes are recorded, members sorted by name", []read{{members: voters}, {members: voters}, {members: withLearner}},
			[]EtcdSample{{Members: []EtcdMember{{Name: "cp-1", Leader: true}, {Name: "cp-2"}}}, {Members: withLearner}}},
		{"a role change is a change", []read{{members: voters}, {members: []EtcdMember{{Name: "cp-1"}, {Name: "cp-2", Leader: true}}}},
			[]EtcdSample{{Members: []EtcdMember{{Name: "cp-1", Leader: true}, {Name: "cp-2"}}}, {Members: []EtcdMember{{Name: "cp-1"}, {Name: "cp-2", Leader: true}}}}},
		{"failed reads: one sample that says nothing, then the membership again",
			[]read{{members: voters}, {err: errors.New("deadline exceeded")}, {err: errors.New("no leader")}, {members: voters}},
			[]EtcdSample{{Members: []EtcdMember{{Name: "cp-1", Leader: true}, {Name: "cp-2"}}}, {Err: "deadline exceeded"},
				{Members: []EtcdMember{{Name: "cp-1", Leader: true}, {Name: "cp-2"}}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			r := NewRecorder()
			for i, rd := range tc.reads {
				r.Etcd(at(i*100), rd.members, rd.err)
			}
			got := r.Timeline().Etcd
			for i := range got {
				g.Expect(got[i].At).NotTo(BeZero())
				got[i].At = time.Time{}
			}
			g.Expect(got).To(Equal(tc.want))
		})
	}
}

// TestMaxGapSamples: the summary says where the longest gap began and what
// the probes did in it, so that a gap can be told from a slow answer.
func TestMaxGapSamples(t *testing.T) {
	g := NewWithT(t)
	slow := Sample{At: at(100), Kind: Kept, OK: true, Node: "n2", Latency: 300 * time.Millisecond}
	failed := Sample{At: at(150), Kind: Fresh, Err: "connection reset by peer", Latency: 2 * time.Millisecond}
	samples := cat(every(Fresh, 0, 90, 10, true), []Sample{slow, failed}, every(Fresh, 400, 500, 10, true))
	r := Summarize(Input{Samples: samples, From: at(0), To: at(500)})
	g.Expect(r.MaxGapMS).To(Equal(300.0))
	g.Expect(r.MaxGapAtS).To(Equal(0.1))
	g.Expect(r.MaxGapSamples).To(Equal([]string{
		"+0.100s kept n2 300 ms",
		"+0.150s fresh error: connection reset by peer 2 ms",
		"+0.400s fresh n1 0 ms",
	}))
	g.Expect(r.SlowestMSByKind).To(HaveKeyWithValue(Kept, 300.0))
}
