//go:build linux

// Command arp benchmarks ARP-mode failover of the real caplb agent in the
// network lab (e2e/lab): three nodes with stand-in API servers on a bridge and
// a client that connects to VIP:6443 every few milliseconds and records which
// node answered. Per scenario (hard_kill, link_cut, node_link_down, link_flap,
// health_failure, graceful) it runs -trials trials and reports p50/p99/max
// time from the fault to the first connect answered by the new owner, failed
// connects, time with two kernels holding the VIP, and the agents' peak RSS.
// Then it runs the same scenarios on keepalived (VRRPv3, 100 ms adverts) in
// an identical lab with the same client, and reports the peer's figures and
// the ratios caplb/keepalived per scenario. Run as root:
//
//	make bench-arp          # or: go run ./e2e/bench/arp -trials 20
//
// JSON goes to $BENCH_OUT (default _out/bench-arp.json), an SVG timeline of
// one trial to _out/bench-arp-timeline.svg.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/caplb/caplb/e2e/lab"
	"github.com/caplb/caplb/e2e/lab/arplab"
)

// config is one run of the benchmark, as the flags set it.
type config struct {
	trials    int
	scenarios []string
	// withCaplb false runs only the peer (to debug its lab).
	withCaplb bool
	// peer runs right after caplb in the same lab: "keepalived" or "none".
	peer     string
	interval time.Duration // the client's connect interval
	out, svg string        // the JSON result and the SVG timeline
	// agentPkg is built and measured unless agentBin names a prebuilt binary.
	agentPkg, agentBin string
	verbose            bool
	// spread runs caplb a second time with loadBalancing: spread (shares,
	// added latency, quiesce, and the scenarios) before the peer.
	spread bool
}

func main() {
	var cfg config
	flag.IntVar(&cfg.trials, "trials", 20, "trials per scenario")
	scenarios := flag.String("scenarios", "hard_kill,link_cut,node_link_down,link_flap,health_failure,graceful", "comma-separated scenarios")
	flag.BoolVar(&cfg.withCaplb, "caplb", true, "run caplb (false: only the peer, to debug its lab)")
	flag.StringVar(&cfg.peer, "peer", "keepalived", "peer run right after caplb in the same lab: keepalived or none")
	flag.DurationVar(&cfg.interval, "interval", 5*time.Millisecond, "client connect interval")
	flag.StringVar(&cfg.out, "out", envOr("BENCH_OUT", "_out/bench-arp.json"), "JSON result file")
	flag.StringVar(&cfg.agentPkg, "agent-pkg", "./cmd/caplb-agent", "package of the binary whose `agent` command is measured (./cmd/caplb for the full binary)")
	flag.StringVar(&cfg.agentBin, "agent-bin", "", "a prebuilt agent binary to measure instead of building -agent-pkg (e.g. an older commit's, for a before/after run)")
	flag.BoolVar(&cfg.verbose, "v", false, "print every failed connect")
	flag.BoolVar(&cfg.spread, "spread", true, "also run caplb in spread mode (loadBalancing: spread): shares, added latency, quiesce, failover")
	flag.StringVar(&cfg.svg, "svg", "", "SVG timeline (default: next to -out, bench-arp-timeline.svg)")
	flag.Parse()
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "bench-arp needs root (network namespaces)")
		os.Exit(2)
	}
	cfg.scenarios = strings.Split(*scenarios, ",")
	if cfg.svg == "" {
		cfg.svg = filepath.Join(filepath.Dir(cfg.out), "bench-arp-timeline.svg")
	}
	if err := run(cfg); err != nil {
		fmt.Fprintln(os.Stderr, "bench-arp:", err)
		os.Exit(1)
	}
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// daemonRun is one daemon's pass over the scenarios.
type daemonRun struct {
	summaries map[string]summary
	spread    *spreadFigures // the spread pass only
	timeline  *trialData
	rss, anon float64
}

func run(cfg config) error {
	scenarios, interval, out, svgPath, peer, agentPkg := cfg.scenarios, cfg.interval, cfg.out, cfg.svg, cfg.peer, cfg.agentPkg
	for i := range scenarios {
		scenarios[i] = strings.TrimSpace(scenarios[i])
		if _, ok := scenarioFuncs[scenarios[i]]; !ok {
			return fmt.Errorf("unknown scenario %q", scenarios[i])
		}
	}
	var kaBin, kaVersion string
	if peer == "keepalived" {
		var err error
		if kaBin, err = findKeepalived(); err != nil {
			return err
		}
		kaVersion = keepalivedVersion(kaBin)
	} else if peer != "none" {
		return fmt.Errorf("-peer %q: want keepalived or none", peer)
	}
	dir, err := os.MkdirTemp("", "caplb-bench-arp-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	agentBin, standinBin := filepath.Join(dir, "caplb"), filepath.Join(dir, "standin")
	fmt.Println("building caplb and the stand-in apiserver...")
	if cfg.agentBin != "" {
		agentBin, agentPkg = cfg.agentBin, cfg.agentBin
	} else if err := lab.BuildBinary(agentPkg, agentBin); err != nil {
		return err
	}
	if err := lab.BuildBinary("./e2e/lab/standin", standinBin); err != nil {
		return err
	}

	caplb := &daemonRun{summaries: map[string]summary{}}
	if cfg.withCaplb {
		caplb, err = runDaemon("benchArp", arplab.ClusterOptions{AgentBinary: agentBin, StandinBinary: standinBin},
			func(b *bench) (daemon, error) { return caplbDaemon{b: b}, nil }, cfg, false)
		if err != nil {
			return err
		}
	}
	var spread *daemonRun
	if cfg.withCaplb && cfg.spread {
		fmt.Println("\ncaplb in spread mode (loadBalancing: spread), nodes forwarding, same client")
		spread, err = runDaemon("benchArpSp", spreadLabOptions(agentBin, standinBin),
			func(b *bench) (daemon, error) { return spreadDaemon{caplbDaemon{b: b}}, nil }, cfg, true)
		if err != nil {
			return fmt.Errorf("spread: %w", err)
		}
	}
	var ka *daemonRun
	if kaBin != "" {
		fmt.Printf("\npeer: %s (VRRPv3, advert_int 0.1, nopreempt), same lab, same client\n", kaVersion)
		ka, err = runDaemon("benchArpKa", arplab.ClusterOptions{StandinBinary: standinBin, NoAgents: true},
			func(b *bench) (daemon, error) { return newKeepalived(b.c, kaBin) }, cfg, false)
		if err != nil {
			return fmt.Errorf("keepalived: %w", err)
		}
	}

	results := map[string]any{}
	fmt.Printf("\n%-15s %22s", "scenario", "caplb p50 / p99 ms")
	if ka != nil {
		fmt.Printf(" %26s %18s", "keepalived p50 / p99 ms", "ratio p50 / p99")
	}
	fmt.Println()
	for _, sc := range scenarios {
		s := caplb.summaries[sc]
		r := scenarioResult{summary: s}
		fmt.Printf("%-15s %10.0f / %-9.0f", sc, s.P50, s.P99)
		if ka != nil {
			p := ka.summaries[sc]
			r.Peer, r.PeerVersion = "keepalived", kaVersion
			r.PeerP50, r.PeerP99, r.PeerMax = p.P50, p.P99, p.Max
			r.PeerFailed, r.PeerDuplicateMS, r.PeerFailoverMS = p.FailedConnects, p.DuplicateOwnerMS, p.FailoverMS
			r.RatioP50, r.RatioP99 = ratio(s.P50, p.P50), ratio(s.P99, p.P99)
			fmt.Printf(" %12.0f / %-11.0f %8.2f / %-6.2f", p.P50, p.P99, r.RatioP50, r.RatioP99)
		}
		fmt.Println()
		results[sc] = r
	}
	if spread != nil {
		f := spread.spread
		f.Scenarios = map[string]scenarioResult{}
		fmt.Printf("\n%-15s %22s", "spread", "caplb p50 / p99 ms")
		if ka != nil {
			fmt.Printf(" %26s %18s", "keepalived p50 / p99 ms", "ratio p50 / p99")
		}
		fmt.Printf(" %8s\n", "failed")
		for _, sc := range scenarios {
			s := spread.summaries[sc]
			r := scenarioResult{summary: s}
			fmt.Printf("%-15s %10.0f / %-9.0f", sc, s.P50, s.P99)
			if ka != nil {
				p := ka.summaries[sc]
				r.Peer, r.PeerVersion, r.PeerP50, r.PeerP99, r.PeerMax = "keepalived", kaVersion, p.P50, p.P99, p.Max
				r.PeerFailed, r.PeerDuplicateMS, r.PeerFailoverMS = p.FailedConnects, p.DuplicateOwnerMS, p.FailoverMS
				r.RatioP50, r.RatioP99 = ratio(s.P50, p.P50), ratio(s.P99, p.P99)
				fmt.Printf(" %12.0f / %-11.0f %8.2f / %-6.2f", p.P50, p.P99, r.RatioP50, r.RatioP99)
			}
			fmt.Printf(" %8d\n", s.FailedConnects)
			f.Scenarios[sc] = r
		}
		f.GracefulFailed = spread.summaries["graceful"].FailedConnects
		results["spread"] = f
		fmt.Printf("spread: shares %v, added latency p50 %.0f us, failed connects: quiesce %d, graceful hand-over %d\n",
			f.Shares, f.AddedLatencyUsP50, f.QuiesceFailed, f.GracefulFailed)
	}
	results["agent_rss_mib"] = caplb.rss
	results["agent_rss_anon_mib"] = caplb.anon
	results["client_interval_ms"] = ms(interval)
	results["agent_binary"] = agentPkg
	if ka != nil {
		results["peer"] = map[string]string{"name": "keepalived", "version": kaVersion,
			"config": "VRRPv3, advert_int 0.1, nopreempt, all BACKUP, priorities 100/99/98, health via track_file (weight 0)"}
	}
	fmt.Printf("agent peak RSS (VmHWM, max over agents) %.1f MiB; anonymous (heap+stacks) at most %.1f MiB\n", caplb.rss, caplb.anon)

	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	j, _ := json.MarshalIndent(results, "", "  ")
	if err := os.WriteFile(out, append(j, '\n'), 0o644); err != nil {
		return err
	}
	fmt.Println("wrote", out)
	for _, t := range []struct {
		run  *daemonRun
		path string
	}{{caplb, svgPath}, {ka, strings.TrimSuffix(svgPath, ".svg") + "-keepalived.svg"}} {
		if t.run == nil || t.run.timeline == nil {
			continue
		}
		if err := os.WriteFile(t.path, renderSVG(t.run.timeline), 0o644); err != nil {
			return err
		}
		fmt.Println("wrote", t.path)
	}
	return nil
}

// scenarioResult is one scenario's JSON: caplb's figures and the peer's
// beside them, with caplb/peer ratios (the figures that hold on a noisy
// machine, since both ran in the same session).
type scenarioResult struct {
	summary
	Peer            string    `json:"peer,omitempty"`
	PeerVersion     string    `json:"peer_version,omitempty"`
	PeerP50         float64   `json:"peer_p50_ms,omitempty"`
	PeerP99         float64   `json:"peer_p99_ms,omitempty"`
	PeerMax         float64   `json:"peer_max_ms,omitempty"`
	PeerFailed      int       `json:"peer_failed_connects"`
	PeerDuplicateMS float64   `json:"peer_duplicate_owner_ms"`
	PeerFailoverMS  []float64 `json:"peer_failover_ms,omitempty"`
	RatioP50        float64   `json:"ratio_p50,omitempty"`
	RatioP99        float64   `json:"ratio_p99,omitempty"`
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return math.Round(a/b*100) / 100
}

// runDaemon builds a lab named labName, starts the daemon on every node and
// runs every scenario on it.
// spread: the spread pass (the client's ARP entry tells the holder; the
// shares, latency and quiesce figures are measured first).
func runDaemon(labName string, opts arplab.ClusterOptions, mk func(*bench) (daemon, error), cfg config, spread bool) (*daemonRun, error) {
	trials, scenarios, interval, verbose := cfg.trials, cfg.scenarios, cfg.interval, cfg.verbose
	l, err := lab.New(labName)
	if err != nil {
		return nil, err
	}
	defer l.Close()
	c, err := arplab.StartCluster(l, opts)
	if err != nil {
		return nil, err
	}
	b := &bench{c: c, verbose: verbose}
	if b.d, err = mk(b); err != nil {
		return nil, err
	}
	var view *clientView
	if spread {
		if view, err = newClientView(c); err != nil {
			return nil, err
		}
	}
	b.rec = startRecorder(c, arplab.VIPv4, interval, 250*time.Millisecond, view)
	defer b.rec.close()
	if verbose {
		macs := map[string]string{}
		for _, n := range c.Nodes {
			if out, err := n.NS.Run(context.Background(), "cat", "/sys/class/net/eth0/address"); err == nil {
				macs[strings.TrimSpace(out)] = n.Name
			}
		}
		if err := sniff(c, macs); err != nil {
			return nil, err
		}
	}
	if _, err := b.waitStable(30 * time.Second); err != nil {
		return nil, fmt.Errorf("%s: cluster never settled: %w (logs in %s)", b.d.name(), err, l.Dir())
	}
	res := &daemonRun{summaries: map[string]summary{}}
	if spread {
		if res.spread, err = measureSpread(b, 6); err != nil {
			return nil, fmt.Errorf("%s: %w (logs in %s)", b.d.name(), err, l.Dir())
		}
	}
	for _, sc := range scenarios {
		fn := scenarioFuncs[sc]
		var ts []trialResult
		for i := 0; i < trials; i++ {
			tr, data, err := b.trial(sc, fn)
			if err != nil {
				return nil, fmt.Errorf("%s %s trial %d: %w (logs in %s)", b.d.name(), sc, i+1, err, l.Dir())
			}
			fmt.Printf("%-10s %-15s trial %2d: %-3s -> %-3s %7.1f ms  failed=%d dup=%.0fms\n", b.d.name(), sc, i+1, tr.Old, tr.New, ms(tr.Failover), tr.Failed, ms(tr.Duplicate))
			ts = append(ts, tr)
			// The owner's own link going down shows the most: the outage, then the new owner.
			if sc == "node_link_down" && i == 0 || res.timeline == nil {
				res.timeline = data
			}
		}
		s := summarise(ts)
		res.summaries[sc] = s
		fmt.Printf("%-10s %-15s p50 %.0f ms  p99 %.0f ms  max %.0f ms  failed connects %d  duplicate owner %.0f ms (%d trials)\n",
			b.d.name(), sc, s.P50, s.P99, s.Max, s.FailedConnects, s.DuplicateOwnerMS, s.Trials)
	}
	res.rss, res.anon = b.peakRSS(), b.peakAnon()
	return res, nil
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
