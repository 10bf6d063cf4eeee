//go:build linux

// Command takeover is `make bench-takeover`: a running cluster moved off real kube-vip onto caplb
// (e2e/lifecycle's TakeOverScenario) for each kube-vip release `make testbin` builds, and the
// control — the same swap without takeOver, as CAPV's migration describes it — on kube-vip's
// older release. Its figures go to $BENCH_OUT (default _out/bench-takeover.json):
//
//	{"arp": {"v0.9.1": {...}, "v1.2.2": {...}}, "control": {...},
//	 "bgp": {"lease-election": {...}, "every-node": {...}}}
//
// each with duplicate_answer_intervals, gap_ms, failed_writes, leader_losses,
// failed_new_connections and more (lifecycle.TakeOverFigures). It exits non-zero when a goal is
// missed (lifecycle.TakeOverGoals): for every guarded ARP run no duplicate answer, a gap under
// 1 s, no leader loss, no lost event, nothing failed outside the hand-over and at most one failed
// write (the one in flight when kube-vip drops the VIP: docs/migrate-from-kube-vip.md); for the
// control, duplicates seen (else the guard's zero proves nothing); for BGP — kube-vip electing
// (fenced) on v0.9.1, and announcing from every node (the overlap) on v1.2.2 — no failed new
// connection, a path to the VIP always, no leader loss, no lost event. Root only, with FRR.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/caplb/caplb/e2e/envtest"
	"github.com/caplb/caplb/e2e/lifecycle"
	"github.com/caplb/caplb/e2e/lifecycle/observe"
)

// run is one takeover's record in the JSON.
type run struct {
	lifecycle.TakeOverFigures
	KubeVIP string `json:"kube_vip"`
	Guarded bool   `json:"guarded"`
	// ElectionOff: a BGP kube-vip announcing from every node (vip_leaderelection false).
	ElectionOff bool     `json:"election_off,omitempty"`
	GoalsMet    bool     `json:"goals_met"`
	GoalsMissed []string `json:"goals_missed,omitempty"`
	Error       string   `json:"error,omitempty"`
}

type report struct {
	ARP     map[string]run `json:"arp"`
	Control run            `json:"control"`
	BGP     map[string]run `json:"bgp"`
}

func main() {
	out := os.Getenv("BENCH_OUT")
	if out == "" {
		out = "_out/bench-takeover.json"
	}
	if err := bench(out); err != nil {
		fmt.Fprintln(os.Stderr, "bench-takeover:", err)
		os.Exit(1)
	}
}

func bench(out string) error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("needs root (network namespaces)")
	}
	dir, err := envtest.BinaryDir()
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "caplb-takeover-bin-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	bins, err := lifecycle.BuildBinaries(tmp)
	if err != nil {
		return err
	}
	rep := report{ARP: map[string]run{}, BGP: map[string]run{}}
	var errs []error
	judge := func(what string, r run) run {
		if !r.GoalsMet {
			errs = append(errs, fmt.Errorf("%s: %v %s", what, r.GoalsMissed, r.Error))
		}
		return r
	}
	for _, v := range []string{envtest.KubeVIPOldVersion, envtest.KubeVIPNewVersion} {
		rep.ARP[v] = judge("arp, kube-vip "+v, runOne(bins, dir, kind{backend: lifecycle.ARP, version: v}))
	}
	rep.Control = judge("control", runOne(bins, dir, kind{backend: lifecycle.ARP, version: envtest.KubeVIPOldVersion, unguarded: true}))
	rep.BGP["lease-election"] = judge("bgp, kube-vip electing", runOne(bins, dir, kind{backend: lifecycle.BGP, version: envtest.KubeVIPOldVersion}))
	rep.BGP["every-node"] = judge("bgp, kube-vip on every node", runOne(bins, dir,
		kind{backend: lifecycle.BGP, version: envtest.KubeVIPNewVersion, noElection: true}))
	data, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(out, append(data, '\n'), 0o644); err != nil {
		return err
	}
	fmt.Printf("wrote %s\n", out)
	return errors.Join(errs...)
}

// kind is one takeover run: the backend, kube-vip's release, the control (no takeOver) or a BGP
// kube-vip that does not elect.
type kind struct {
	backend               lifecycle.Backend
	version               string
	unguarded, noElection bool
}

func runOne(bins lifecycle.Binaries, dir string, k kind) run {
	version, unguarded := k.version, k.unguarded
	r := run{KubeVIP: version, Guarded: !unguarded, ElectionOff: k.noElection}
	kv, err := envtest.KubeVIPBinary(dir, version)
	if err != nil {
		r.Error = err.Error()
		return r
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	start := time.Now()
	name := "to" + map[bool]string{false: "g", true: "c"}[unguarded] + string(k.backend)
	logf := func(s string) { fmt.Printf("%+8.3fs %s %s ==> %s\n", time.Since(start).Seconds(), name, version, s) }
	l, err := lifecycle.Start(ctx, lifecycle.Options{Backend: k.backend, Binaries: bins, Name: name, APIServer: lifecycle.Real,
		KubeVIP: lifecycle.KubeVIPOptions{Version: version, Binary: kv, NoElection: k.noElection}})
	if err != nil {
		r.Error = err.Error()
		return r
	}
	defer l.Close()
	obs, s, err := lifecycle.RunTakeOverObserved(ctx, l, unguarded, logf)
	_ = observe.Print(os.Stdout, obs.Result)
	if err != nil {
		r.Error = err.Error()
		fmt.Printf("%s kube-vip %s: %v\n%s\n", name, version, err, l.LogTail(30))
	}
	if s != nil {
		r.TakeOverFigures = lifecycle.TakeOverGoals(obs, s)
		r.GoalsMissed = r.Missed
	}
	if err != nil {
		r.GoalsMissed = append(r.GoalsMissed, "the run did not complete")
	}
	r.GoalsMet = len(r.GoalsMissed) == 0
	fmt.Printf("%s kube-vip %s (guarded %v): %+v\n", name, version, !unguarded, r.TakeOverFigures)
	return r
}
