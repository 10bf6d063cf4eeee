package bgp

import (
	"context"
	"fmt"
	"net/netip"

	"github.com/prometheus/client_golang/prometheus"

	agentv1 "github.com/caplb/caplb/api/agent/v1alpha1"

	"github.com/caplb/caplb/modes/bfd"
)

// startBFD runs BFD to the peers whose configuration asks for it. The peer
// is what gains: it drops this node's routes when this node stops sending
// (frozen, powered off, its link silently dropping packets) after minTx x
// multiplier, instead of the hold time. This node, in turn, resets its BGP
// session to a peer it stopped hearing from (the BFD detection time expired
// on an up session), so that the session is re-established from scratch
// rather than trusted.
func (s *Speaker) startBFD(cfg agentv1.BGPConfig) error {
	var peers []bfd.Peer
	for _, p := range cfg.Peers {
		if p.BFD == nil {
			continue
		}
		minRx, minTx, mult := p.BFD.Timers()
		peers = append(peers, bfd.Peer{Address: netip.MustParseAddr(p.Address).Unmap(),
			Params: bfd.Params{DesiredMinTx: minTx, RequiredMinRx: minRx, DetectMult: mult}})
	}
	if len(peers) == 0 {
		return nil
	}
	for _, p := range peers {
		s.metrics.bfdUp.WithLabelValues(p.Address.String()).Set(0)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r, err := bfd.Start(ctx, peers, s.log.WithName("bfd"), s.bfdChanged)
	if err != nil {
		cancel()
		return fmt.Errorf("bgp: %w", err)
	}
	s.bfd, s.stopBFD = r, cancel
	return nil
}

// bfdChanged keeps the metric current. It does not reset the BGP session:
// the router is the side that acts on BFD (it drops this node's routes),
// and a reset from here raced gobgp's own handling of the router's Cease
// (seen in the lab: the session stayed idle), while a node whose process
// was frozen would see its own detection time expire on waking.
func (s *Speaker) bfdChanged(c bfd.Change) {
	up := 0.0
	if c.To == bfd.Up {
		up = 1
	}
	s.metrics.bfdUp.WithLabelValues(c.Peer.String()).Set(up)
}

// bgpEstablished enables the BFD session to peer once its BGP session is up
// (bfd.Runner.Enable says why).
func (s *Speaker) bgpEstablished(peer string) {
	if s.bfd == nil {
		return
	}
	if a, err := netip.ParseAddr(peer); err == nil {
		s.bfd.Enable(a)
	}
}

// bfdStatus is each BFD session's state by peer address ("" without BFD).
func (s *Speaker) bfdStatus() map[string]string {
	if s.bfd == nil {
		return nil
	}
	out := map[string]string{}
	for a, st := range s.bfd.Status() {
		out[a.String()] = st.State.String()
	}
	return out
}

func newBFDGauge() *prometheus.GaugeVec {
	return prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "caplb_bgp_bfd_session_up",
		Help: "1 while the BFD session to the peer is up, else 0 (peers with bfd configured only).",
	}, []string{"peer"})
}
