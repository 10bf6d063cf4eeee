package agent

import (
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	agentv1 "github.com/caplb/caplb/api/agent/v1alpha1"

	"github.com/caplb/caplb/modes/dataplane"
)

// Status is the agent's state as /status shows it (JSON), for people and for
// the lab tests.
type Status struct {
	Node string `json:"node"`
	Mode string `json:"mode"`
	// Role: "owner" (holds the VIPs), "backup", or "stopped"; in bgp mode
	// "announcing" or "withdrawn".
	Role      string   `json:"role"`
	Holding   bool     `json:"holding"`
	VIPs      []string `json:"vips"`
	Healthy   bool     `json:"healthy"`
	Health    string   `json:"health"`
	Eligible  bool     `json:"eligible"`
	Quiescing bool     `json:"quiescing"`
	// Quorum, MembersSeen and MembersConfigured: see docs/backends/arp.md.
	Quorum            bool `json:"quorum"`
	MembersSeen       int  `json:"membersSeen"`
	MembersConfigured int  `json:"membersConfigured"`
	// MajorityContact: when a majority last answered this member's direct
	// pings (arp mode); an owner releases once it is older than
	// election.contactTimeout.
	MajorityContact *time.Time `json:"majorityContact,omitempty"`
	Owner           string     `json:"owner,omitempty"`
	Decision        string     `json:"decision,omitempty"`
	// Waiting explains why the role does not change yet (settling, draining).
	Waiting        string         `json:"waiting,omitempty"`
	Transitions    int            `json:"transitions"`
	LastTransition *Transition    `json:"lastTransition,omitempty"`
	ConfigDigest   string         `json:"configDigest"`
	Members        []MemberStatus `json:"members,omitempty"`
	// Dataplane shows the VIPs held on the interface in arp mode.
	Dataplane *dataplane.ARPStatus `json:"dataplane,omitempty"`
	// BGP shows the speaker's sessions and announced prefixes in bgp mode.
	BGP            *dataplane.BGPStatus `json:"bgp,omitempty"`
	Updated        time.Time            `json:"updated"`
	ConfigMismatch []string             `json:"configMismatch,omitempty"`
	// MembershipVersion is the membership this node runs; NewestVersion the
	// newest any peer advertises (higher: this node is stale and waits).
	MembershipVersion int64 `json:"membershipVersion"`
	NewestVersion     int64 `json:"newestVersion"`
	// Others are alive nodes outside the membership (joiners, removed
	// members handing over).
	Others []MemberStatus `json:"others,omitempty"`
	// Report is what the agent reports on its Node (AgentStatus).
	Report *agentv1.AgentStatus `json:"report,omitempty"`
}

// Transition is the last change of role.
type Transition struct {
	At     time.Time `json:"at"`
	To     string    `json:"to"`
	Reason string    `json:"reason"`
}

// MemberStatus is one configured member as this agent sees it.
type MemberStatus struct {
	Name         string `json:"name"`
	Alive        bool   `json:"alive"`
	Eligible     bool   `json:"eligible"`
	Holding      bool   `json:"holding"`
	Quiescing    bool   `json:"quiescing"`
	ConfigDigest string `json:"configDigest,omitempty"`
}

// publish makes the outcome of a step what /status, the Node report and
// the metrics show.
func (a *Agent) publish(in inputs, out output) {
	st, v, d := a.st, out.view, out.decision
	s := Status{
		Node: a.cfg.NodeName, Mode: a.cfg.Mode, Holding: st.holding, VIPs: a.cfg.VIPs,
		Healthy: in.healthy, Health: in.healthDetail, Eligible: out.eligible, Quiescing: st.quiescing,
		Quorum: d.Quorum, MembersSeen: d.Seen, MembersConfigured: len(v.Members),
		MembershipVersion: v.Version, NewestVersion: d.Newest,
		Owner: d.Owner, Decision: d.Reason, Waiting: st.waitingReason, Transitions: st.transitions,
		ConfigDigest: in.digest, Updated: in.now,
	}
	if !in.election {
		s.MembersConfigured = len(a.cfg.Members)
	}
	ds := a.dp.Status()
	s.Dataplane, s.BGP = ds.ARP, ds.BGP
	if ds.BGP != nil {
		in.peers = ds.BGP.Peers
	}
	rep := a.rules.report(st, in)
	s.Report = &rep
	if at := in.confirmedAt; !at.IsZero() {
		s.MajorityContact = &at
	}
	switch {
	case a.cfg.Mode == agentv1.ModeBGP && st.holding:
		s.Role = "announcing"
	case a.cfg.Mode == agentv1.ModeBGP:
		s.Role = "withdrawn"
	case st.holding:
		s.Role = "owner"
	default:
		s.Role = "backup"
	}
	if st.transitions > 0 {
		to := "backup"
		if st.holding {
			to = "owner"
		}
		s.LastTransition = &Transition{At: st.lastChange, To: to, Reason: st.lastReason}
	}
	for _, m := range v.Members {
		s.Members = append(s.Members, MemberStatus{Name: m.Name, Alive: m.Alive, Eligible: m.Meta.Eligible,
			Holding: m.Meta.Holding, Quiescing: m.Meta.Quiescing, ConfigDigest: m.Meta.ConfigDigest})
	}
	s.ConfigMismatch = d.Conflicting
	for _, m := range v.Others {
		s.Others = append(s.Others, MemberStatus{Name: m.Name, Alive: m.Alive, Eligible: m.Meta.Eligible,
			Holding: m.Meta.Holding, Quiescing: m.Meta.Quiescing, ConfigDigest: m.Meta.ConfigDigest})
	}
	a.m.observe(s)
	a.mu.Lock()
	a.status = s
	a.mu.Unlock()
}

// Status returns the last published status.
func (a *Agent) Status() Status {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.status
}

// metrics are the agent's Prometheus series (the data plane registers its
// own: announcements sent, duplicate owners).
type metrics struct {
	owner       prometheus.Gauge
	eligible    prometheus.Gauge
	healthy     prometheus.Gauge
	quorum      prometheus.Gauge
	quiescing   prometheus.Gauge
	seen        prometheus.Gauge
	configured  prometheus.Gauge
	mismatch    prometheus.Gauge
	transitions *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	g := func(name, help string) prometheus.Gauge {
		return prometheus.NewGauge(prometheus.GaugeOpts{Name: "caplb_agent_" + name, Help: help})
	}
	m := &metrics{
		owner:      g("owner", "1 while this node holds and announces the VIPs (bgp: announces routes)."),
		eligible:   g("eligible", "1 while the local API server is healthy and the node is not quiescing."),
		healthy:    g("apiserver_healthy", "1 while the local API server passes its health check."),
		quorum:     g("quorum", "1 while this node sees a majority of the configured members."),
		quiescing:  g("quiescing", "1 while the node is quiescing (handing over, staying out of the election)."),
		seen:       g("members_seen", "Configured members seen alive, this node included."),
		configured: g("members_configured", "Members in the configuration."),
		mismatch:   g("config_mismatch_members", "Alive members whose configuration digest differs from this node's."),
		transitions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "caplb_agent_transitions_total", Help: "Changes of role, by the role entered (owner or backup).",
		}, []string{"to"}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.owner, m.eligible, m.healthy, m.quorum, m.quiescing, m.seen, m.configured, m.mismatch, m.transitions} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}

// infoMetric is caplb_agent_info: always 1, labelled with what the agent serves, so that a
// Prometheus scraping the agents of many LoadBalancers can group their series per
// LoadBalancer (join on instance). One series per agent: vips lists its VIPs comma-separated,
// in the configuration's order.
func infoMetric(cfg *agentv1.AgentConfiguration) prometheus.Gauge {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "caplb_agent_info",
		Help: "What this agent serves: always 1, with the LoadBalancer's namespace and name, its cluster, the mode, the VIPs and the node as labels.",
		ConstLabels: prometheus.Labels{
			"namespace":    cfg.LoadBalancer.Namespace,
			"loadbalancer": cfg.LoadBalancer.Name,
			"cluster":      cfg.LoadBalancer.Cluster,
			"mode":         cfg.Mode,
			"vips":         strings.Join(cfg.VIPs, ","),
			"node":         cfg.NodeName,
		},
	})
	g.Set(1)
	return g
}

func (m *metrics) transition(owner bool) {
	if owner {
		m.transitions.WithLabelValues("owner").Inc()
	} else {
		m.transitions.WithLabelValues("backup").Inc()
	}
}

func (m *metrics) observe(s Status) {
	m.owner.Set(b2f(s.Holding))
	m.eligible.Set(b2f(s.Eligible))
	m.healthy.Set(b2f(s.Healthy))
	m.quorum.Set(b2f(s.Quorum))
	m.quiescing.Set(b2f(s.Quiescing))
	m.seen.Set(float64(s.MembersSeen))
	m.configured.Set(float64(s.MembersConfigured))
	m.mismatch.Set(float64(len(s.ConfigMismatch)))
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
