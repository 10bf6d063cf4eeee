package bgp

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics of the BGP data plane. Peers are few and fixed by configuration, so a peer label is
// bounded.
type metrics struct {
	sessionUp      *prometheus.GaugeVec
	bfdUp          *prometheus.GaugeVec
	sessionChanges *prometheus.CounterVec
	peerErrors     *prometheus.CounterVec
	announced      prometheus.Gauge
	announcements  prometheus.Counter
	withdrawals    prometheus.Counter
	foreignFlows   prometheus.Gauge
	flowPackets    prometheus.Counter
	flowHeld       prometheus.Counter
	// flowHoldFull and flowCopiesLimited count what the bounds on held segments cut.
	flowHoldFull      prometheus.Counter
	flowCopiesLimited prometheus.Counter
	// flowsCut counts connections left out of this node's shared list.
	flowsCut prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		bfdUp: newBFDGauge(),
		sessionUp: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "caplb_bgp_session_up",
			Help: "1 while the BGP session to the peer is established, else 0.",
		}, []string{"peer"}),
		sessionChanges: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "caplb_bgp_session_state_changes_total",
			Help: "BGP session state changes, by the state entered.",
		}, []string{"peer", "state"}),
		peerErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "caplb_bgp_peer_errors_total",
			Help: "BGP session failures by kind: notification_received, notification_sent, connect_failed, hold_timer_expired.",
		}, []string{"peer", "kind"}),
		announced: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "caplb_bgp_announced_routes",
			Help: "VIP prefixes this node currently advertises.",
		}),
		announcements: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "caplb_bgp_announcements_total",
			Help: "VIP prefixes announced (each transition from withdrawn to announced).",
		}),
		withdrawals: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "caplb_bgp_withdrawals_total",
			Help: "VIP prefixes withdrawn (each transition from announced to withdrawn).",
		}),
		foreignFlows: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "caplb_bgp_foreign_flows",
			Help: "Other members' TCP connections this node sends on to their owner if the routers send them here (flow sharing).",
		}),
		flowPackets: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "caplb_bgp_flow_packets_forwarded_total",
			Help: "Packets of other members' connections this node received and sent on to their owner (flow sharing): each is a segment that would have drawn a reset.",
		}),
		flowHeld: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "caplb_bgp_flow_packets_held_total",
			Help: "Packets of connections nobody here knew, held rather than reset: copied to every member (the owner takes its copy) while their owner's list was awaited (flow sharing).",
		}),
		flowHoldFull: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "caplb_bgp_flow_hold_set_full_total",
			Help: "Held packets whose connection found the held or seen set full (flow sharing): held all the same, not reset after the hold. Rising: spoofed connections, or far more rehashed ones than expected.",
		}),
		flowCopiesLimited: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "caplb_bgp_flow_copies_limited_total",
			Help: "Held packets not copied to the other members: over the copy rate (flow sharing). Their owner gets the client's retransmission after its next list.",
		}),
		flowsCut: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "caplb_bgp_flows_left_out_total",
			Help: "Connections left out of this node's shared list, summed over the lists read (flow sharing): beyond the per-client-address cap or the list's size. A rehash resets them.",
		}),
	}
	if reg == nil {
		return m, nil
	}
	register := func(c prometheus.Collector) (prometheus.Collector, error) {
		if err := reg.Register(c); err != nil {
			// A second Speaker on the same registry (tests, a restart in-process) shares the
			// first one's collectors.
			var are prometheus.AlreadyRegisteredError
			if errors.As(err, &are) {
				return are.ExistingCollector, nil
			}
			return nil, err
		}
		return c, nil
	}
	var errs []error
	if c, err := register(m.sessionUp); err == nil {
		m.sessionUp = c.(*prometheus.GaugeVec)
	} else {
		errs = append(errs, err)
	}
	if c, err := register(m.bfdUp); err == nil {
		m.bfdUp = c.(*prometheus.GaugeVec)
	} else {
		errs = append(errs, err)
	}
	if c, err := register(m.sessionChanges); err == nil {
		m.sessionChanges = c.(*prometheus.CounterVec)
	} else {
		errs = append(errs, err)
	}
	if c, err := register(m.peerErrors); err == nil {
		m.peerErrors = c.(*prometheus.CounterVec)
	} else {
		errs = append(errs, err)
	}
	if c, err := register(m.announced); err == nil {
		m.announced = c.(prometheus.Gauge)
	} else {
		errs = append(errs, err)
	}
	if c, err := register(m.announcements); err == nil {
		m.announcements = c.(prometheus.Counter)
	} else {
		errs = append(errs, err)
	}
	if c, err := register(m.withdrawals); err == nil {
		m.withdrawals = c.(prometheus.Counter)
	} else {
		errs = append(errs, err)
	}
	if c, err := register(m.foreignFlows); err == nil {
		m.foreignFlows = c.(prometheus.Gauge)
	} else {
		errs = append(errs, err)
	}
	if c, err := register(m.flowPackets); err == nil {
		m.flowPackets = c.(prometheus.Counter)
	} else {
		errs = append(errs, err)
	}
	for _, c := range []*prometheus.Counter{&m.flowHeld, &m.flowHoldFull, &m.flowCopiesLimited, &m.flowsCut} {
		if got, err := register(*c); err == nil {
			*c = got.(prometheus.Counter)
		} else {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return m, nil
}
