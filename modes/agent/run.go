package agent

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strings"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/caplb/caplb/modes/arp"
	"github.com/caplb/caplb/modes/bgp"
	"github.com/caplb/caplb/modes/dataplane"
	"github.com/caplb/caplb/modes/election"
)

// Run wires the agent from cfg and runs it until ctx ends (then it hands over
// and exits) or force ends (then it exits at once). Every exit path removes
// the VIPs; only SIGKILL cannot, and the next start removes what it left
// (arp.RemoveStale).
func Run(ctx, force context.Context, cfg *Config, log logr.Logger) (err error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	dp, err := newDataplane(cfg, log, reg)
	if err != nil {
		return err
	}
	closeDP := true
	defer func() {
		if closeDP {
			if cerr := dp.Close(context.Background()); cerr != nil {
				err = errors.Join(err, cerr)
			}
		}
	}()

	h, err := newHealthChecker(cfg.Health)
	if err != nil {
		return err
	}
	m, err := newMetrics(reg)
	if err != nil {
		return fmt.Errorf("register metrics: %w", err)
	}
	var ml membership
	if cfg.Mode == ModeARP {
		ecfg, err := electionConfig(cfg)
		if err != nil {
			return err
		}
		mship, err := election.Start(ecfg, election.Meta{ConfigDigest: cfg.Digest()}, log.WithName("election"))
		if err != nil {
			return err
		}
		ml = mship
	}
	a := newAgent(cfg, log, dp, ml, h, m)

	if cfg.Admin.Listen != "0" {
		stop, err := serveAdmin(cfg.Admin.Listen, adminHandler(a, reg))
		if err != nil {
			if ml != nil {
				_ = ml.Close()
			}
			return err
		}
		defer stop()
	}
	hctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go h.run(hctx, a.Wake)
	if st, ok := dp.(dataplaneStatus); ok && cfg.Mode == ModeARP {
		// Track the VIP interface (linkwatch.go).
		if a.link, err = startLinkWatch(hctx, st.Status().Interface, a.Wake, log); err != nil {
			log.Error(err, "VIP interface not tracked: a link going down releases only through lost contact")
		}
	}

	log.Info("agent started", "node", cfg.NodeName, "mode", cfg.Mode, "vips", cfg.VIPs,
		"members", len(cfg.Members), "admin", cfg.Admin.Listen, "configDigest", cfg.Digest())
	closeDP = false // Agent.Run closes it on every path
	return a.Run(ctx, force)
}

func newDataplane(cfg *Config, log logr.Logger, reg prometheus.Registerer) (dataplane.Dataplane, error) {
	if cfg.Mode == ModeBGP {
		// The one call into modes/bgp; its signature follows that package.
		sp, err := bgp.New(*cfg.BGP, log.WithName("bgp"), reg)
		if err != nil {
			return nil, fmt.Errorf("bgp: %w", err)
		}
		return sp, nil
	}
	vips := cfg.ParsedVIPs()
	removed, err := arp.RemoveStale(vips)
	if len(removed) > 0 {
		log.Info("removed VIPs left by an earlier run (SIGKILL or crash)", "addresses", removed)
	}
	if err != nil {
		return nil, err
	}
	ifName := cfg.Interface
	if ifName == "" {
		ifName, err = arp.InterfaceFor(vips[0])
		if err != nil {
			return nil, fmt.Errorf("interface: auto-detection failed (%w); set interface", err)
		}
		log.Info("interface detected from the route to the VIP", "interface", ifName, "vip", vips[0].String())
	}
	return arp.New(arp.Config{
		Interface:       ifName,
		BurstCount:      cfg.ARP.BurstCount,
		BurstInterval:   cfg.ARP.BurstInterval.Duration,
		RefreshInterval: cfg.ARP.RefreshInterval.Duration,
		ProbeInterval:   cfg.ARP.ProbeInterval.Duration,
	}, log.WithName("arp"), reg)
}

func electionConfig(cfg *Config) (election.Config, error) {
	e := cfg.Election
	ec := election.Config{
		Self:           cfg.NodeName,
		BindAddress:    e.BindAddress,
		Port:           e.Port,
		ProbeInterval:  e.ProbeInterval.Duration,
		ProbeTimeout:   e.ProbeTimeout.Duration,
		SuspicionMult:  e.SuspicionMult,
		GossipInterval: e.GossipInterval.Duration,
		RejoinInterval: e.RejoinInterval.Duration,
	}
	for _, m := range cfg.Members {
		ec.Members = append(ec.Members, election.Member{Name: m.Name, Address: netip.MustParseAddr(m.Address).Unmap()})
	}
	if e.SecretKeyFile != "" {
		key, err := readKey(e.SecretKeyFile)
		if err != nil {
			return ec, err
		}
		ec.SecretKey = key
	}
	return ec, nil
}

// readKey accepts a raw or base64 key of 16, 24 or 32 bytes.
func readKey(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("election.secretKeyFile: %w", err)
	}
	s := strings.TrimSpace(string(b))
	if d, err := base64.StdEncoding.DecodeString(s); err == nil && validKeyLen(len(d)) {
		return d, nil
	}
	if validKeyLen(len(s)) {
		return []byte(s), nil
	}
	return nil, fmt.Errorf("election.secretKeyFile: %s: want 16, 24 or 32 bytes (raw or base64)", path)
}

func validKeyLen(n int) bool { return n == 16 || n == 24 || n == 32 }
