// Package agent is the node agent: on each control-plane node it checks the
// local API server, takes part in the election (modes/election) and drives the
// data plane (modes/arp or modes/bgp) through dataplane.Desired.
//
// The loop (loop.go) gathers its inputs (health, the membership's view,
// direct-ping answers, link state, quiesce requests, the clock), runs the
// pure step (step.go, decide.go) and applies its output: the data plane's
// desired state, the gossiped meta, log lines, /status.
package agent

import (
	"context"
	"sync"
	"time"

	agentv1 "github.com/caplb/caplb/api/agent/v1alpha1"

	"github.com/go-logr/logr"

	"github.com/caplb/caplb/modes/dataplane"
	"github.com/caplb/caplb/modes/election"
)

// membership is what the agent needs from modes/election.
type membership interface {
	View() election.View
	SetMeta(election.Meta)
	Changed() <-chan struct{}
	ConfirmQuorum() (reached, needed int)
	ConfirmedAt() time.Time
	Leave(timeout time.Duration) error
	Close() error
	Roster() election.Roster
	SetRoster(election.Roster) bool
	Pull(names []string)
}

// health is what the agent needs from the health checker.
type health interface {
	state() (healthy bool, detail string)
}

// handoverRedirectMargin is added to quiesce.drain for the redirect window:
// the old owner starts draining only once it sees us holding in gossip.
const handoverRedirectMargin = time.Second

// Agent holds one node's role. Create it with newAgent; Run drives it.
type Agent struct {
	cfg    *agentv1.AgentConfiguration
	rules  rules
	log    logr.Logger
	dp     dataplane.Dataplane
	ml     membership // nil in bgp mode: every eligible member announces
	health health
	m      *metrics

	wake     chan struct{}
	quiesceC chan quiesceRequest
	// prober checks, in the bootstrap membership, that nobody answers for
	// the VIP before this node takes it (nil: claim without probing).
	prober vipProber
	// store keeps the newest membership (nil in tests without one).
	store *memberStore
	// link follows the VIP interface (linkwatch.go); nil: not watched.
	link *linkWatch

	// st is the loop's state, owned by the loop goroutine.
	st loopState

	mu     sync.Mutex
	status Status
}

const (
	// tick bounds how late time-based steps (settle, drain, timeouts) run.
	tick = 25 * time.Millisecond
	// resync re-applies the desired state even without a change, so an
	// address removed behind the agent's back comes back.
	resync = time.Second
	// leaveTimeout bounds the goodbye broadcast on exit.
	leaveTimeout = 500 * time.Millisecond
)

// agentParts are what newAgent wires; the nil ones are not used.
type agentParts struct {
	dp     dataplane.Dataplane
	ml     membership
	health health
	m      *metrics
	prober vipProber
	store  *memberStore
	link   *linkWatch
}

func newAgent(cfg *agentv1.AgentConfiguration, log logr.Logger, p agentParts) *Agent {
	return &Agent{
		cfg: cfg, log: log, dp: p.dp, ml: p.ml, health: p.health, m: p.m,
		prober: p.prober, store: p.store, link: p.link,
		rules: rules{cfg: cfg, vips: cfg.ParsedVIPs(), probeBootstrap: p.prober != nil && cfg.Membership.Dynamic, canProbe: p.prober != nil},
		wake:  make(chan struct{}, 1), quiesceC: make(chan quiesceRequest, 8),
		st: loopState{quiesceBy: map[string]string{}},
	}
}

// Wake asks the loop to re-evaluate now (health change).
func (a *Agent) Wake() {
	select {
	case a.wake <- struct{}{}:
	default:
	}
}

// Quiesce asks the agent to hand the VIP over and stay out of the election
// (on=true), or to take part again (on=false), on behalf of the admin
// socket.
func (a *Agent) Quiesce(on bool) {
	reason := ""
	if on {
		reason = "admin request"
	}
	a.requestQuiesce("admin", reason)
}

// shutdown releases everything on every exit path.
func (a *Agent) shutdown() {
	holding := a.st.holding
	a.st.holding = false
	if a.ml != nil {
		a.ml.SetMeta(a.st.meta(false, a.digest()))
	}
	if err := a.dp.Close(context.Background()); err != nil {
		a.log.Error(err, "removing the VIPs failed")
	} else if holding || a.st.transitions > 0 {
		a.log.Info("data plane closed: VIPs removed")
	}
	a.m.owner.Set(0)
	if a.ml != nil {
		if err := a.ml.Leave(leaveTimeout); err != nil {
			a.log.V(1).Info("leave not confirmed", "error", err.Error())
		}
		_ = a.ml.Close()
	}
	a.mu.Lock()
	a.status.Holding = false
	a.status.Role = "stopped"
	a.mu.Unlock()
}
