//go:build linux

package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/caplb/caplb/e2e/envtest"
	"github.com/caplb/caplb/e2e/lifecycle"
	"github.com/caplb/caplb/e2e/lifecycle/observe"
)

// vipDemoAvailable says whether this machine can run the VIP lifecycle (root: network
// namespaces), and why not.
func vipDemoAvailable() (bool, string) {
	if os.Geteuid() != 0 {
		return false, "not root: the VIP lifecycle needs network namespaces"
	}
	return true, ""
}

// runVIP is the demo as root: a control plane's whole life behind an ARP VIP (e2e/lifecycle),
// with clients counting their requests on the VIP throughout. The machines run a real control
// plane (kubeadm's etcd and kube-apiserver) unless CAPLB_LAB_APISERVER=standin.
func runVIP(ctx context.Context, tl *timeline) (err error) {
	api, err := lifecycle.APIServerFromEnv(lifecycle.Real)
	if err != nil {
		return err
	}
	tl.step("building caplb, its agent, the lab's kubelet and stand-in API server")
	dir, err := os.MkdirTemp("", "caplb-demo-bin-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	bins, err := lifecycle.BuildBinaries(dir)
	if err != nil {
		return err
	}
	opts := lifecycle.Options{Backend: lifecycle.ARP, Binaries: bins, Name: "demo", APIServer: api}
	if api == lifecycle.Real {
		if opts.Bootstrap, err = lifecycle.BootstrapFromEnv(lifecycle.CAPIBootstrap); err != nil {
			return err
		}
		tl.step("each machine: kube-apiserver %s + etcd %s made by kubeadm %s from bootstrap data rendered by %s, behind the VIP (each takes ~20-40 s to boot on 2 cores: etcd fsyncs, the API server starts ~60 controllers)",
			envtest.K8sVersion, envtest.EtcdVersion, envtest.K8sVersion, map[lifecycle.Bootstrap]string{
				lifecycle.CAPIBootstrap: "CAPI's kubeadm bootstrap provider", lifecycle.LabBootstrap: "the lab"}[opts.Bootstrap])
		tl.step("starting a management API server, CAPI's reconcilers, the caplb manager and a lab network")
	} else {
		tl.step("starting a management and a workload API server, CAPI's reconcilers, the caplb manager and a lab network")
	}
	l, err := lifecycle.Start(ctx, opts)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, l.Close()) }()
	obs, runErr := lifecycle.RunObserved(ctx, l, func(s string) { tl.step("%s", s) })
	if err := os.MkdirAll("_out", 0o755); err == nil {
		svg := filepath.Join("_out", "demo-rollout.svg")
		if f, err := os.Create(svg); err == nil {
			_ = observe.RenderSVG(f, obs.Input)
			f.Close()
			tl.seen("timeline drawn in %s", svg)
		}
	}
	_ = observe.Print(os.Stdout, obs.Result)
	if runErr != nil {
		return runErr
	}
	r := obs.Result
	if c := obs.Clients; c != nil {
		tl.seen("client-go through the VIP: %d writes, %d failed, %d refused by etcd in a membership change; the informer lost %d events (%d relists); the leader-elected loop lost its Lease %d time(s)",
			c.Writes, c.FailedWrites, c.EtcdRefusals, c.LostEvents, c.Relists, c.LeaderLosses)
	}
	// The demo judges by the same goals as TestLifecycleReal* and make bench-rollout: a run
	// that misses one says FAIL and exits non-zero, whatever else went well.
	if missed := lifecycle.Goals(lifecycle.ARP, api, r, obs.Clients); len(missed) > 0 {
		for _, m := range missed {
			tl.fail("FAIL %s", m)
		}
		return fmt.Errorf("%d goal(s) missed", len(missed))
	}
	tl.ok("%d replacements behind the VIP; the client sent %d requests, 0 failed, longest gap %.0f ms (goal < %d ms), no spurious claim",
		r.Replacements, r.Requests, r.MaxGapMS, lifecycle.MaxGapGoalMS)
	return nil
}
