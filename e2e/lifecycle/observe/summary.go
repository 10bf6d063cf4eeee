package observe

import (
	"fmt"
	"math"
	"sort"
	"time"
)

// Input is what Summarize and RenderSVG work from.
type Input struct {
	// Backend names the run ("arp", "bgp").
	Backend string
	// Samples from Prober.Samples; Timeline from Recorder.Timeline.
	Samples  []Sample
	Timeline Timeline
	// From and To bound the window the client and holder figures are taken
	// over; zero: from the first to the last probe sample. Replacements and
	// hooks come from the whole timeline.
	From, To time.Time
}

// Result is a run's figures, in the JSON shape of `make bench-rollout`.
type Result struct {
	Backend        string `json:"backend"`
	Replacements   int    `json:"replacements"`
	Requests       int    `json:"requests"`
	FailedRequests int    `json:"failed_requests"`
	// MaxGapMS is the longest stretch of the window without a successful
	// sample of any kind (a stream line counts).
	MaxGapMS float64 `json:"max_gap_ms"`
	// MaxGapAtS is where the longest gap began, in seconds from the window's start, and
	// MaxGapSamples what the probes did in it: the requests that began inside it and the
	// first success after it, each as "+<s> <kind> <node or error> <latency>". A gap can
	// be the VIP (failures, a holder-less moment) or the API server answering slowly.
	MaxGapAtS     float64  `json:"max_gap_at_s"`
	MaxGapSamples []string `json:"max_gap_samples,omitempty"`
	// SlowestMSByKind is the longest a successful request of each kind took.
	SlowestMSByKind map[Kind]float64 `json:"slowest_ms_by_kind,omitempty"`
	// DualOwnerMSMax is the longest run of holder samples in which two or
	// more nodes held the VIP, up to the first sample that ended it (so at
	// the sampler's resolution, rounded up). Null without holder samples.
	DualOwnerMSMax        *float64 `json:"dual_owner_ms_max"`
	ReplacementSecondsP50 float64  `json:"replacement_seconds_p50"`
	ReplacementSecondsMax float64  `json:"replacement_seconds_max"`
	HookHoldSecondsMax    float64  `json:"hook_hold_seconds_max"`

	// SpuriousClaims are the nodes that began holding the VIP beside a holder that was not
	// leaving (ARP: one holder at a time but for hand-overs), "+<s> <node> beside <holders>".
	// Null where several holders are the normal state (BGP's ECMP set).
	SpuriousClaims []string `json:"spurious_claims"`

	// HolderLessMSMax is the longest run in which no node held the VIP,
	// measured as DualOwnerMSMax. Null without holder samples.
	HolderLessMSMax *float64 `json:"holder_less_ms_max"`
	DurationS       float64  `json:"duration_s"`
	HolderSamples   int      `json:"holder_samples"`
	// StreamLines counts lines delivered on the stream (not requests).
	StreamLines int `json:"stream_lines"`
	// RetriedRequests counts GETs sent again after a connection reset (client-go's retry).
	RetriedRequests int `json:"retried_requests"`
	// StreamInterruptions counts streams reset by the server's side and reopened.
	StreamInterruptions int                `json:"stream_interruptions"`
	RequestsByKind      map[Kind]int       `json:"requests_by_kind"`
	FailedByKind        map[Kind]int       `json:"failed_by_kind"`
	MaxGapMSByKind      map[Kind]float64   `json:"max_gap_ms_by_kind"`
	FirstErrors         map[Kind][]string  `json:"first_errors,omitempty"`
	AnsweredBy          map[string]int     `json:"answered_by"`
	Unfinished          int                `json:"replacements_unfinished,omitempty"`
	HooksUnreleased     int                `json:"hooks_unreleased,omitempty"`
	ReplacementSeconds  map[string]float64 `json:"replacement_seconds,omitempty"`
}

// firstErrors is how many error strings per kind a Result keeps.
const firstErrors = 3

// Summarize computes a run's figures.
func Summarize(in Input) Result {
	from, to := in.window()
	r := Result{
		Backend:        in.Backend,
		RequestsByKind: map[Kind]int{},
		FailedByKind:   map[Kind]int{},
		MaxGapMSByKind: map[Kind]float64{},
		AnsweredBy:     map[string]int{},
		DurationS:      seconds(to.Sub(from)),
	}
	var all []time.Time
	byKind := map[Kind][]time.Time{}
	for _, s := range in.Samples {
		if s.At.Before(from) || s.At.After(to) {
			continue
		}
		if s.Interrupted {
			r.StreamInterruptions++
			continue
		}
		if s.Retried {
			r.RetriedRequests++
		}
		if s.OK {
			all = append(all, s.At)
			byKind[s.Kind] = append(byKind[s.Kind], s.At)
			if !s.Event {
				if r.SlowestMSByKind == nil {
					r.SlowestMSByKind = map[Kind]float64{}
				}
				r.SlowestMSByKind[s.Kind] = max(r.SlowestMSByKind[s.Kind], ms(s.Latency))
			}
		}
		switch {
		case s.Event:
			r.StreamLines++
		case s.OK:
			r.Requests++
			r.RequestsByKind[s.Kind]++
			r.AnsweredBy[s.Node]++
		default:
			r.Requests++
			r.RequestsByKind[s.Kind]++
			r.FailedRequests++
			r.FailedByKind[s.Kind]++
			if len(r.FirstErrors[s.Kind]) < firstErrors {
				if r.FirstErrors == nil {
					r.FirstErrors = map[Kind][]string{}
				}
				r.FirstErrors[s.Kind] = append(r.FirstErrors[s.Kind], fmt.Sprintf("+%.3fs: %s", s.At.Sub(from).Seconds(), s.Err))
			}
		}
	}
	r.MaxGapMS = ms(maxGap(all, from, to))
	r.MaxGapAtS, r.MaxGapSamples = gapSamples(in.Samples, all, from, to)
	for k, ts := range byKind {
		r.MaxGapMSByKind[k] = ms(maxGap(ts, from, to))
	}
	for k := range r.RequestsByKind {
		if _, ok := byKind[k]; !ok {
			r.MaxGapMSByKind[k] = ms(to.Sub(from))
		}
	}

	var hs []HolderSample
	for _, h := range in.Timeline.Holders {
		if !h.At.Before(from) && !h.At.After(to) {
			hs = append(hs, h)
			if h.Err == "" {
				r.HolderSamples++
			}
		}
	}
	if r.HolderSamples > 0 {
		dual := ms(longestRun(hs, func(n int) bool { return n >= 2 }))
		none := ms(longestRun(hs, func(n int) bool { return n == 0 }))
		r.DualOwnerMSMax, r.HolderLessMSMax = &dual, &none
		r.SpuriousClaims = append([]string{}, spuriousClaims(hs, in.Timeline.Events, from)...)
	}

	durs, unfinished := replacements(in.Timeline.Events)
	r.Replacements, r.Unfinished = len(durs), unfinished
	if len(durs) > 0 {
		r.ReplacementSeconds = map[string]float64{}
		var ds []float64
		for round, d := range durs {
			r.ReplacementSeconds[fmt.Sprint(round)] = seconds(d)
			ds = append(ds, seconds(d))
		}
		sort.Float64s(ds)
		r.ReplacementSecondsP50 = percentile(ds, 0.5)
		r.ReplacementSecondsMax = ds[len(ds)-1]
	}
	end := to
	if n := len(in.Timeline.Events); n > 0 && in.Timeline.Events[n-1].At.After(end) {
		end = in.Timeline.Events[n-1].At
	}
	holds, open := hookHolds(in.Timeline.Events, end)
	r.HooksUnreleased = open
	for _, h := range holds {
		r.HookHoldSecondsMax = math.Max(r.HookHoldSecondsMax, seconds(h.to.Sub(h.from)))
	}
	return r
}

// window is [From, To], defaulting to the probe samples' span.
func (in Input) window() (from, to time.Time) {
	from, to = in.From, in.To
	if from.IsZero() || to.IsZero() {
		var first, last time.Time
		for _, s := range in.Samples {
			if first.IsZero() || s.At.Before(first) {
				first = s.At
			}
			if s.At.After(last) {
				last = s.At
			}
		}
		if from.IsZero() {
			from = first
		}
		if to.IsZero() {
			to = last
		}
	}
	if to.Before(from) {
		to = from
	}
	return from, to
}

// gapSamples finds where the longest gap of ok (success times) in [from, to]
// begins and describes the samples that began in it, up to the first
// success after it (at most 12).
func gapSamples(samples []Sample, ok []time.Time, from, to time.Time) (float64, []string) {
	ts := append([]time.Time(nil), ok...)
	sort.Slice(ts, func(i, j int) bool { return ts[i].Before(ts[j]) })
	start, end := from, to
	if len(ts) > 0 {
		start, end = from, ts[0]
		for i := 1; i < len(ts); i++ {
			if ts[i].Sub(ts[i-1]) > end.Sub(start) {
				start, end = ts[i-1], ts[i]
			}
		}
		if to.Sub(ts[len(ts)-1]) > end.Sub(start) {
			start, end = ts[len(ts)-1], to
		}
	}
	var out []string
	for _, s := range samples {
		if s.Event || s.At.Before(start) || s.At.After(end) || len(out) == 12 {
			continue
		}
		what := s.Node
		if !s.OK {
			what = "error: " + s.Err
		}
		out = append(out, fmt.Sprintf("+%.3fs %s %s %.0f ms", s.At.Sub(from).Seconds(), s.Kind, what, ms(s.Latency)))
	}
	return seconds(start.Sub(from)), out
}

// maxGap is the longest stretch of [from, to] without a time in ts.
func maxGap(ts []time.Time, from, to time.Time) time.Duration {
	if len(ts) == 0 {
		return to.Sub(from)
	}
	ts = append([]time.Time(nil), ts...)
	sort.Slice(ts, func(i, j int) bool { return ts[i].Before(ts[j]) })
	longest := ts[0].Sub(from)
	for i := 1; i < len(ts); i++ {
		longest = max(longest, ts[i].Sub(ts[i-1]))
	}
	return max(longest, to.Sub(ts[len(ts)-1]))
}

// longestRun is the longest run of (time-ordered) holder samples whose
// holder count satisfies cond: from its first sample to the sample that
// ended it (a sample that failed ends a run too), or to its last sample if
// nothing did.
func longestRun(hs []HolderSample, cond func(int) bool) time.Duration {
	var longest time.Duration
	var start time.Time
	in := false
	for _, h := range hs {
		match := h.Err == "" && cond(len(h.Holders))
		switch {
		case match && !in:
			start, in = h.At, true
		case !match && in:
			longest, in = max(longest, h.At.Sub(start)), false
		}
	}
	if in {
		longest = max(longest, hs[len(hs)-1].At.Sub(start))
	}
	return longest
}

// replacements pairs each round's start with its end.
func replacements(evs []Event) (durs map[int]time.Duration, unfinished int) {
	durs = map[int]time.Duration{}
	started := map[int]time.Time{}
	for _, e := range evs {
		switch e.Type {
		case EventReplacementStart:
			started[e.Round] = e.At
		case EventReplacementEnd:
			if t, ok := started[e.Round]; ok {
				durs[e.Round] = e.At.Sub(t)
				delete(started, e.Round)
			}
		}
	}
	return durs, len(started)
}

type span struct {
	machine  string
	from, to time.Time
	open     bool
}

// hookHolds pairs each HookHeld with its HookReleased; a hold never
// released lasts until end.
func hookHolds(evs []Event, end time.Time) (holds []span, open int) {
	held := map[string]time.Time{}
	for _, e := range evs {
		switch e.Type {
		case EventHookHeld:
			held[e.Machine] = e.At
		case EventHookReleased:
			if t, ok := held[e.Machine]; ok {
				holds = append(holds, span{machine: e.Machine, from: t, to: e.At})
				delete(held, e.Machine)
			}
		}
	}
	for m, t := range held {
		holds = append(holds, span{machine: m, from: t, to: end, open: true})
	}
	return holds, len(held)
}

// percentile by nearest rank, as the other benchmarks.
func percentile(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(p*float64(len(sorted)))) - 1
	return sorted[max(rank, 0)]
}

func ms(d time.Duration) float64      { return math.Round(float64(d)/float64(time.Millisecond)*10) / 10 }
func seconds(d time.Duration) float64 { return math.Round(d.Seconds()*1000) / 1000 }
