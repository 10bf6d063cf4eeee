package agent

import (
	"fmt"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"

	agentv1 "github.com/caplb/caplb/api/agent/v1alpha1"

	"github.com/caplb/caplb/modes/arp"
	"github.com/caplb/caplb/modes/bgp"
	"github.com/caplb/caplb/modes/dataplane"
)

// newDataplane makes the configured data plane. It is the one place in the
// agent that names modes/arp or modes/bgp: everything else goes through
// dataplane.Dataplane (TestAgentNamesDataPlanesOnce).
func newDataplane(cfg *agentv1.AgentConfiguration, log logr.Logger, reg prometheus.Registerer) (dataplane.Dataplane, string, error) {
	if cfg.Mode == agentv1.ModeBGP {
		// The one call into modes/bgp; its signature follows that package.
		// A withdrawn member serves its connections (flow sharing) for the drain and the busy
		// drain, as an ARP holder hands over, and a second more for the last GOAWAY's answer.
		flowCap := cfg.Quiesce.Drain.Duration + cfg.Quiesce.BusyDrain.Duration + time.Second
		sp, err := bgp.New(*cfg.BGP, log.WithName("bgp"), reg, bgp.WithFlowLingerCap(flowCap), bgp.WithServedPorts(rules{cfg: cfg}.ports()))
		if err != nil {
			return nil, "", fmt.Errorf("bgp: %w", err)
		}
		return sp, "", nil
	}
	vips := cfg.ParsedVIPs()
	removed, err := arp.RemoveStale(vips)
	if len(removed) > 0 {
		log.Info("removed VIPs left by an earlier run (SIGKILL or crash)", "addresses", removed)
	}
	if err != nil {
		return nil, "", err
	}
	ifName := cfg.Interface
	if ifName == "" {
		ifName, err = arp.InterfaceFor(vips[0])
		if err != nil {
			return nil, "", fmt.Errorf("interface: auto-detection failed (%w); set interface", err)
		}
		log.Info("interface detected from the route to the VIP", "interface", ifName, "vip", vips[0].String())
	}
	dp, err := arp.New(arp.Config{
		Interface:       ifName,
		BurstCount:      cfg.ARP.BurstCount,
		BurstInterval:   cfg.ARP.BurstInterval.Duration,
		RefreshInterval: cfg.ARP.RefreshInterval.Duration,
		ProbeInterval:   cfg.ARP.ProbeInterval.Duration,
	}, log.WithName("arp"), reg)
	return dp, ifName, err
}
