//go:build linux

// Command rollout is `make bench-rollout`: the lifecycle lab's scenario (e2e/lifecycle) behind
// an ARP VIP and behind a BGP VIP, with its client's and sampler's figures written as JSON to
// $BENCH_OUT (default _out/bench-rollout.json), one object per backend, and an SVG timeline per
// backend beside it (<out>-arp.svg, <out>-bgp.svg). Root only.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/caplb/caplb/e2e/lifecycle"
	"github.com/caplb/caplb/e2e/lifecycle/observe"
)

func main() {
	backends := flag.String("backends", "arp,bgp", "comma-separated backends to run")
	flag.Parse()
	out := os.Getenv("BENCH_OUT")
	if out == "" {
		out = "_out/bench-rollout.json"
	}
	if err := run(*backends, out); err != nil {
		fmt.Fprintln(os.Stderr, "bench-rollout:", err)
		os.Exit(1)
	}
}

func run(backends, out string) error {
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
	var results []observe.Result
	for _, b := range strings.Split(backends, ",") {
		r, err := runOne(lifecycle.Backend(b), bins, strings.TrimSuffix(out, ".json")+"-"+b+".svg")
		if err != nil {
			return fmt.Errorf("%s: %w", b, err)
		}
		results = append(results, r)
	}
	data, err := json.MarshalIndent(results, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(out, append(data, '\n'), 0o644); err != nil {
		return err
	}
	fmt.Printf("wrote %s\n", out)
	return nil
}

func runOne(b lifecycle.Backend, bins lifecycle.Binaries, svg string) (observe.Result, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	start := time.Now()
	logf := func(s string) { fmt.Printf("%+8.3fs %s ==> %s\n", time.Since(start).Seconds(), b, s) }
	l, err := lifecycle.Start(ctx, lifecycle.Options{Backend: b, Binaries: bins, Name: "ro" + string(b)})
	if err != nil {
		return observe.Result{}, err
	}
	defer l.Close()
	obs, runErr := lifecycle.RunObserved(ctx, l, logf)
	if f, err := os.Create(svg); err == nil {
		_ = observe.RenderSVG(f, obs.Input)
		f.Close()
		fmt.Printf("timeline: %s\n", svg)
	}
	_ = observe.Print(os.Stdout, obs.Result)
	if runErr != nil {
		fmt.Println(l.LogTail(30))
	}
	return obs.Result, runErr
}
