package agent

import (
	"context"
	"errors"
	"fmt"
	"time"

	agentv1 "github.com/caplb/caplb/api/agent/v1alpha1"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/caplb/caplb/internal/buildinfo"
	"github.com/caplb/caplb/modes/dataplane"
	"github.com/caplb/caplb/modes/election"
)

// Run wires the agent from cfg and runs it until ctx ends (then it hands over
// and exits) or force ends (then it exits at once). Every exit path removes
// the VIPs; only SIGKILL cannot, and the next start removes what it left
// (arp.RemoveStale).
func Run(ctx, force context.Context, cfg *agentv1.AgentConfiguration, log logr.Logger, opts ...Option) (err error) {
	var o options
	for _, f := range opts {
		f(&o)
	}
	// A panic in a background goroutine must not kill the process with the
	// VIPs still on the interface: it ends the agent through the normal
	// exit path instead (force: no hand-over from a broken process).
	force, crash := context.WithCancel(force)
	defer crash()
	reg, err := newRegistry(o, cfg)
	if err != nil {
		return err
	}
	warnConfig(cfg, log)

	store, err := newMemberStore(cfg, log.WithName("membership"))
	if err != nil {
		return err
	}
	h, err := newHealthChecker(cfg.Health, log.WithName("health"))
	if err != nil {
		return err
	}
	m, err := newMetrics(reg)
	if err != nil {
		return fmt.Errorf("register metrics: %w", err)
	}
	// Gossip binds first: a second agent started on the same node by
	// mistake fails here, before RemoveStale could strip the live owner's
	// VIPs.
	var ml *election.Membership
	if cfg.Mode == agentv1.ModeARP {
		ecfg, err := electionConfig(cfg, store.roster())
		if err != nil {
			return err
		}
		ecfg.OnMembership = func(r election.Roster) { store.offer(r.Document(), "gossip") }
		ml, err = election.Start(ecfg, election.Meta{ConfigDigest: cfg.Digest()}, log.WithName("election"))
		if err != nil {
			return err
		}
		store.mu.Lock()
		store.run = func(r election.Roster) { ml.SetRoster(r) }
		store.mu.Unlock()
		// A document that arrived during the first join was kept but not
		// yet run.
		ml.SetRoster(store.roster())
	}
	// BGP: the gossip carries only the members' flow lists (flowshare.go); the loop does not
	// see it, as every eligible member announces whatever the others do.
	var share *flowShare
	if cfg.Mode == agentv1.ModeBGP && cfg.BGP.FlowSharingOn() {
		// Without it the routers' rehashes reset connections, as before: worth a loud line,
		// not worth refusing to announce.
		if share, ml, err = startFlowSharing(cfg, store, log); err != nil {
			log.Error(err, "flow sharing off: connections the routers move to this node at a rehash are reset")
			share, ml = nil, nil
		}
	}
	closeML := func() {
		if ml != nil {
			_ = ml.Close()
		}
	}
	dp, ifName, err := newDataplane(cfg, log, reg)
	if err != nil {
		closeML()
		return err
	}
	closeDP := true
	defer func() {
		if closeDP {
			closeML()
			if cerr := dp.Close(context.Background()); cerr != nil {
				err = errors.Join(err, cerr)
			}
		}
	}()
	parts := agentParts{dp: dp, health: h, m: m, store: store}
	if ml != nil && share == nil {
		parts.ml = ml
	}
	if cfg.Mode == agentv1.ModeARP && (cfg.Membership.Dynamic || cfg.ARP.ClaimWhenSilent) {
		parts.prober = newARPProber(ifName)
	}
	a := newAgent(cfg, log, parts)

	admin := cfg.Admin.Listen
	if admin != "0" {
		if admin, err = adminListen(cfg, store.current()); err != nil {
			return err
		}
		stop, err := serveAdmin(admin, readOnlyHandler(a, reg))
		if err != nil {
			return err
		}
		defer stop()
	}
	if cfg.Admin.ControlSocket != "0" {
		// Without the socket (a read-only root filesystem with no
		// /run/caplb mount) only manual quiesce is lost: the Node's
		// annotations, SIGTERM and the election work as before, and
		// nothing else can move the VIP.
		if stop, err := serveControl(cfg.Admin.ControlSocket, controlHandler(a, reg)); err != nil {
			log.Error(err, "control socket unavailable: POST/DELETE /quiesce disabled; mount a writable directory for admin.controlSocket")
		} else {
			defer stop()
		}
	}
	hctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	goSafe(log, crash, "health check", func() { h.run(hctx, a.Wake) })
	if cfg.NodeAPI.Kubeconfig != "" {
		n := &nodeAPI{cfg: cfg.NodeAPI, log: log.WithName("nodeapi"), agent: a, store: store}
		goSafe(log, crash, "node API", func() { n.run(hctx) })
	}
	if share != nil {
		fs, ok := dp.(dataplane.FlowSharer)
		if !ok {
			return fmt.Errorf("bgp.flowSharing: the data plane cannot forward flows")
		}
		share.dp = fs
		goSafe(log, crash, "flow sharing", func() { share.run(hctx, ml) })
	}
	if cfg.Membership.Dynamic {
		goSafe(log, crash, "state file", func() { watchStateFile(hctx, store, o.reload) })
	}
	if st := dp.Status().ARP; st != nil {
		// Track the VIP interface (linkwatch.go); wired before the loop runs.
		if a.link, err = startLinkWatch(hctx, st.Interface, a.Wake, log); err != nil {
			log.Error(err, "VIP interface not tracked: a link going down releases only through lost contact")
		}
	}

	log.Info("agent started", "node", cfg.NodeName, "mode", cfg.Mode, "vips", cfg.VIPs,
		"members", len(store.current().Members), "membershipVersion", store.current().Version,
		"admin", admin, "control", cfg.Admin.ControlSocket, "configDigest", cfg.Digest())
	closeDP = false // Agent.Run closes it on every path
	return a.Run(ctx, force)
}

// warnConfig logs configurations that work but are fragile.
func warnConfig(cfg *agentv1.AgentConfiguration, log logr.Logger) {
	if cfg.Mode == agentv1.ModeARP && len(cfg.Members) == 2 && !cfg.Membership.Dynamic {
		log.Info("WARNING: two members: a majority is both, so either one failing loses the VIP; use 1, 3 or 5 members")
	}
	if cfg.Election.Insecure && cfg.Mode == agentv1.ModeARP {
		log.Info("WARNING: election.insecure: gossip is not authenticated; anyone who reaches the gossip port can move the VIP")
	}
}

// Option tunes Run.
type Option func(*options)

type options struct {
	reload <-chan struct{}
	build  buildinfo.Labels
}

// WithReload: a value on ch makes the agent read membership.stateFile again
// (SIGHUP).
func WithReload(ch <-chan struct{}) Option { return func(o *options) { o.reload = ch } }

// WithBuildInfo exports caplb_build_info with l on the admin listener.
func WithBuildInfo(l buildinfo.Labels) Option { return func(o *options) { o.build = l } }

// newRegistry is the admin listener's registry before the agent's own metrics: the Go and
// process collectors, the build and what the agent serves (caplb_agent_info).
func newRegistry(o options, cfg *agentv1.AgentConfiguration) (*prometheus.Registry, error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), infoMetric(cfg))
	if err := buildinfo.Register(reg, o.build); err != nil {
		return nil, fmt.Errorf("register metrics: %w", err)
	}
	return reg, nil
}

// goSafe runs fn in a goroutine; a panic is logged and ends the agent
// through its cleanup (crash) instead of killing the process.
func goSafe(log logr.Logger, crash context.CancelFunc, what string, fn func()) {
	go func() {
		defer func() {
			if r := recover(); r != nil {
				log.Error(fmt.Errorf("panic: %v", r), "background task failed; exiting (VIPs removed)", "task", what)
				crash()
			}
		}()
		fn()
	}()
}

// watchStateFile reads the state file again on reload and every second (a
// stat; the file is read only when it changed).
func watchStateFile(ctx context.Context, s *memberStore, reload <-chan struct{}) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-reload:
		case <-t.C:
		}
		s.reload()
	}
}
