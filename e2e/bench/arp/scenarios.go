//go:build linux

package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"syscall"
	"time"

	"github.com/caplb/caplb/e2e/lab/arplab"
)

// A scenario injects a fault on the owner and returns the step that undoes it
// once the new owner answers (restart the daemon, heal the link...), and
// the moment the clock starts (zero: just before the scenario ran).
type scenario func(b *bench, d daemon, owner *arplab.Node) (after func() error, t0 time.Time, err error)

// flapDown is how long the first outage of link_flap lasts.
const flapDown = 200 * time.Millisecond

var scenarioFuncs = map[string]scenario{
	// The owner's daemon dies without any cleanup (its VIP stays in the
	// kernel until the daemon is restarted, as kubelet or systemd would).
	"hard_kill": func(b *bench, d daemon, o *arplab.Node) (func() error, time.Time, error) {
		if err := d.kill(o); err != nil {
			return nil, time.Time{}, err
		}
		return func() error {
			if err := d.waitExit(o, 5*time.Second); err != nil && !isSignalled(err) {
				return err
			}
			return d.restart(o)
		}, time.Time{}, nil
	},
	// The owner's API server starts failing /readyz.
	"health_failure": func(b *bench, d daemon, o *arplab.Node) (func() error, time.Time, error) {
		if err := d.setHealthy(o, false); err != nil {
			return nil, time.Time{}, err
		}
		return func() error { return d.setHealthy(o, true) }, time.Time{}, nil
	},
	// The owner's cable is pulled at the switch (its switch port goes down).
	"link_cut": func(b *bench, d daemon, o *arplab.Node) (func() error, time.Time, error) {
		if err := b.c.Cut(o); err != nil {
			return nil, time.Time{}, err
		}
		return func() error { return b.c.Restore(o) }, time.Time{}, nil
	},
	// The owner's own interface goes down (`ip link set eth0 down` on the node).
	"node_link_down": func(b *bench, d daemon, o *arplab.Node) (func() error, time.Time, error) {
		if err := o.NS.SetLinkUp("eth0", false); err != nil {
			return nil, time.Time{}, err
		}
		return func() error { return o.NS.SetLinkUp("eth0", true) }, time.Time{}, nil
	},
	// The owner's own interface flaps: down 200 ms, up, down again. The
	// clock starts at the second fault, which must not find the cluster
	// slower than a single one.
	"link_flap": func(b *bench, d daemon, o *arplab.Node) (func() error, time.Time, error) {
		if err := o.NS.SetLinkUp("eth0", false); err != nil {
			return nil, time.Time{}, err
		}
		time.Sleep(flapDown)
		if err := o.NS.SetLinkUp("eth0", true); err != nil {
			return nil, time.Time{}, err
		}
		t0 := time.Now()
		if err := o.NS.SetLinkUp("eth0", false); err != nil {
			return nil, time.Time{}, err
		}
		return func() error { return o.NS.SetLinkUp("eth0", true) }, t0, nil
	},
	// The owner's daemon gets SIGTERM: caplb hands over make-before-break;
	// keepalived sends a priority-0 advert.
	"graceful": func(b *bench, d daemon, o *arplab.Node) (func() error, time.Time, error) {
		if err := d.term(o); err != nil {
			return nil, time.Time{}, err
		}
		return func() error {
			if err := d.waitExit(o, 10*time.Second); err != nil {
				return fmt.Errorf("%s did not exit after SIGTERM: %w", d.name(), err)
			}
			return d.restart(o)
		}, time.Time{}, nil
	},
}

func isSignalled(err error) bool {
	var ee interface{ Sys() any }
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok {
			return ws.Signaled()
		}
	}
	return false
}

type bench struct {
	c    *arplab.Cluster
	d    daemon
	rec  *recorder
	rss  int64
	anon int64
	// verbose prints every failed connect.
	verbose bool
}

type trialResult struct {
	Old, New  string
	Failover  time.Duration
	Failed    int
	Duplicate time.Duration
}

// trialData is what the timeline of one trial shows.
type trialData struct {
	Daemon   string
	Scenario string
	T0       time.Time
	First    time.Time
	Old, New string
	Nodes    []string
	Attempts []attempt
	Samples  []holding
}

func (b *bench) trial(name string, fn scenario) (trialResult, *trialData, error) {
	owner, err := b.waitStable(30 * time.Second)
	if err != nil {
		return trialResult{}, nil, err
	}
	b.sampleRSS()
	b.rec.reset()
	time.Sleep(300 * time.Millisecond) // a baseline before the fault, for the timeline
	t0 := time.Now()
	after, ft0, err := fn(b, b.d, owner)
	if err != nil {
		return trialResult{}, nil, err
	}
	if !ft0.IsZero() {
		t0 = ft0
	}
	if b.verbose {
		fmt.Printf("    %s fault on %s\n", t0.Format("15:04:05.000000"), owner.Name)
	}
	first, ok := b.rec.firstAnswerBy(t0, owner.Name, 15*time.Second)
	if b.rec.view != nil {
		first, ok = b.rec.firstAnswerAfterMove(t0, owner.Name, 15*time.Second)
	}
	if !ok {
		return trialResult{}, nil, fmt.Errorf("no other node answered within 15s of the fault on %s", owner.Name)
	}
	if err := after(); err != nil {
		return trialResult{}, nil, err
	}
	// The trial ends when exactly one kernel holds the VIP again.
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if h, err := b.c.Holders(arplab.VIPv4); err == nil && len(h) == 1 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond)
	end := time.Now()
	as, hs := b.rec.window(t0.Add(-300*time.Millisecond), end)
	r := trialResult{Old: owner.Name, New: first.Node, Failover: first.End.Sub(t0)}
	for _, a := range as {
		if !a.Start.Before(t0) && a.Err != "" {
			r.Failed++
			if b.verbose {
				fmt.Printf("    %s failed connect at %+.1f ms (took %.1f ms): %s\n", a.Start.Format("15:04:05.000000"), ms(a.Start.Sub(t0)), ms(a.End.Sub(a.Start)), a.Err)
			}
		}
	}
	for i := 1; i < len(hs); i++ {
		if hs[i-1].At.Before(t0) {
			continue
		}
		if len(hs[i-1].Holders) >= 2 {
			r.Duplicate += hs[i].At.Sub(hs[i-1].At)
		}
	}
	data := &trialData{Daemon: b.d.name(), Scenario: name, T0: t0, First: first.End, Old: owner.Name, New: first.Node, Attempts: as, Samples: hs}
	for _, n := range b.c.Nodes {
		data.Nodes = append(data.Nodes, n.Name)
	}
	return r, data, nil
}

// waitStable waits until one kernel holds the VIP, every agent runs, sees all
// members, is eligible and agrees on the owner, three checks in a row.
func (b *bench) waitStable(timeout time.Duration) (*arplab.Node, error) {
	deadline := time.Now().Add(timeout)
	okRuns := 0
	var last error
	for time.Now().Before(deadline) {
		owner, err := b.d.stable()
		if err == nil {
			okRuns++
			if okRuns >= 3 {
				return owner, nil
			}
		} else {
			okRuns, last = 0, err
		}
		time.Sleep(100 * time.Millisecond)
	}
	return nil, fmt.Errorf("not stable after %v: %w", timeout, last)
}

func (b *bench) checkStable() (*arplab.Node, error) {
	h, err := b.c.Holders(arplab.VIPv4)
	if err != nil {
		return nil, err
	}
	if len(h) != 1 {
		return nil, fmt.Errorf("holders %v", h)
	}
	for _, n := range b.c.Nodes {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		s, err := n.Status(ctx)
		cancel()
		if err != nil {
			return nil, err
		}
		if s.MembersSeen != len(b.c.Nodes) || !s.Eligible || s.Owner != h[0] {
			return nil, fmt.Errorf("%s: seen %d eligible %v owner %q (holder %s)", n.Name, s.MembersSeen, s.Eligible, s.Owner, h[0])
		}
	}
	return b.c.Node(h[0]), nil
}

func (b *bench) sampleRSS() {
	for _, n := range b.c.Nodes {
		if n.Agent == nil {
			continue // the peer's lab
		}
		if v, err := n.Agent.VmHWM(); err == nil && v > b.rss {
			b.rss = v
		}
		if v, err := n.Agent.RssAnon(); err == nil && v > b.anon {
			b.anon = v
		}
	}
}

func (b *bench) peakAnon() float64 { return math.Round(float64(b.anon)/(1<<20)*10) / 10 }

func (b *bench) peakRSS() float64 {
	b.sampleRSS()
	return math.Round(float64(b.rss)/(1<<20)*10) / 10
}

type summary struct {
	Trials           int     `json:"trials"`
	P50              float64 `json:"p50_ms"`
	P99              float64 `json:"p99_ms"`
	Max              float64 `json:"max_ms"`
	FailedConnects   int     `json:"failed_connects"`
	DuplicateOwnerMS float64 `json:"duplicate_owner_ms"`
	// Per-trial detail, for the curious.
	FailoverMS []float64 `json:"failover_ms"`
	FailedPer  []int     `json:"failed_connects_per_trial"`
}

func summarise(ts []trialResult) summary {
	s := summary{Trials: len(ts)}
	var dup time.Duration
	for _, t := range ts {
		s.FailoverMS = append(s.FailoverMS, round1(ms(t.Failover)))
		s.FailedPer = append(s.FailedPer, t.Failed)
		s.FailedConnects += t.Failed
		dup += t.Duplicate
	}
	sorted := append([]float64(nil), s.FailoverMS...)
	sort.Float64s(sorted)
	s.P50 = percentile(sorted, 0.50)
	s.P99 = percentile(sorted, 0.99)
	s.Max = sorted[len(sorted)-1]
	if len(ts) > 0 {
		// Mean per trial.
		s.DuplicateOwnerMS = round1(ms(dup) / float64(len(ts)))
	}
	return s
}

// percentile by nearest rank.
func percentile(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(p*float64(len(sorted)))) - 1
	if rank < 0 {
		rank = 0
	}
	return sorted[rank]
}

func round1(f float64) float64 { return math.Round(f*10) / 10 }
