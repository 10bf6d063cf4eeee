//go:build linux

// Command wireguard benchmarks the WireGuard backend in the network-namespace lab (wglab, root):
// per fault scenario the worst client stall (p50/p99 over trials) and the failed requests, the
// latency the gateway and tunnel add, throughput through one gateway, and the gateway's memory.
// `make bench-wireguard` runs it; JSON goes to $BENCH_OUT.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/caplb/caplb/e2e/lab"
	"github.com/caplb/caplb/e2e/lab/wglab"
)

// Load shape: 4 clients, each sending a request on a fresh connection every ~5 ms; a client
// gives up on a gateway after 500 ms and tries the next (several DNS records).
const (
	workers     = 4
	pause       = 5 * time.Millisecond
	clientDial  = 500 * time.Millisecond
	clientTotal = 10 * time.Second
	window      = 3 * time.Second // requests started this long after a fault are its victims
)

// Scenario is one fault's figures over its trials.
type Scenario struct {
	Trials int `json:"trials"`
	// P50Ms / P99Ms: per trial, the longest request (failed ones until they failed) among those
	// started within 3 s after the fault; percentiles over trials.
	P50Ms          float64 `json:"p50_ms"`
	P99Ms          float64 `json:"p99_ms"`
	FailedRequests int     `json:"failed_requests"`
	// Of those: requests already in flight at the fault (a killed process breaks them; nobody
	// can save those) and requests started after it; FailedDuringFault of the latter started
	// while the fault was being injected (e.g. between SIGKILL and the process's death).
	FailedInFlight    int    `json:"failed_in_flight"`
	FailedAfterFault  int    `json:"failed_after_fault"`
	FailedDuringFault int    `json:"failed_during_fault"`
	Requests          int    `json:"requests"`
	Description       string `json:"description"`
}

// Result is the JSON document.
type Result struct {
	Scenarios map[string]*Scenario `json:"scenarios"`
	// Request on a fresh connection (TCP + TLS + GET), client -> gateway -> tunnel -> NAT ->
	// member, minus the same request to the same stand-in served directly on the gateway host.
	ProxyAddedLatencyUsP50 float64 `json:"proxy_added_latency_us_p50"`
	DirectLatencyUsP50     float64 `json:"direct_latency_us_p50"`
	GatewayLatencyUsP50    float64 `json:"gateway_latency_us_p50"`
	// The fresh-connection request split into its phases, per path.
	DirectPhasesUsP50  Phases `json:"direct_phases_us_p50"`
	GatewayPhasesUsP50 Phases `json:"gateway_phases_us_p50"`
	// The same on a kept-alive connection (the tunnel's per-request cost without handshakes).
	ProxyAddedLatencyUsP50KeepAlive float64 `json:"proxy_added_latency_us_p50_keepalive"`
	// One HTTPS stream through one gateway, and directly for comparison.
	ThroughputMiBs       float64 `json:"throughput_mib_s"`
	DirectThroughputMiBs float64 `json:"direct_throughput_mib_s"`
	// Gateway process memory (VmRSS) after the latency runs (API-like traffic), after the bulk
	// transfers, and its peak (VmHWM): wireguard-go queues packets in 64 KiB buffers, so a bulk
	// stream that fills its queues costs tens of MiB until the Go runtime returns them.
	GatewayRSSMiB          float64 `json:"gateway_rss_mib"`
	GatewayRSSAfterBulkMiB float64 `json:"gateway_rss_after_bulk_mib"`
	GatewayPeakRSSMiB      float64 `json:"gateway_peak_rss_mib"`
	// The largest member process (caplb-agent wireguard) peak, after the same runs.
	MemberPeakRSSMiB float64 `json:"member_peak_rss_mib"`
	// Device: the tunnel device of every gateway and member (netstack or tun).
	Device      string    `json:"device"`
	Started     time.Time `json:"started"`
	Cores       int       `json:"cores"`
	Workers     int       `json:"workers"`
	LoadAverage string    `json:"load_average_at_start"`
}

func main() {
	trials := flag.Int("trials", 20, "trials per scenario")
	out := flag.String("out", os.Getenv("BENCH_OUT"), "JSON output (default $BENCH_OUT or _out/bench-wireguard.json)")
	only := flag.String("scenarios", "all", "comma-separated fault scenarios to run after the path figures (all, or none for latency/throughput/RSS only)")
	device := flag.String("device", "netstack", "tunnel device of every gateway and member: netstack or tun")
	flag.Parse()
	if *out == "" {
		*out = "_out/bench-wireguard.json"
	}
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "bench-wireguard: needs root (network namespaces)")
		os.Exit(1)
	}
	if err := run(*trials, *out, *only, *device); err != nil {
		fmt.Fprintln(os.Stderr, "bench-wireguard:", err)
		os.Exit(1)
	}
}

func run(trials int, out, only, device string) error {
	bins, cleanup, err := wglab.BuildBinaries()
	if err != nil {
		return err
	}
	defer cleanup()
	l, err := lab.New("wgb")
	if err != nil {
		return err
	}
	defer l.Close()
	w, err := wglab.Start(l, bins, wglab.Options{Device: device})
	if err != nil {
		return err
	}
	la, _ := os.ReadFile("/proc/loadavg")
	res := &Result{Scenarios: map[string]*Scenario{}, Started: time.Now().UTC(), Workers: workers, Cores: numCPU(),
		LoadAverage: strings.TrimSpace(string(la)), Device: device}
	if err := measurePath(w, res); err != nil {
		return fmt.Errorf("latency/throughput: %w", err)
	}
	for _, sc := range scenarios(w) {
		if only != "all" && !slices.Contains(strings.Split(only, ","), sc.name) {
			continue
		}
		s, err := runScenario(w, sc, trials)
		if err != nil {
			return fmt.Errorf("%s: %w", sc.name, err)
		}
		res.Scenarios[sc.name] = s
		fmt.Fprintf(os.Stderr, "%-13s p50 %7.1f ms  p99 %7.1f ms  failed %d (in flight %d, after %d) of %d\n", sc.name, s.P50Ms, s.P99Ms,
			s.FailedRequests, s.FailedInFlight, s.FailedAfterFault, s.Requests)
	}
	b, _ := json.MarshalIndent(res, "", "  ")
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(out, append(b, '\n'), 0o644); err != nil {
		return err
	}
	fmt.Println(string(b))
	fmt.Fprintln(os.Stderr, "wrote", out)
	return nil
}

type scenario struct {
	name, desc string
	// fault injects the fault of trial i and returns when it is done (the load runs meanwhile).
	fault func(i int) error
	// heal undoes it and waits until every member is healthy on both gateways again.
	heal func(i int) error
}

func scenarios(w *wglab.Lab) []scenario {
	ctx := context.Background()
	all := []string{}
	for _, m := range w.Members {
		all = append(all, m.Name)
	}
	healthy := func() error { return w.WaitHealthy(30*time.Second, all...) }
	return []scenario{
		{name: "gateway_kill", desc: "gw1 (the clients' first record) SIGKILLed; clients fall over to gw2",
			fault: func(int) error { return w.KillGateway(w.Gateways[0]) },
			heal: func(int) error {
				if err := w.StartGateway(w.Gateways[0]); err != nil {
					return err
				}
				return healthy()
			}},
		{name: "member_kill", desc: "a member's agent SIGKILLed (its tunnel dies; the API server stays)",
			fault: func(i int) error { return w.KillMember(w.Members[i%len(w.Members)]) },
			heal: func(i int) error {
				if err := w.StartMember(w.Members[i%len(w.Members)]); err != nil {
					return err
				}
				return healthy()
			}},
		{name: "nat_rebind", desc: "conntrack -F on the NAT router: every member's mapping flushed",
			fault: func(int) error { return w.FlushNAT(ctx) },
			heal:  func(int) error { time.Sleep(2 * time.Second); return healthy() }},
		{name: "graceful", desc: "a member quiesced on both gateways (what the pre-drain hook does)",
			fault: func(i int) error { return w.Quiesce(w.Members[i%len(w.Members)].Name, true) },
			heal: func(i int) error {
				if err := w.Quiesce(w.Members[i%len(w.Members)].Name, false); err != nil {
					return err
				}
				return healthy()
			}},
		{name: "key_rotation", desc: "a member rotates its key make-before-break (returns once the new key is in rotation)",
			fault: func(i int) error { return w.Rotate(w.Members[i%len(w.Members)]) },
			heal:  func(int) error { time.Sleep(500 * time.Millisecond); return healthy() }},
	}
}

func runScenario(w *wglab.Lab, sc scenario, trials int) (*Scenario, error) {
	s := &Scenario{Trials: trials, Description: sc.desc}
	client := w.NewClient(clientDial, clientTotal)
	var stalls []float64
	for i := range trials {
		ld := client.StartLoad(workers, pause)
		time.Sleep(500 * time.Millisecond)
		t0 := time.Now()
		if err := sc.fault(i); err != nil {
			ld.Stop()
			return nil, fmt.Errorf("trial %d fault: %w", i, err)
		}
		done := time.Now()
		time.Sleep(window)
		rs := ld.Stop()
		for _, r := range wglab.Failures(wglab.After(rs, t0)) {
			if r.Start.Before(done) {
				s.FailedDuringFault++
			}
		}
		after := wglab.After(rs, t0)
		stalls = append(stalls, float64(wglab.Stall(rs, t0, window).Microseconds())/1000)
		// Requests in flight at the fault count too: they are the ones a kill can break.
		inFlight := 0
		for _, r := range rs {
			if r.Start.Before(t0) && r.End.After(t0) && r.Err != nil {
				inFlight++
			}
		}
		s.FailedInFlight += inFlight
		s.FailedAfterFault += len(wglab.Failures(after))
		s.FailedRequests += len(wglab.Failures(after)) + inFlight
		s.Requests += len(after)
		if err := sc.heal(i); err != nil {
			return nil, fmt.Errorf("trial %d heal: %w", i, err)
		}
	}
	s.P50Ms, s.P99Ms = pct(stalls, 50), pct(stalls, 99)
	return s, nil
}

// pct is the nearest-rank percentile.
func pct(v []float64, p float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	i := int(float64(len(s))*p/100+0.999999) - 1
	return s[max(0, min(i, len(s)-1))]
}
