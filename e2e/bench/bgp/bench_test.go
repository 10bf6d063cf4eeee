//go:build linux

// Package bgpbench measures the BGP VIP in the network lab (make bench-bgp): how long a
// member's route stays in a real router's FIB after a fault, whether a graceful quiesce loses
// client connections, and how evenly ECMP spreads them. Results go to $BENCH_OUT as JSON.
package bgpbench

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/caplb/caplb/e2e/lab"
	"github.com/caplb/caplb/e2e/lab/bgplab"
)

// Lab settings, recorded in the output.
const (
	holdTime       = 3 * time.Second
	healthInterval = 100 * time.Millisecond
	healthFall     = 2
	drain          = 500 * time.Millisecond
	loadWorkers    = 4
	loadInterval   = 20 * time.Millisecond // 4 workers: one connect every 5 ms
	settle         = 30 * time.Second      // bound for routes to come back between trials
	// bfdInterval: BFD runs on every session at 300 ms x 3 (the goal: a frozen or
	// powered-off member leaves the FIB in under a second).
	bfdInterval = 300 * time.Millisecond
)

// Scenario is one fault's figures.
type Scenario struct {
	Trials int     `json:"trials"`
	P50    float64 `json:"p50_ms"`
	P99    float64 `json:"p99_ms"`
	Max    float64 `json:"max_ms"`
	// FailedConnects counts client connections that failed from the fault until one second
	// after the route left the FIB (graceful: until one second after the member stopped).
	FailedConnects int `json:"failed_connects"`
	// Connects is the number of client connections in those windows.
	Connects int `json:"connects"`
	// FailedDials are failures of the TCP connect itself (refused, timed out, reset during
	// the handshake); ResetsAfterConnect are connections reset after they were established
	// (their packets re-hashed to another node when the router's ECMP group changed).
	FailedDials        int `json:"failed_dials"`
	ResetsAfterConnect int `json:"resets_after_connect"`
	// HoldTimeMs is the configured BGP hold time, for the scenarios it bounds.
	HoldTimeMs float64 `json:"hold_time_ms,omitempty"`
	Note       string  `json:"note,omitempty"`
	samples    []time.Duration
}

// Result is the JSON document.
type Result struct {
	HealthFailure *Scenario          `json:"health_failure"`
	Graceful      *Scenario          `json:"graceful"`
	HardKill      *Scenario          `json:"hard_kill"`
	Frozen        *Scenario          `json:"frozen_agent"`
	PoweredOff    *Scenario          `json:"powered_off"`
	Soak          *Soak              `json:"soak,omitempty"`
	ECMPSpread    map[string]float64 `json:"ecmp_spread"`
	// FailedConnectsTotal counts every failed client connection of the whole run, including
	// those outside the fault windows (routes coming back re-hash flows too).
	FailedConnectsTotal int `json:"failed_connects_total"`
	ConnectsTotal       int `json:"connects_total"`
	// AgentPeakRSSMiB is the largest VmHWM of the agents running at the end (bgp mode);
	// AgentAnonRSSMiB the largest anonymous (heap, stacks) part of their resident memory.
	AgentPeakRSSMiB float64        `json:"agent_peak_rss_mib"`
	AgentAnonRSSMiB float64        `json:"agent_anon_rss_mib"`
	Setup           map[string]any `json:"setup"`
}

func TestBenchBGP(t *testing.T) {
	if os.Getenv("CAPLB_BENCH_BGP") == "" {
		t.Skip("benchmark: run it with `make bench-bgp`")
	}
	bgplab.SkipUnlessFRR(t)
	trials := 20
	if v, err := strconv.Atoi(os.Getenv("BENCH_TRIALS")); err == nil && v > 0 {
		trials = v
	}
	out := os.Getenv("BENCH_OUT")
	if out == "" {
		out = "bench-bgp.json"
	}

	dir := t.TempDir()
	agentBin, standinBin := filepath.Join(dir, "caplb"), filepath.Join(dir, "standin")
	for pkg, bin := range map[string]string{"./cmd/caplb-agent": agentBin, "./e2e/lab/standin": standinBin} {
		if err := lab.BuildBinary(pkg, bin); err != nil {
			t.Fatal(err)
		}
	}
	l := lab.NewT(t, "bgpbench")
	c, err := bgplab.StartBGPCluster(l, bgplab.BGPClusterOptions{
		Routed: bgplab.RoutedOptions{Nodes: 3}, AgentBinary: agentBin, StandinBinary: standinBin,
		HoldTime: holdTime, HealthInterval: healthInterval, HealthFall: healthFall, Drain: drain, BFD: bfdInterval,
	})
	if err != nil {
		t.Fatal(err)
	}
	fib, err := c.FIB()
	if err != nil {
		t.Fatal(err)
	}
	defer fib.Close()
	b := &bench{t: t, c: c, fib: fib, vip: c.VIPs[0]}
	b.waitHops(len(c.Members))
	b.waitBFD()

	res := Result{Setup: map[string]any{
		"nodes": len(c.Members), "router": "FRR 8.4 (Debian) bgpd+bfdd+zebra, maximum-paths 16, fib_multipath_hash_policy=1",
		"bfd":         fmt.Sprintf("%v x 3 both ways", bfdInterval),
		"hold_time_s": holdTime.Seconds(), "keepalive_s": (holdTime / 3).Seconds(),
		"health_interval_ms": healthInterval.Milliseconds(), "health_fall": healthFall, "drain_ms": drain.Milliseconds(),
		"client_connects_per_s": int(time.Second / (loadInterval / loadWorkers)),
		"clock":                 "fault injected -> netlink sees the member's next hop leave the router's FIB route",
	}}

	res.ECMPSpread = b.spread(900)
	t.Logf("ECMP spread over 900 connections: %v", res.ECMPSpread)

	load := bgplab.StartLoad(c.Client, netip.AddrPortFrom(b.vip, uint16(c.Port)).String(), loadWorkers, loadInterval)
	b.load = load

	res.HealthFailure = b.run("health_failure", trials, func(m *bgplab.BGPMember) {
		b.must(m.FailHealth(true))
	}, func(m *bgplab.BGPMember, _ time.Time) {
		b.must(m.FailHealth(false))
	})
	res.Graceful = b.runGraceful(trials)
	res.HardKill = b.run("hard_kill", trials, func(m *bgplab.BGPMember) {
		b.must(m.Agent.Signal(syscall.SIGKILL))
	}, func(m *bgplab.BGPMember, _ time.Time) {
		<-m.Agent.Done()
		b.must(m.StartAgent())
	})
	res.HardKill.HoldTimeMs = float64(holdTime.Milliseconds())
	res.HardKill.Note = "agent SIGKILLed: the kernel closes its TCP sessions, so the router drops the routes at once, not after the hold time"
	res.Frozen = b.run("frozen_agent", trials, func(m *bgplab.BGPMember) {
		b.must(m.Agent.Signal(syscall.SIGSTOP))
	}, func(m *bgplab.BGPMember, _ time.Time) {
		b.must(m.Agent.Signal(syscall.SIGCONT))
	})
	res.Frozen.HoldTimeMs = float64(holdTime.Milliseconds())
	res.Frozen.Note = "agent SIGSTOPped (a hung node that keeps its TCP sessions): withdrawn when the router's BFD session goes down (300 ms x 3), before the hold timer"
	res.PoweredOff = b.run("powered_off", trials, func(m *bgplab.BGPMember) {
		b.must(b.dropLink(m, true))
	}, func(m *bgplab.BGPMember, _ time.Time) {
		b.must(b.dropLink(m, false))
	})
	res.PoweredOff.HoldTimeMs = float64(holdTime.Milliseconds())
	res.PoweredOff.Note = "the member's link silently drops every packet both ways, carrier up (nftables drop on its eth0): withdrawn when BFD goes down"
	if d, err := time.ParseDuration(os.Getenv("BENCH_SOAK")); err == nil && d > 0 {
		res.Soak = b.soak(d)
	}

	for _, m := range c.Members {
		if hwm, err := m.Agent.VmHWM(); err == nil {
			res.AgentPeakRSSMiB = max(res.AgentPeakRSSMiB, math.Round(float64(hwm)/(1<<20)*10)/10)
		}
		res.AgentAnonRSSMiB = max(res.AgentAnonRSSMiB, rssAnonMiB(m.Agent.Pid()))
	}
	all := load.Stop()
	b.explain(all)
	res.ConnectsTotal = len(all)
	for _, a := range all {
		if a.Err != nil {
			res.FailedConnectsTotal++
		}
	}
	doc, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(out, append(doc, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %s:\n%s", out, doc)
	fmt.Printf("\nBGP VIP benchmark (%d trials each, hold time %v)\n", trials, holdTime)
	for _, s := range []struct {
		name string
		s    *Scenario
	}{{"health_failure", res.HealthFailure}, {"graceful", res.Graceful}, {"hard_kill", res.HardKill}, {"frozen_agent", res.Frozen}, {"powered_off", res.PoweredOff}} {
		fmt.Printf("  %-15s p50 %7.1f ms  p99 %7.1f ms  max %7.1f ms  failed connects %d/%d (dial %d, reset after connect %d)\n",
			s.name, s.s.P50, s.s.P99, s.s.Max, s.s.FailedConnects, s.s.Connects, s.s.FailedDials, s.s.ResetsAfterConnect)
	}
	fmt.Printf("  ecmp_spread     %v\n  failed connects over the whole run: %d/%d\n  agent peak RSS  %.1f MiB (anonymous %.1f MiB)\n",
		res.ECMPSpread, res.FailedConnectsTotal, res.ConnectsTotal, res.AgentPeakRSSMiB, res.AgentAnonRSSMiB)
	if res.Soak != nil {
		fmt.Printf("  soak            %.0f s with %d busy loops: %d BFD session flaps, %d FIB next-hop drops\n",
			res.Soak.Seconds, res.Soak.BusyLoops, res.Soak.BFDFlaps, res.Soak.FIBDrops)
	}
}

type bench struct {
	t      *testing.T
	c      *bgplab.BGPCluster
	fib    *bgplab.FIB
	vip    netip.Addr
	load   *bgplab.Load
	events []event
}

// event is a step of the run, to attribute failed connects outside the fault windows.
type event struct {
	at   time.Time
	what string
}

func (b *bench) mark(format string, args ...any) {
	b.events = append(b.events, event{time.Now(), fmt.Sprintf(format, args...)})
}

// explain logs every failed connect of the run with the step it followed.
func (b *bench) explain(all []bgplab.Attempt) {
	for _, a := range all {
		if a.Err == nil {
			continue
		}
		last := event{what: "start"}
		for _, e := range b.events {
			if e.at.After(a.Start) {
				break
			}
			last = e
		}
		b.t.Logf("failed connect %v after %q: %v", a.Start.Sub(last.at).Round(time.Millisecond), last.what, a.Err)
	}
}

func (b *bench) must(err error) {
	b.t.Helper()
	if err != nil {
		b.t.Fatal(err)
	}
}

// waitHops waits until the VIP's route has n next hops.
func (b *bench) waitHops(n int) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), settle)
	defer cancel()
	if _, hops, err := b.fib.WaitNextHops(ctx, bgplab.HostPrefix(b.vip), func(h []netip.Addr) bool { return len(h) == n }); err != nil {
		b.t.Fatalf("waiting for %d next hops (have %v): %v", n, hops, err)
	}
}

// withdrawn waits until m's next hop left the VIP's route and returns when it did.
func (b *bench) withdrawn(m *bgplab.BGPMember) time.Time {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), holdTime+5*time.Second)
	defer cancel()
	at, hops, err := b.fib.WaitNextHops(ctx, bgplab.HostPrefix(b.vip), func(h []netip.Addr) bool { return !slices.Contains(h, m.IPv4) })
	if err != nil {
		b.t.Fatalf("%s's route did not leave the FIB (next hops %v): %v", m.Name, hops, err)
	}
	return at
}

// run injects fault into a member (round robin), times the route's removal, counts failed
// connects, repairs and waits until every member is back.
func (b *bench) run(name string, trials int, fault func(*bgplab.BGPMember), repair func(*bgplab.BGPMember, time.Time)) *Scenario {
	s := &Scenario{Trials: trials}
	for i := 0; i < trials; i++ {
		m := b.c.Members[i%len(b.c.Members)]
		b.mark("%s fault on %s", name, m.Name)
		start := time.Now()
		fault(m)
		at := b.withdrawn(m)
		b.mark("%s: %s left the FIB", name, m.Name)
		s.samples = append(s.samples, at.Sub(start))
		window := at.Add(time.Second)
		time.Sleep(time.Until(window)) // let the window's attempts finish before counting
		b.count(s, start, window)
		b.mark("%s repair of %s", name, m.Name)
		repair(m, at)
		b.waitHops(len(b.c.Members))
		b.waitBFD()
		b.mark("%s: %s back in the FIB", name, m.Name)
	}
	s.finish()
	b.t.Logf("%s: p50 %.1f ms p99 %.1f ms max %.1f ms, failed connects %d/%d", name, s.P50, s.P99, s.Max, s.FailedConnects, s.Connects)
	return s
}

// runGraceful quiesces a member, times the withdrawal, lets the drain pass, then takes the
// member's API server away (as the node's removal would): no client may notice.
func (b *bench) runGraceful(trials int) *Scenario {
	s := &Scenario{Trials: trials,
		Note: "POST /quiesce, route leaves the FIB, drain, then the member's API server stops; failed connects counted until 1s after it stopped"}
	ctx := context.Background()
	for i := 0; i < trials; i++ {
		m := b.c.Members[i%len(b.c.Members)]
		b.mark("graceful: quiesce %s", m.Name)
		start := time.Now()
		b.must(m.Quiesce(ctx, true))
		at := b.withdrawn(m)
		b.mark("graceful: %s left the FIB", m.Name)
		s.samples = append(s.samples, at.Sub(start))
		time.Sleep(time.Until(at.Add(drain)))
		b.mark("graceful: %s API server stops", m.Name)
		b.must(m.StopStandin())
		end := time.Now().Add(time.Second)
		time.Sleep(time.Until(end))
		b.count(s, start, end)
		b.mark("graceful: %s returns", m.Name)
		b.must(m.StartStandin())
		b.must(m.Quiesce(ctx, false))
		b.waitHops(len(b.c.Members))
		b.mark("graceful: %s back in the FIB", m.Name)
	}
	s.finish()
	b.t.Logf("graceful: p50 %.1f ms p99 %.1f ms max %.1f ms, failed connects %d/%d", s.P50, s.P99, s.Max, s.FailedConnects, s.Connects)
	return s
}

func (b *bench) count(s *Scenario, from, to time.Time) {
	for _, a := range b.load.Between(from, to) {
		s.Connects++
		if a.Err != nil {
			s.FailedConnects++
			if a.Dialed {
				s.ResetsAfterConnect++
			} else {
				s.FailedDials++
			}
			b.t.Logf("failed connect %v after the fault: %v", a.Start.Sub(from).Round(time.Millisecond), a.Err)
		}
	}
}

// spread dials n times and returns each member's share.
func (b *bench) spread(n int) map[string]float64 {
	counts := map[string]int{}
	for i := 0; i < n; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		name, err := b.c.Dial(ctx, b.vip)
		cancel()
		b.must(err)
		counts[name]++
	}
	out := map[string]float64{}
	for k, v := range counts {
		out[k] = math.Round(float64(v)/float64(n)*1000) / 1000
	}
	return out
}

// finish computes the percentiles (nearest rank).
func (s *Scenario) finish() {
	d := slices.Clone(s.samples)
	slices.Sort(d)
	pct := func(p float64) float64 {
		if len(d) == 0 {
			return 0
		}
		i := int(math.Ceil(p*float64(len(d)))) - 1
		i = max(0, min(i, len(d)-1))
		return ms(d[i])
	}
	s.P50, s.P99 = pct(0.50), pct(0.99)
	if len(d) > 0 {
		s.Max = ms(d[len(d)-1])
	}
}

func ms(d time.Duration) float64 { return math.Round(float64(d.Microseconds())/10) / 100 }

// rssAnonMiB is the process's anonymous resident memory (RssAnon), 0 if unreadable.
func rssAnonMiB(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "RssAnon:"); ok {
			kb, err := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")))
			if err == nil {
				return math.Round(float64(kb)/1024*10) / 10
			}
		}
	}
	return 0
}
