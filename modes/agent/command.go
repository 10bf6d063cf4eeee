package agent

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	agentv1 "github.com/caplb/caplb/api/agent/v1alpha1"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/spf13/cobra"
)

// NewCommand is the `agent` command (docs/backends/arp.md), shared by every
// binary that embeds the agent; opts go to Run (the binary's build, for one).
func NewCommand(opts ...Option) *cobra.Command {
	var configPath string
	var verbosity int
	cmd := &cobra.Command{
		Use:   "agent",
		Short: "Run the node agent: hold or announce the control-plane VIP",
		Long: `Runs on each control-plane node (host network, NET_ADMIN and NET_RAW).
The first SIGTERM or SIGINT hands the VIP over to the next owner before letting
go (make-before-break); a second one exits at once. The VIP is removed on every
exit path except SIGKILL, whose leftovers the next start removes.

Admin endpoints (admin.listen, default 127.0.0.1:7473, read-only): GET /metrics,
/healthz, /status. Control socket (admin.controlSocket, default /run/caplb/agent.sock,
root only): the same, plus POST /quiesce (hand over and stay out) and DELETE
/quiesce (take part again). SIGHUP re-reads membership.stateFile; SIGQUIT exits at
once (VIP removed).`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log := NewLogger(verbosity)
			cfg, err := agentv1.Load(configPath)
			if err != nil {
				return err
			}
			reload := make(chan struct{}, 1)
			ctx, force := signalContexts(log, reload)
			return Run(ctx, force, cfg, log, append([]Option{WithReload(reload)}, opts...)...)
		},
	}
	cmd.Flags().StringVar(&configPath, "config", "/etc/caplb/agent.yaml", "agent configuration file (YAML)")
	cmd.Flags().IntVarP(&verbosity, "v", "v", 0, "log verbosity (0: transitions and problems, 1: membership detail, 2: memberlist debug)")
	return cmd
}

// NewLogger logs JSON lines to stderr.
func NewLogger(v int) logr.Logger {
	return funcr.NewJSON(func(obj string) { fmt.Fprintln(os.Stderr, obj) },
		funcr.Options{LogTimestamp: true, TimestampFormat: "2006-01-02T15:04:05.000000Z07:00", Verbosity: v})
}

// signalContexts: the first SIGTERM/SIGINT ends ctx (graceful hand-over), the
// second ends force (exit now). SIGQUIT ends both (exit now, but through the
// cleanup that removes the VIPs, where Go's default would dump and exit with
// the VIPs still on the interface). SIGHUP (which would otherwise kill the
// process without cleanup) asks for the membership state file to be read
// again.
func signalContexts(log logr.Logger, reload chan<- struct{}) (ctx, force context.Context) {
	ctx, stop := context.WithCancel(context.Background())
	force, stopForce := context.WithCancel(context.Background())
	ch := make(chan os.Signal, 4)
	signal.Notify(ch, syscall.SIGTERM, syscall.SIGINT, syscall.SIGQUIT, syscall.SIGHUP)
	go func() {
		graceful := false
		for s := range ch {
			switch {
			case s == syscall.SIGHUP:
				log.Info("SIGHUP: reading the membership state file again")
				select {
				case reload <- struct{}{}:
				default:
				}
			case s == syscall.SIGQUIT || graceful:
				log.Info("exiting now (VIPs removed, no hand-over)", "signal", s.String())
				stop()
				stopForce()
			default:
				graceful = true
				log.Info("signal received: handing over and exiting", "signal", s.String())
				stop()
			}
		}
	}()
	return ctx, force
}
