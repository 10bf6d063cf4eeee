//go:build linux

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/caplb/caplb/e2e/lifecycle"
	"github.com/caplb/caplb/e2e/lifecycle/observe/clients"
	"github.com/caplb/caplb/e2e/realcp"
)

// Fault names for -faults.
const (
	faultHardKill   = "hard_kill"
	faultQuorumLoss = "quorum_loss"
)

// clientWindow is how long the clients run before each fault and after it ended, so that
// client-go's figures cover a steady stretch on either side, not the fault alone.
const clientWindow = 5 * time.Second

// faultOptions shape the fault pass.
type faultOptions struct {
	faults []string
	trials int
	// hold is how long the VIP is watched once every agent saw quorum lost (etcd is down a few
	// seconds longer: until every /readyz failed, and the recovery tool's request).
	hold time.Duration
}

func parseFaults(s string) ([]string, error) {
	if s == "" || s == "none" {
		return nil, nil
	}
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f != faultHardKill && f != faultQuorumLoss {
			return nil, fmt.Errorf("-faults: %q: use %s, %s or none", f, faultHardKill, faultQuorumLoss)
		}
		out = append(out, f)
	}
	return out, nil
}

// runFaults runs the fault pass on one real 3-machine lab (e2e/realcp): the quorum-loss trials
// first (every machine survives them), then the hard kills, the killed machine rebuilt (a fresh
// kubeadm machine joined as an etcd learner and promoted) before the next trial — cheaper than
// a fresh lab per trial (boot_seconds against rebuild_seconds in the JSON). A failed trial ends
// its fault's trials; the figures keep what ran.
func runFaults(ctx context.Context, o faultOptions, bins lifecycle.Binaries, out io.Writer) (faultsEntry, error) {
	e := faultsEntry{Scenario: "faults", APIServer: string(lifecycle.Real), Backend: string(lifecycle.ARP)}
	start := time.Now()
	logf := func(format string, args ...any) {
		fmt.Fprintf(out, "%+8.3fs faults ==> %s\n", time.Since(start).Seconds(), fmt.Sprintf(format, args...))
	}
	c, err := realcp.New(realcp.Config{Name: "rofaults", Podrun: bins.Podrun, Agent: bins.Agent, Logf: logf})
	if c != nil {
		defer c.Close()
	}
	if err != nil {
		return e, err
	}
	if err := c.Boot(ctx); err != nil {
		fmt.Fprintln(out, c.LogTail(30))
		return e, fmt.Errorf("booting the lab: %w", err)
	}
	e.BootSeconds = seconds(time.Since(start))
	logf("lab booted in %.1f s", e.BootSeconds)
	cs, err := c.AdminClient(5 * time.Second)
	if err != nil {
		return e, err
	}
	if err := pollErr(ctx, 30*time.Second, func() error { return realcp.Write(ctx, cs, "boot") }); err != nil {
		return e, fmt.Errorf("client-go writes through the VIP: %w", err)
	}
	var errs []error
	if slices.Contains(o.faults, faultQuorumLoss) {
		var trials []quorumLossTrial
		for i := 1; i <= o.trials; i++ {
			var t quorumLossTrial
			from := time.Now()
			r, err := c.StartClients(ctx, fmt.Sprintf("quorum-%d", i))
			if err == nil {
				var q realcp.QuorumLoss
				if err = window(ctx); err == nil {
					q, err = c.QuorumLoss(ctx, cs, o.hold)
				}
				if err == nil {
					err = window(ctx)
				}
				t = newQuorumLossTrial(q, r, r.Stop(30*time.Second))
			}
			logf("quorum loss %d: %+v; client-go writes again %.2f s after the restart, %s", i, t.QuorumLoss, t.WriteRecoverySeconds, clientLine(t.ClientGo))
			if q := t.QuorumLoss; q.Loss.NoOwner+q.Return.NoOwner+q.Steady.TwoOwners > 0 {
				// The agents' own account of the miss: the lab's logs go with it.
				fmt.Fprintf(out, "quorum loss %d: the VIP's owners missed the goal; the agents' decisions:\n%s", i, c.AgentLogs(from))
			}
			if err != nil {
				t.Error = err.Error()
				errs = append(errs, fmt.Errorf("quorum loss %d: %w", i, err))
			}
			trials = append(trials, t)
			if err != nil {
				break
			}
		}
		e.QuorumLoss = summarizeQuorumLoss(trials, clients.RenewDeadline)
	}
	if slices.Contains(o.faults, faultHardKill) && len(errs) == 0 {
		var trials []hardKillTrial
		for i := 1; i <= o.trials; i++ {
			t, err := hardKillOnce(ctx, c, cs, i, i < o.trials)
			logf("hard kill %d: %s killed, new connection %.0f ms, kept connection %.0f ms, rebuilt in %.1f s; client-go %s",
				i, t.Victim, t.NewConnectionMS, t.KeptConnectionMS, t.RebuildSeconds, clientLine(t.ClientGo))
			trials = append(trials, t)
			if err != nil {
				errs = append(errs, fmt.Errorf("hard kill %d: %w", i, err))
				break
			}
		}
		e.HardKill = summarizeHardKill(trials)
	}
	if err := errors.Join(errs...); err != nil {
		e.Error = err.Error()
		fmt.Fprintln(out, c.LogTail(30))
		return e, err
	}
	return e, nil
}

// hardKillOnce is one hard-kill trial with its own clients; rebuild brings the machine back.
func hardKillOnce(ctx context.Context, c *realcp.Lab, cs *kubernetes.Clientset, i int, rebuild bool) (hardKillTrial, error) {
	r, err := c.StartClients(ctx, fmt.Sprintf("kill-%d", i))
	if err != nil {
		return hardKillTrial{Error: err.Error()}, err
	}
	var k realcp.HardKill
	if err = window(ctx); err == nil {
		k, err = c.HardKill(ctx, cs)
	}
	if err == nil {
		err = window(ctx)
	}
	t := newHardKillTrial(k, r.Stop(30*time.Second))
	if err != nil {
		t.Error = err.Error()
		return t, err
	}
	if rebuild {
		from := time.Now()
		if err := c.Rebuild(ctx, k.Victim); err != nil {
			t.Error = err.Error()
			return t, err
		}
		t.RebuildSeconds = seconds(time.Since(from))
	}
	return t, nil
}

// window lets the clients run for clientWindow: a measurement stretch, not a wait for anything.
func window(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(clientWindow):
		return nil
	}
}

func clientLine(r clients.Result) string {
	return fmt.Sprintf("%d writes, %d failed, %d refused by etcd, %d lost events, %d relists, %d leader losses, %d streams reset",
		r.Writes, r.FailedWrites, r.EtcdRefusals, r.LostEvents, r.Relists, r.LeaderLosses, r.StreamsReset)
}

// pollErr calls fn every 200 ms until it succeeds or timeout passes.
func pollErr(ctx context.Context, timeout time.Duration, fn func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := fn()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func seconds(d time.Duration) float64 {
	return float64(d.Round(100*time.Millisecond)) / float64(time.Second)
}
