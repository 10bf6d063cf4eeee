//go:build linux

// Command rollout is `make bench-rollout`: the lifecycle lab's scenario (e2e/lifecycle) behind
// an ARP VIP and behind a BGP VIP, with its client's and sampler's figures written as JSON to
// $BENCH_OUT (default _out/bench-rollout.json), one object per backend, and an SVG timeline per
// backend beside it (<out>-arp.svg, <out>-bgp.svg). Root only.
//
// The machines run a real control plane by default (kubeadm-made etcd and kube-apiservers,
// "apiserver": "real", with client-go's figures under "client_go"); -apiserver standin (or
// CAPLB_LAB_APISERVER=standin) runs the lab's stand-in API servers instead.
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
	"github.com/caplb/caplb/e2e/lifecycle/observe/clients"
)

func main() {
	backends := flag.String("backends", "arp,bgp", "comma-separated backends to run")
	def, err := lifecycle.APIServerFromEnv(lifecycle.Real)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench-rollout:", err)
		os.Exit(2)
	}
	api := flag.String("apiserver", string(def), "what the machines run: real (kubeadm's etcd and kube-apiserver) or standin")
	flag.Parse()
	if a := lifecycle.APIServer(*api); a != lifecycle.Real && a != lifecycle.StandIn {
		fmt.Fprintf(os.Stderr, "bench-rollout: -apiserver %q: use real or standin\n", *api)
		os.Exit(2)
	}
	out := os.Getenv("BENCH_OUT")
	if out == "" {
		out = "_out/bench-rollout.json"
	}
	if err := run(*backends, lifecycle.APIServer(*api), out); err != nil {
		fmt.Fprintln(os.Stderr, "bench-rollout:", err)
		os.Exit(1)
	}
}

// entry is one backend's figures: the observer's, and client-go's against a real control plane.
type entry struct {
	APIServer lifecycle.APIServer `json:"apiserver"`
	observe.Result
	ClientGo *clients.Result `json:"client_go,omitempty"`
}

func run(backends string, api lifecycle.APIServer, out string) error {
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
	var results []entry
	for _, b := range strings.Split(backends, ",") {
		r, err := runOne(lifecycle.Backend(b), api, bins, strings.TrimSuffix(out, ".json")+"-"+b+".svg")
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

func runOne(b lifecycle.Backend, api lifecycle.APIServer, bins lifecycle.Binaries, svg string) (entry, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	start := time.Now()
	logf := func(s string) { fmt.Printf("%+8.3fs %s ==> %s\n", time.Since(start).Seconds(), b, s) }
	l, err := lifecycle.Start(ctx, lifecycle.Options{Backend: b, Binaries: bins, Name: "ro" + string(b), APIServer: api})
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
		fmt.Printf("  client-go        %d writes, %d failed, %d informer events lost, %d relists, leader lost %d time(s), %d streams reset\n",
			c.Writes, c.FailedWrites, c.LostEvents, c.Relists, c.LeaderLosses, c.StreamsReset)
	}
	if runErr != nil {
		fmt.Println(l.LogTail(30))
	}
	return entry{APIServer: api, Result: obs.Result, ClientGo: obs.Clients}, runErr
}
