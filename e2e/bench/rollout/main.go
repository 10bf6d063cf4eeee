//go:build linux

// Command rollout is `make bench-rollout`: the lifecycle lab's scenario (e2e/lifecycle) behind
// an ARP VIP and behind a BGP VIP, with its client's and sampler's figures written as JSON to
// $BENCH_OUT (default _out/bench-rollout.json), one object per backend, and an SVG timeline per
// backend beside it (<out>-arp.svg, <out>-bgp.svg). Root only.
//
// The machines run a real control plane by default (kubeadm-made etcd and kube-apiservers,
// "apiserver": "real", with client-go's figures under "client_go"); -apiserver standin (or
// CAPLB_LAB_APISERVER=standin) runs the lab's stand-in API servers instead.
//
// On a real control plane a fault pass follows (faults.go; -faults, -fault-trials): the VIP
// owner's machine killed hard and etcd losing quorum, -fault-trials times each on one 3-machine
// lab (e2e/realcp), written as one more object, {"scenario": "faults", "hard_kill": {...},
// "quorum_loss": {...}}. Every object of the JSON array names its "scenario" ("rollout" or
// "faults"). -backends ” runs the fault pass alone.
//
// -runs N (default 3) runs the rollout N times per backend: each run's object carries "run",
// "goals_met" and "goals_missed" (lifecycle.Goals), the worst run per backend is printed, and
// the command exits non-zero when any run, or the fault pass, missed a goal.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/caplb/caplb/e2e/lifecycle"
	"github.com/caplb/caplb/e2e/lifecycle/observe"
	"github.com/caplb/caplb/e2e/lifecycle/observe/clients"
)

func main() {
	backends := flag.String("backends", "arp,bgp", "comma-separated backends to run")
	runs := flag.Int("runs", 3, "rollout runs per backend; the worst is reported and every one must meet the goals")
	def, err := lifecycle.APIServerFromEnv(lifecycle.Real)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench-rollout:", err)
		os.Exit(2)
	}
	api := flag.String("apiserver", string(def), "what the machines run: real (kubeadm's etcd and kube-apiserver) or standin")
	defBoot, err := lifecycle.BootstrapFromEnv(lifecycle.CAPIBootstrap)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench-rollout:", err)
		os.Exit(2)
	}
	boot := flag.String("bootstrap", string(defBoot), "who renders the real control plane's bootstrap data: capi (CAPI's kubeadm bootstrap provider) or lab")
	faultList := flag.String("faults", faultHardKill+","+faultQuorumLoss, "fault pass on a real control plane: hard_kill, quorum_loss, or none")
	trials := flag.Int("fault-trials", 5, "trials per fault")
	hold := flag.Duration("quorum-hold", 15*time.Second, "how long the VIP is watched once every agent saw etcd's quorum lost")
	flag.Parse()
	if a := lifecycle.APIServer(*api); a != lifecycle.Real && a != lifecycle.StandIn {
		fmt.Fprintf(os.Stderr, "bench-rollout: -apiserver %q: use real or standin\n", *api)
		os.Exit(2)
	}
	if b := lifecycle.Bootstrap(*boot); b != lifecycle.CAPIBootstrap && b != lifecycle.LabBootstrap {
		fmt.Fprintf(os.Stderr, "bench-rollout: -bootstrap %q: use capi or lab\n", *boot)
		os.Exit(2)
	}
	faults, err := parseFaults(*faultList)
	if err == nil && *trials < 1 {
		err = fmt.Errorf("-fault-trials %d: at least 1", *trials)
	}
	if err == nil && *runs < 1 {
		err = fmt.Errorf("-runs %d: at least 1", *runs)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench-rollout:", err)
		os.Exit(2)
	}
	if lifecycle.APIServer(*api) != lifecycle.Real && len(faults) > 0 {
		fmt.Println("bench-rollout: the fault pass needs the real control plane; skipped with -apiserver standin")
		faults = nil
	}
	out := os.Getenv("BENCH_OUT")
	if out == "" {
		out = "_out/bench-rollout.json"
	}
	// Made before the runs: a run of 40 minutes must not end unable to write its figures.
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		fmt.Fprintln(os.Stderr, "bench-rollout:", err)
		os.Exit(1)
	}
	base := lifecycle.Options{APIServer: lifecycle.APIServer(*api)}
	if base.APIServer == lifecycle.Real {
		base.Bootstrap = lifecycle.Bootstrap(*boot)
	}
	if err := run(*backends, *runs, base, faultOptions{faults: faults, trials: *trials, hold: *hold}, out); err != nil {
		fmt.Fprintln(os.Stderr, "bench-rollout:", err)
		os.Exit(1)
	}
}

// entry is one backend's figures: the observer's, and client-go's against a real control plane.
type entry struct {
	Scenario  string              `json:"scenario"`
	APIServer lifecycle.APIServer `json:"apiserver"`
	// Run numbers the runs of one backend (1..-runs).
	Run int `json:"run"`
	// KCP and Bootstrap name who drives the control plane's Machines and renders their kubeadm
	// configuration: "lab" while the lab plays KubeadmControlPlane's order and writes kubeadm's
	// files itself, "capi" once CAPI's own controllers do.
	KCP       string `json:"kcp"`
	Bootstrap string `json:"bootstrap"`
	// KCPEtcd names whose code moves etcd's leadership off a leaving machine and removes its
	// member: "capi" — KubeadmControlPlane's own (controlplane/kubeadm/pkg), its etcd client
	// port-forwarding through the VIP — even while KCP's order is the lab's.
	KCPEtcd string `json:"kcp_etcd"`
	observe.Result
	ClientGo *clients.Result `json:"client_go,omitempty"`
	// GoalsMet: lifecycle.Goals found nothing missed; GoalsMissed says what was.
	GoalsMet    bool     `json:"goals_met"`
	GoalsMissed []string `json:"goals_missed,omitempty"`
}

// run runs the rollouts (and the fault pass) with base's APIServer and Bootstrap.
func run(backends string, runs int, base lifecycle.Options, fo faultOptions, out string) error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("needs root (network namespaces)")
	}
	dir, err := os.MkdirTemp("", "caplb-rollout-bin-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	bins, err := lifecycle.BuildBinaries(dir)
	if err != nil {
		return err
	}
	var results []any
	var errs []error
	worst := map[string]entry{}
	var order []string
	for run := 1; run <= runs; run++ {
		for _, b := range strings.Split(backends, ",") {
			if b == "" {
				continue
			}
			svg := fmt.Sprintf("%s-%s.svg", strings.TrimSuffix(out, ".json"), b)
			if runs > 1 {
				svg = fmt.Sprintf("%s-%s-run%d.svg", strings.TrimSuffix(out, ".json"), b, run)
			}
			r, err := runOne(lifecycle.Backend(b), base, bins, svg)
			r.Run = run
			if r.Backend != "" {
				results = append(results, r) // a failed run's figures too: they show what went wrong
				if w, seen := worst[b]; !seen || worse(r, w) {
					if !seen {
						order = append(order, b)
					}
					worst[b] = r
				}
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("%s run %d: %w", b, run, err))
			}
		}
	}
	for _, b := range order {
		w := worst[b]
		fmt.Printf("worst of %d %s run(s): run %d, %d failed requests, max gap %.1f ms, goals met %v\n",
			runs, b, w.Run, w.FailedRequests, w.MaxGapMS, w.GoalsMet)
	}
	if len(fo.faults) > 0 {
		// A generous bound: on 2 cores the lab boots in 0.5-1.5 min, a quorum-loss trial takes
		// about 50 s, a hard kill with its rebuild about 30 s.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute+time.Duration(fo.trials)*4*time.Minute)
		f, err := runFaults(ctx, fo, bins, os.Stdout)
		cancel()
		printFaults(os.Stdout, f)
		results = append(results, f)
		if err != nil {
			errs = append(errs, fmt.Errorf("faults: %w", err))
		} else if missed := f.missed(); len(missed) > 0 {
			errs = append(errs, fmt.Errorf("faults: goal missed: %s", strings.Join(missed, "; ")))
		}
	}
	// What ran is written even when a part failed: its figures and error are the record.
	data, err := json.MarshalIndent(results, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(out, append(data, '\n'), 0o644); err != nil {
		return err
	}
	fmt.Printf("wrote %s\n", out)
	return errors.Join(errs...)
}

// worse: a's run missed a goal that b's met, or, both alike, its failures or its gap are larger.
func worse(a, b entry) bool {
	if a.GoalsMet != b.GoalsMet {
		return !a.GoalsMet
	}
	if a.FailedRequests != b.FailedRequests {
		return a.FailedRequests > b.FailedRequests
	}
	return a.MaxGapMS > b.MaxGapMS
}

func runOne(b lifecycle.Backend, base lifecycle.Options, bins lifecycle.Binaries, svg string) (entry, error) {
	api := base.APIServer
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	start := time.Now()
	logf := func(s string) { fmt.Printf("%+8.3fs %s ==> %s\n", time.Since(start).Seconds(), b, s) }
	opts := base
	opts.Backend, opts.Binaries, opts.Name = b, bins, "ro"+string(b)
	l, err := lifecycle.Start(ctx, opts)
	if err != nil {
		return entry{}, err
	}
	defer l.Close()
	obs, runErr := lifecycle.RunObserved(ctx, l, logf)
	if f, err := os.Create(svg); err == nil {
		_ = observe.RenderSVG(f, obs.Input)
		f.Close()
		fmt.Printf("timeline: %s\n", svg)
	}
	_ = observe.Print(os.Stdout, obs.Result)
	if c := obs.Clients; c != nil {
		fmt.Printf("  client-go        %d writes, %d failed, %d refused by etcd (%d unexplained), %d informer events lost, %d relists, leader lost %d time(s), %d streams reset\n",
			c.Writes, c.FailedWrites, c.EtcdRefusals, c.EtcdRefusalsUnexplained, c.LostEvents, c.Relists, c.LeaderLosses, c.StreamsReset)
	}
	if runErr != nil {
		fmt.Println(l.LogTail(30))
	}
	e := entry{Scenario: "rollout", APIServer: api, KCP: "lab", Bootstrap: string(lifecycle.LabBootstrap), KCPEtcd: "capi", Result: obs.Result, ClientGo: obs.Clients}
	if opts.Bootstrap == lifecycle.CAPIBootstrap {
		e.Bootstrap = string(lifecycle.CAPIBootstrap)
	}
	if runErr == nil {
		e.GoalsMissed = lifecycle.Goals(b, api, obs.Result, obs.Clients)
		e.GoalsMet = len(e.GoalsMissed) == 0
		for _, m := range e.GoalsMissed {
			fmt.Printf("  MISSED           %s\n", m)
		}
		if !e.GoalsMet {
			runErr = fmt.Errorf("%d goal(s) missed", len(e.GoalsMissed))
		}
	}
	return e, runErr
}
