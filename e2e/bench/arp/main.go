//go:build linux

// Command arp benchmarks ARP-mode failover of the real caplb agent in the
// network lab (e2e/lab): three nodes with stand-in API servers on a bridge and
// a client that connects to VIP:6443 every few milliseconds and records which
// node answered. Per scenario (hard_kill, health_failure, link_cut, graceful)
// it runs -trials trials and reports p50/p99/max time from the fault to the
// first connect answered by the new owner, failed connects, time with two
// kernels holding the VIP, and the agents' peak RSS. Run as root:
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
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/caplb/caplb/e2e/lab"
)

func main() {
	trials := flag.Int("trials", 20, "trials per scenario")
	scenarios := flag.String("scenarios", "hard_kill,health_failure,link_cut,graceful", "comma-separated scenarios")
	interval := flag.Duration("interval", 5*time.Millisecond, "client connect interval")
	out := flag.String("out", envOr("BENCH_OUT", "_out/bench-arp.json"), "JSON result file")
	agentPkg := flag.String("agent-pkg", "./cmd/caplb-agent", "package of the binary whose `agent` command is measured (./cmd/caplb for the full binary)")
	verbose := flag.Bool("v", false, "print every failed connect")
	svg := flag.String("svg", "", "SVG timeline (default: next to -out, bench-arp-timeline.svg)")
	flag.Parse()
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "bench-arp needs root (network namespaces)")
		os.Exit(2)
	}
	if *svg == "" {
		*svg = filepath.Join(filepath.Dir(*out), "bench-arp-timeline.svg")
	}
	if err := run(*agentPkg, *trials, strings.Split(*scenarios, ","), *interval, *out, *svg, *verbose); err != nil {
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

func run(agentPkg string, trials int, scenarios []string, interval time.Duration, out, svgPath string, verbose bool) error {
	dir, err := os.MkdirTemp("", "caplb-bench-arp-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	agentBin, standinBin := filepath.Join(dir, "caplb"), filepath.Join(dir, "standin")
	fmt.Println("building caplb and the stand-in apiserver...")
	if err := lab.BuildBinary(agentPkg, agentBin); err != nil {
		return err
	}
	if err := lab.BuildBinary("./e2e/lab/standin", standinBin); err != nil {
		return err
	}
	l, err := lab.New("benchArp")
	if err != nil {
		return err
	}
	defer l.Close()
	c, err := lab.StartCluster(l, lab.ClusterOptions{AgentBinary: agentBin, StandinBinary: standinBin})
	if err != nil {
		return err
	}
	b := &bench{c: c, verbose: verbose, rec: startRecorder(c, lab.VIPv4, interval, 250*time.Millisecond)}
	defer b.rec.close()
	if verbose {
		macs := map[string]string{}
		for _, n := range c.Nodes {
			if out, err := n.NS.Run(context.Background(), "cat", "/sys/class/net/eth0/address"); err == nil {
				macs[strings.TrimSpace(out)] = n.Name
			}
		}
		if err := sniff(c, macs); err != nil {
			return err
		}
	}
	if _, err := b.waitStable(30 * time.Second); err != nil {
		return fmt.Errorf("cluster never settled: %w (logs in %s)", err, l.Dir())
	}

	results := map[string]any{}
	var timeline *trialData
	for _, sc := range scenarios {
		sc = strings.TrimSpace(sc)
		fn, ok := scenarioFuncs[sc]
		if !ok {
			return fmt.Errorf("unknown scenario %q", sc)
		}
		var ts []trialResult
		for i := 0; i < trials; i++ {
			tr, data, err := b.trial(sc, fn)
			if err != nil {
				return fmt.Errorf("%s trial %d: %w (logs in %s)", sc, i+1, err, l.Dir())
			}
			fmt.Printf("%-15s trial %2d: %-3s -> %-3s %7.1f ms  failed=%d dup=%.0fms\n", sc, i+1, tr.Old, tr.New, ms(tr.Failover), tr.Failed, ms(tr.Duplicate))
			ts = append(ts, tr)
			// The link cut shows the most: the outage, then the new owner.
			if sc == "link_cut" && i == 0 || timeline == nil {
				timeline = data
			}
		}
		s := summarise(ts)
		results[sc] = s
		fmt.Printf("%-15s p50 %.0f ms  p99 %.0f ms  max %.0f ms  failed connects %d  duplicate owner %.0f ms (%d trials)\n",
			sc, s.P50, s.P99, s.Max, s.FailedConnects, s.DuplicateOwnerMS, s.Trials)
	}
	rss := b.peakRSS()
	results["agent_rss_mib"] = rss
	results["agent_rss_anon_mib"] = b.peakAnon()
	results["client_interval_ms"] = ms(interval)
	results["agent_binary"] = agentPkg
	fmt.Printf("agent peak RSS (VmHWM, max over agents) %.1f MiB; anonymous (heap+stacks) at most %.1f MiB\n", rss, b.peakAnon())

	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	j, _ := json.MarshalIndent(results, "", "  ")
	if err := os.WriteFile(out, append(j, '\n'), 0o644); err != nil {
		return err
	}
	fmt.Println("wrote", out)
	if timeline != nil {
		if err := os.WriteFile(svgPath, renderSVG(timeline), 0o644); err != nil {
			return err
		}
		fmt.Println("wrote", svgPath)
	}
	return nil
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
