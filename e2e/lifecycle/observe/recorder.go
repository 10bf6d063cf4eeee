package observe

import (
	"context"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
)

// HolderSample is which nodes' kernels held the VIP at one instant. Err set:
// the holders could not be read (the sample says nothing).
type HolderSample struct {
	At      time.Time `json:"at"`
	Holders []string  `json:"holders"`
	Err     string    `json:"err,omitempty"`
}

// EtcdMember is one etcd member as an etcd client listed it.
type EtcdMember struct {
	Name    string `json:"name"`
	Learner bool   `json:"learner,omitempty"`
	Leader  bool   `json:"leader,omitempty"`
}

// EtcdSample is the etcd membership from At until the next sample (a real control plane only;
// recorded on change). Err set: the membership could not be read (the sample says nothing).
type EtcdSample struct {
	At      time.Time    `json:"at"`
	Members []EtcdMember `json:"members"`
	Err     string       `json:"err,omitempty"`
}

// sameEtcd: b says nothing new after a (the same members and roles, or a second failed read).
func sameEtcd(a, b EtcdSample) bool {
	if (a.Err != "") != (b.Err != "") {
		return false
	}
	return slices.Equal(a.Members, b.Members)
}

// EventType names what an Event records.
type EventType string

const (
	// EventPhase: Machine entered Phase.
	EventPhase EventType = "phase"
	// EventHookHeld: CAPI began waiting on caplb's pre-drain hook of Machine.
	EventHookHeld EventType = "hook-held"
	// EventHookReleased: caplb removed its hook from Machine.
	EventHookReleased EventType = "hook-released"
	// EventStep: the scenario's own step (Text).
	EventStep EventType = "step"
	// EventReplacementStart / End: rolling replacement Round began / ended.
	EventReplacementStart EventType = "replacement-start"
	EventReplacementEnd   EventType = "replacement-end"
	// EventLeaving: the scenario began taking Machine out of the load balancer (deleting it,
	// annotating it disabled, failing its API server's health): a hand-over off it may follow.
	// EventBack: it is a full member again.
	EventLeaving EventType = "leaving"
	EventBack    EventType = "back"
)

// Event is one timestamped thing that happened in the scenario.
type Event struct {
	At      time.Time `json:"at"`
	Type    EventType `json:"type"`
	Machine string    `json:"machine,omitempty"`
	Phase   string    `json:"phase,omitempty"`
	Text    string    `json:"text,omitempty"`
	Round   int       `json:"round,omitempty"`
}

// Timeline is a Recorder's snapshot.
type Timeline struct {
	Holders []HolderSample `json:"holders"`
	Events  []Event        `json:"events"`
	// Etcd is the etcd membership over time (a real control plane only).
	Etcd []EtcdSample `json:"etcd,omitempty"`
}

// Recorder records the VIP's holders and the scenario's events. It is safe
// for concurrent use; its zero value is ready.
type Recorder struct {
	mu      sync.Mutex
	holders []HolderSample
	events  []Event
	etcd    []EtcdSample
	phase   map[string]string
	hook    map[string]bool
	cancel  context.CancelFunc
	wg      sync.WaitGroup
}

// NewRecorder returns an empty Recorder.
func NewRecorder() *Recorder { return &Recorder{} }

// SampleHolders calls holders every interval (default 10 ms) and records
// the result, until ctx ends or Stop. The lab's function reads the truth
// from the nodes' kernels (which hold the VIP address).
func (r *Recorder) SampleHolders(ctx context.Context, interval time.Duration, holders func() ([]string, error)) {
	if interval <= 0 {
		interval = 10 * time.Millisecond
	}
	ctx, cancel := context.WithCancel(ctx)
	r.mu.Lock()
	prev := r.cancel
	r.cancel = func() {
		if prev != nil {
			prev()
		}
		cancel()
	}
	r.mu.Unlock()
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			at := time.Now()
			hs, err := holders()
			if ctx.Err() != nil {
				return
			}
			r.Holders(at, hs, err)
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
}

// Stop stops the holder sampling and waits for it.
func (r *Recorder) Stop() {
	r.mu.Lock()
	cancel := r.cancel
	r.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	r.wg.Wait()
}

// Holders records one holder sample taken at at.
func (r *Recorder) Holders(at time.Time, holders []string, err error) {
	s := HolderSample{At: at, Holders: slices.Sorted(slices.Values(holders))}
	if err != nil {
		s.Holders, s.Err = nil, err.Error()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.holders = append(r.holders, s)
}

// Etcd records the etcd membership read at at, if that is a change: call it on every poll.
// members are sorted by name.
func (r *Recorder) Etcd(at time.Time, members []EtcdMember, err error) {
	s := EtcdSample{At: at, Members: slices.SortedFunc(slices.Values(members), func(a, b EtcdMember) int { return strings.Compare(a.Name, b.Name) })}
	if err != nil {
		s.Members, s.Err = nil, err.Error()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if n := len(r.etcd); n > 0 && sameEtcd(r.etcd[n-1], s) {
		return
	}
	r.etcd = append(r.etcd, s)
}

func (r *Recorder) add(e Event) {
	if e.At.IsZero() {
		e.At = time.Now()
	}
	r.events = append(r.events, e)
}

// Phase records that machine is in phase, if that is a change: call it on
// every poll of the Machines.
func (r *Recorder) Phase(machine, phase string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.phase == nil {
		r.phase = map[string]string{}
	}
	if old, seen := r.phase[machine]; seen && old == phase {
		return
	}
	r.phase[machine] = phase
	r.add(Event{Type: EventPhase, Machine: machine, Phase: phase})
}

// HookHeld records that CAPI waits on the machine's pre-drain hook (once
// per hold: repeated calls are ignored until HookReleased).
func (r *Recorder) HookHeld(machine string) { r.setHook(machine, true) }

// HookReleased records that the machine's hook is gone (ignored if not held).
func (r *Recorder) HookReleased(machine string) { r.setHook(machine, false) }

func (r *Recorder) setHook(machine string, held bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.hook == nil {
		r.hook = map[string]bool{}
	}
	if r.hook[machine] == held {
		return
	}
	r.hook[machine] = held
	t := EventHookReleased
	if held {
		t = EventHookHeld
	}
	r.add(Event{Type: t, Machine: machine})
}

// Step marks a step of the scenario ("scale to 3", "roll cp-1").
func (r *Recorder) Step(text string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.add(Event{Type: EventStep, Text: text})
}

// Leaving marks that the scenario began taking machine out of the load balancer.
func (r *Recorder) Leaving(machine string) { r.member(EventLeaving, machine) }

// Back marks that machine is a full member again.
func (r *Recorder) Back(machine string) { r.member(EventBack, machine) }

func (r *Recorder) member(t EventType, machine string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.add(Event{Type: t, Machine: machine})
}

// ReplacementStart marks the start of rolling replacement round (1, 2, ...).
func (r *Recorder) ReplacementStart(round int) { r.round(EventReplacementStart, round) }

// ReplacementEnd marks its end.
func (r *Recorder) ReplacementEnd(round int) { r.round(EventReplacementEnd, round) }

func (r *Recorder) round(t EventType, round int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.add(Event{Type: t, Round: round})
}

// Timeline returns a copy of everything recorded, each list in time order.
func (r *Recorder) Timeline() Timeline {
	r.mu.Lock()
	defer r.mu.Unlock()
	tl := Timeline{Holders: append([]HolderSample(nil), r.holders...), Events: append([]Event(nil), r.events...),
		Etcd: append([]EtcdSample(nil), r.etcd...)}
	sort.SliceStable(tl.Holders, func(i, j int) bool { return tl.Holders[i].At.Before(tl.Holders[j].At) })
	sort.SliceStable(tl.Events, func(i, j int) bool { return tl.Events[i].At.Before(tl.Events[j].At) })
	sort.SliceStable(tl.Etcd, func(i, j int) bool { return tl.Etcd[i].At.Before(tl.Etcd[j].At) })
	return tl
}
