package wireguard

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"

	wgapi "github.com/caplb/caplb/api/wireguard/v1alpha1"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/spf13/cobra"
	"k8s.io/client-go/tools/clientcmd"
)

// NewGatewayCommand is `caplb gateway` (docs/backends/wireguard.md); opts go to NewGateway.
func NewGatewayCommand(opts ...GatewayOption) *cobra.Command {
	var configPath, fromSecret, name, kubeconfig, dir, metricsListen string
	var verbosity int
	cmd := &cobra.Command{
		Use:   "gateway",
		Short: "Run a WireGuard gateway: the public API endpoint, passed through to healthy members",
		Long: `Publishes the API endpoint (listen) and passes each TCP connection through a userspace
WireGuard tunnel (no kernel module, no TUN, no root needed for the device) to a member whose
/readyz passes. TLS is never terminated. Members register with the join token.

Admin endpoints (admin.listen, default 127.0.0.1:7475): GET /status, /metrics, /healthz;
POST/DELETE /v1/nodes/{node}/quiesce. Metrics endpoints (metrics.listen or --metrics-listen, none
by default): GET /metrics, /healthz only, for Prometheus to scrape from off the host.

With --from-secret the configuration, join token and cluster CA come from the Secret a wireguard
LoadBalancer renders (cached in --dir, mode 0600, and used from there while the management cluster
is unreachable); the gateway applies the Secret's quiesced nodes and reports its members and
their open connections to the ConfigMap <secret>-<name> every 5s.

The first SIGTERM or SIGINT stops accepting (clients go to the other gateways) and lets open
connections finish up to drainTimeout; a second one closes them at once.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log := newLogger(verbosity)
			opts := opts
			if metricsListen != "" {
				if _, _, err := net.SplitHostPort(metricsListen); err != nil {
					return fmt.Errorf("--metrics-listen %q: %w", metricsListen, err)
				}
				opts = append(slices.Clip(opts), WithMetricsListen(metricsListen))
			}
			ctx, force := signalContexts(log)
			if fromSecret != "" {
				return runFromSecret(ctx, force, log, fromSecret, name, kubeconfig, dir, opts)
			}
			cfg, err := wgapi.LoadGateway(configPath)
			if err != nil {
				return err
			}
			applyMaxProcs(cfg.MaxProcs, log)
			g, err := NewGateway(cfg, log, opts...)
			if err != nil {
				return err
			}
			return g.Run(ctx, force)
		},
	}
	cmd.Flags().StringVar(&configPath, "config", "/etc/caplb/gateway.yaml", "gateway configuration file (YAML); not used with --from-secret")
	cmd.Flags().StringVar(&fromSecret, "from-secret", "", "run from the management cluster: <namespace>/<cluster>-caplb-gateway, the Secret a wireguard LoadBalancer renders (needs --name)")
	cmd.Flags().StringVar(&name, "name", "", "with --from-secret: this gateway's name in spec.backend.wireguard.gateways")
	cmd.Flags().StringVar(&kubeconfig, "kubeconfig", "", "with --from-secret: kubeconfig of the management cluster (default: $KUBECONFIG, then in-cluster)")
	cmd.Flags().StringVar(&dir, "dir", "", "with --from-secret: where this cluster's files are kept (default /var/lib/caplb/wireguard/<namespace>/<cluster>)")
	cmd.Flags().StringVar(&metricsListen, "metrics-listen", "", "read-only metrics listener (host:port, e.g. :7477) in place of the configuration's metrics.listen; the rendered configuration of --from-secret sets none, and which of this host's addresses to expose is the host's choice")
	cmd.Flags().IntVarP(&verbosity, "v", "v", 0, "log verbosity (0: changes and problems, 1: per-connection detail, 3: WireGuard debug)")
	return cmd
}

// NewMemberCommand is `caplb-agent wireguard` on a control-plane node.
func NewMemberCommand() *cobra.Command {
	var configPath string
	var verbosity int
	cmd := &cobra.Command{
		Use:   "wireguard",
		Short: "Run the WireGuard member: dial out to every gateway and forward tunnel connections to the local API server",
		Long: `Generates this node's WireGuard key on first start (privateKeyFile, mode 0600; it never
leaves the node), registers it with every gateway using the cluster's join token, keeps each
tunnel alive through NAT, and forwards tunnel connections to the local API server. Needs no
kubeconfig: it can run before kubeadm init.

The first SIGTERM or SIGINT deregisters (the gateways send no new connections) and waits for open
connections up to drainTimeout; a second one exits at once.

Admin endpoints (admin.listen, default 127.0.0.1:7476): GET /status, /healthz; POST /rotate
(make-before-break key rotation).`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log := newLogger(verbosity)
			cfg, err := wgapi.LoadMember(configPath)
			if err != nil {
				return err
			}
			applyMaxProcs(cfg.MaxProcs, log)
			m, err := NewMember(cfg, log)
			if err != nil {
				return err
			}
			ctx, force := signalContexts(log)
			return m.Run(ctx, force)
		},
	}
	cmd.Flags().StringVar(&configPath, "config", "/etc/caplb/wireguard.yaml", "member configuration file (YAML)")
	cmd.Flags().IntVarP(&verbosity, "v", "v", 0, "log verbosity (0: changes and problems, 1: detail, 3: WireGuard debug)")
	return cmd
}

// runFromSecret runs a gateway whose configuration comes from a wireguard LoadBalancer's Secret.
func runFromSecret(ctx, force context.Context, log logr.Logger, ref, name, kubeconfig, dir string, opts []GatewayOption) error {
	ns, secret, ok := strings.Cut(ref, "/")
	if !ok || ns == "" || secret == "" {
		return fmt.Errorf("--from-secret %q: want <namespace>/<name>, e.g. default/edge-caplb-gateway", ref)
	}
	if name == "" {
		return fmt.Errorf("--name is required with --from-secret: this gateway's name in spec.backend.wireguard.gateways")
	}
	if dir == "" {
		dir = filepath.Join("/var/lib/caplb/wireguard", ns, strings.TrimSuffix(secret, "-caplb-gateway"))
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = kubeconfig
	rc, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, nil).ClientConfig()
	if err != nil {
		return fmt.Errorf("management cluster kubeconfig: %w", err)
	}
	rc.Timeout = 10 * time.Second
	cs, err := NewManagementAPI(rc)
	if err != nil {
		return err
	}
	sync := &SecretSync{Client: cs, Namespace: ns, Secret: secret, Gateway: name, Dir: dir, Log: log.WithName("sync")}
	cfg, err := sync.Load(ctx)
	if err != nil {
		return err
	}
	applyMaxProcs(cfg.MaxProcs, log)
	g, err := NewGateway(cfg, log, opts...)
	if err != nil {
		return err
	}
	go sync.Run(ctx, g)
	return g.Run(ctx, force)
}

// applyMaxProcs sets GOMAXPROCS from a gateway's or member's maxProcs (-1: leave Go's default),
// unless the GOMAXPROCS environment variable is set. It is process-wide, so the command sets it,
// not NewGateway or NewMember (tests run them inside their own process).
func applyMaxProcs(n int, log logr.Logger) {
	if env := os.Getenv("GOMAXPROCS"); env != "" {
		log.Info("GOMAXPROCS from the environment; maxProcs ignored", "GOMAXPROCS", env, "maxProcs", n)
		return
	}
	if n > 0 {
		runtime.GOMAXPROCS(n)
	}
}

func newLogger(v int) logr.Logger {
	return funcr.NewJSON(func(obj string) { fmt.Fprintln(os.Stderr, obj) },
		funcr.Options{LogTimestamp: true, TimestampFormat: "2006-01-02T15:04:05.000000Z07:00", Verbosity: v})
}

// signalContexts: the first SIGTERM/SIGINT ends ctx (graceful), the second ends force.
func signalContexts(log logr.Logger) (ctx, force context.Context) {
	ctx, stop := context.WithCancel(context.Background())
	force, stopForce := context.WithCancel(context.Background())
	ch := make(chan os.Signal, 2)
	signal.Notify(ch, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		s := <-ch
		log.Info("signal received: shutting down gracefully", "signal", s.String())
		stop()
		s = <-ch
		log.Info("second signal: exiting now", "signal", s.String())
		stopForce()
	}()
	return ctx, force
}
