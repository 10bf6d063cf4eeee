// Package agent is the node agent: on each control-plane node it checks the
// local API server, takes part in the election (modes/election) and drives the
// data plane (modes/arp or modes/bgp) through dataplane.Desired. The loop is:
// health → eligibility → election → Desired → Sync.
package agent

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"time"

	agentv1 "github.com/caplb/caplb/api/agent/v1alpha1"

	"github.com/go-logr/logr"

	"github.com/caplb/caplb/modes/arp"
	"github.com/caplb/caplb/modes/bgp"
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

// dataplaneStatus is implemented by data planes that can explain themselves
// (modes/arp).
type dataplaneStatus interface {
	Status() arp.Status
}

// bgpStatus is implemented by the BGP speaker (modes/bgp): its sessions and prefixes.
type bgpStatus interface {
	Status() bgp.Status
}

// quieter is implemented by data planes that can keep the VIPs while no
// longer announcing them (modes/arp): the hand-over's drain.
type quieter interface {
	SetQuiet(quiet bool)
}

// handoverRedirector is implemented by data planes that can send the
// previous owner's TCP flows back to it while it drains (modes/arp), so that
// a graceful hand-over loses no connection.
type handoverRedirector interface {
	HandOverFrom(vips []netip.Addr, prev netip.Addr, window time.Duration)
}

// handoverRedirectMargin is added to quiesce.drain for the redirect window:
// the old owner starts draining only once it sees us holding in gossip.
const handoverRedirectMargin = time.Second

// Agent holds one node's role. Create it with newAgent; Run drives it.
type Agent struct {
	cfg    *agentv1.AgentConfiguration
	log    logr.Logger
	dp     dataplane.Dataplane
	ml     membership // nil in bgp mode: every eligible member announces
	health health
	m      *metrics
	vips   []netip.Addr

	wake     chan struct{}
	quiesceC chan quiesceRequest
	// prober checks, in the bootstrap membership, that nobody answers for
	// the VIP before this node takes it (nil: claim without probing).
	prober vipProber
	// store keeps the newest membership (nil in tests without one).
	store *memberStore

	// Loop state, owned by the loop goroutine.
	holding       bool
	quiescing     bool
	exiting       bool
	quorumSince   time.Time
	quorumLostAt  time.Time
	handoverStart time.Time
	successorAt   time.Time
	successor     string
	lastSync      time.Time
	transitions   int
	confirmFailAt time.Time
	claimSince    time.Time
	handingOver   bool
	lastReason    string
	lastChange    time.Time
	waitingReason string
	// quiesceBy: who asks this node to stay out ("admin", "node"), and why.
	quiesceBy    map[string]string
	releasedAt   time.Time
	nextProbe    time.Time
	lastProbe    string
	pulledAt     time.Time
	lastFailOpen bool
	silent       string     // fastfail.go: the holder we have not heard from
	silentLogged string     // fastfail.go
	link         *linkWatch // linkwatch.go; nil: not watched

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

func newAgent(cfg *agentv1.AgentConfiguration, log logr.Logger, dp dataplane.Dataplane, ml membership, h health, m *metrics) *Agent {
	return &Agent{
		cfg: cfg, log: log, dp: dp, ml: ml, health: h, m: m, vips: cfg.ParsedVIPs(),
		wake: make(chan struct{}, 1), quiesceC: make(chan quiesceRequest, 8),
		quiesceBy: map[string]string{},
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

// Run runs the loop until ctx ends, then hands over (make-before-break, at
// most quiesce.handoverTimeout), leaves the group and returns. force ending
// skips the hand-over. The data plane is closed (VIPs removed) on every path.
func (a *Agent) Run(ctx, force context.Context) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("agent loop panicked: %v", r)
		}
		a.shutdown()
	}()
	t := time.NewTicker(tick)
	defer t.Stop()
	var changed <-chan struct{}
	if a.ml != nil {
		changed = a.ml.Changed()
	}
	done := ctx.Done()
	for {
		select {
		case <-force.Done():
			a.log.Info("exiting without hand-over", "reason", "second signal")
			return nil
		case <-done:
			done = nil
			a.exiting, a.quiescing = true, true
			a.handoverStart = time.Now()
			a.log.Info("exit requested: handing over before releasing", "holding", a.holding)
		case q := <-a.quiesceC:
			a.applyQuiesce(q)
		case <-a.wake:
		case <-changed:
		case <-t.C:
		}
		a.step(time.Now())
		if a.exiting && !a.holding {
			return nil
		}
	}
}

// step evaluates the situation once and applies the outcome.
func (a *Agent) step(now time.Time) {
	healthy, healthDetail := a.health.state()
	// Once a successor announces the VIPs, the hand-over runs to its end
	// even if the API server recovers meanwhile: reclaiming as the more
	// preferred holder would move the VIP back and forth. A node outside
	// the membership it runs is never eligible (the bootstrap membership,
	// version 0 with no members, excepted).
	eligible := healthy && !a.quiescing && !a.handingOver && a.link.up(now)
	var view election.View
	var d election.Decision
	if a.ml != nil {
		view = a.ml.View()
		eligible = eligible && (view.Member || a.bootstrap(view))
		a.ml.SetMeta(a.meta(eligible))
		view = a.ml.View()
		a.silent = a.silentHolder(view, now)
		a.ml.SetMeta(a.meta(eligible)) // no-op unless Silent changed
		a.dropSilentHolders(&view)
		d = election.Decide(view)
		a.pullNewer(now, view, d)
	}
	// Out of touch with a majority (a bad link, or this process stalled):
	// the view is stale, so a claim waits a full settle once contact is
	// back, as after a loss of quorum. Otherwise a node that stalled while
	// holding would release and then reclaim from a view that still shows
	// its successor dead, moving the VIP back.
	if a.ml != nil && a.lostContact(now) {
		a.quorumSince = time.Time{}
	}
	if d.Quorum && a.quorumSince.IsZero() {
		a.quorumSince, a.quorumLostAt = now, time.Time{}
	} else if !d.Quorum && a.quorumLostAt.IsZero() {
		a.quorumSince, a.quorumLostAt = time.Time{}, now
	}
	if !eligible && a.holding && a.handoverStart.IsZero() {
		a.handoverStart = now
	}
	if eligible || !a.holding {
		a.handoverStart, a.successorAt, a.successor = time.Time{}, time.Time{}, ""
	}

	want, reason := a.decide(now, eligible, healthy, view, d)
	// Holding while not eligible is the hand-over: stop announcing so that
	// the successor's announcements win the neighbours' caches. Going quiet
	// happens before the sync; leaving quiet after it, so that a release
	// never announces the VIP it is about to remove. With nobody eligible to
	// hand over to (fail-open, a quiesce pending) the holder is the only way
	// to the VIP: it keeps answering and announcing, or a neighbour whose
	// cache expires, or that a brief claimant moved, finds nobody.
	q, _ := a.dp.(quieter)
	quiet := want && !eligible && eligibleOther(view, a.cfg.NodeName)
	if q != nil && quiet {
		q.SetQuiet(true)
	}
	defer func() {
		if q != nil && !quiet {
			q.SetQuiet(false)
		}
	}()
	a.waitingReason = ""
	if want == a.holding && reason != d.Reason {
		a.waitingReason = reason
	}
	if want && !a.holding {
		a.redirectFromPrevious(view)
	}
	if want != a.holding || now.Sub(a.lastSync) >= resync {
		if err := a.dp.Sync(context.Background(), dataplane.Desired{Announce: want, VIPs: a.vips}); err != nil {
			a.log.Error(err, "data plane sync failed; retrying", "announce", want)
			if want {
				// Not announcing yet: do not tell the others we hold.
				want = a.holding
			}
		} else {
			a.lastSync = now
		}
	}
	if want != a.holding {
		a.holding = want
		a.transitions++
		a.lastReason, a.lastChange = reason, now
		a.m.transition(want)
		if want {
			a.log.Info("became owner: VIPs added and announced", "reason", reason, "vips", a.cfg.VIPs)
		} else {
			a.log.Info("released the VIPs", "reason", reason)
		}
		a.handoverStart, a.successorAt, a.successor = time.Time{}, time.Time{}, ""
		if !want {
			a.handingOver = false
			a.releasedAt = now
		}
		if a.ml != nil {
			a.ml.SetMeta(a.meta(eligible))
		}
	}
	a.publish(now, healthy, healthDetail, eligible, view, d)
}

// redirectFromPrevious, when claiming the VIPs from a member that still
// holds them (a graceful hand-over: it drains after we announce), asks the
// data plane to forward that member's flows to it for the drain window. The
// holder may be outside the roster: a member the latest version removed
// drains the same way, and a handshake whose SYN reached it before the
// neighbours' caches flipped would otherwise get a RST from us.
func (a *Agent) redirectFromPrevious(v election.View) {
	r, ok := a.dp.(handoverRedirector)
	if !ok || a.cfg.Mode == agentv1.ModeBGP {
		return
	}
	for _, m := range append(append([]election.MemberView{}, v.Members...), v.Others...) {
		if m.Name == a.cfg.NodeName || !m.Alive || !m.Meta.Holding {
			continue
		}
		if addr := a.memberAddress(m); addr.IsValid() {
			r.HandOverFrom(a.vips, addr, a.cfg.Quiesce.Drain.Duration+handoverRedirectMargin)
		}
		return
	}
}

// memberAddress is m's node address: the configured one when m is in the
// static member list, else what the membership knows.
func (a *Agent) memberAddress(m election.MemberView) netip.Addr {
	for _, mc := range a.cfg.Members {
		if mc.Name == m.Name {
			if addr, err := netip.ParseAddr(mc.Address); err == nil {
				return addr
			}
		}
	}
	return m.Address
}

// decide returns whether this node should hold the VIPs and why.
func (a *Agent) decide(now time.Time, eligible, healthy bool, v election.View, d election.Decision) (bool, string) {
	if a.cfg.Mode == agentv1.ModeBGP {
		if eligible {
			return true, "eligible (bgp: every eligible member announces)"
		}
		return false, "not eligible: " + a.ineligibleReason(healthy)
	}
	self := a.cfg.NodeName
	if a.bootstrap(v) {
		return a.decideBootstrap(now, eligible, healthy)
	}
	settled := !a.quorumSince.IsZero() && now.Sub(a.quorumSince) >= a.cfg.Election.Settle.Duration
	if a.holding || !(eligible && d.Quorum && d.Owner == self) {
		a.claimSince = time.Time{}
	}
	switch {
	case a.holding && a.link.down():
		// Nobody can be reached to hand over to: let go at once, as
		// keepalived's track_interface does (linkwatch.go).
		return false, "VIP interface down"
	case !d.Quorum && a.holding && a.holdThroughNoQuorum(now):
		return true, "gossip shows no quorum, but a majority answered direct pings just now"
	case !d.Quorum:
		return false, d.Reason
	case a.holding && a.lostContact(now):
		return false, fmt.Sprintf("no direct answer from a majority for %v", a.cfg.Election.ContactTimeout.Duration)
	case eligible && d.Owner == self:
		if a.holding {
			return true, d.Reason
		}
		if !settled {
			return false, "quorum regained; settling before claiming"
		}
		if d.Stale(v) {
			return false, fmt.Sprintf("claim withheld: a peer runs membership version %d, this node %d", d.Newest, v.Version)
		}
		if !d.ClaimQuorum {
			return false, fmt.Sprintf("claim withheld: %d of %d members agree on membership version %d and the configuration (conflicting: %v)", d.Agreeing, len(v.Members), v.Version, d.Conflicting)
		}
		// Members ahead of us in preference that are alive may be eligible
		// with news that has not reached us yet (a quiesce cancelled, a
		// health check recovered): give their claim a head start, a few
		// gossip rounds each, rather than claim together and flip the
		// neighbours' caches twice. With the owner dead and nobody alive
		// ahead, there is no wait.
		if a.claimSince.IsZero() {
			a.claimSince = now
		}
		if wait := time.Duration(aliveAhead(v, self)) * claimStagger(a.cfg); now.Sub(a.claimSince) < wait {
			return false, fmt.Sprintf("claim staggered %v behind members preferred over this one", wait)
		}
		if now.Sub(a.confirmFailAt) < a.cfg.Election.ProbeInterval.Duration {
			return false, "claim withheld: a majority did not answer direct pings"
		}
		if reached, needed := a.ml.ConfirmQuorum(); reached < needed {
			a.confirmFailAt = now
			return false, fmt.Sprintf("claim withheld: %d of %d needed members answered direct pings", reached, needed)
		}
		return true, d.Reason
	case eligible:
		if a.holding {
			return false, "yielding: " + d.Reason
		}
		return false, d.Reason
	case !a.holding:
		return false, "not eligible: " + a.ineligibleReason(healthy)
	}

	// Holding but not eligible: make-before-break hand-over. Keep the VIPs
	// until another member announces them (plus the drain period when
	// quiescing), so that clients never find nobody at the VIP.
	successor, candidate := "", false
	for _, m := range v.Members {
		if m.Name == self || !m.Alive {
			continue
		}
		if m.Meta.Holding && m.Meta.Eligible && successor == "" {
			successor = m.Name
		}
		candidate = candidate || m.Meta.Eligible
	}
	if successor != "" {
		a.handingOver = true
		if a.successor != successor {
			a.successor, a.successorAt = successor, now
		}
		// The drain applies to every hand-over (quiesce, exit, unhealthy):
		// we are quiet already, so it only serves stragglers whose caches
		// have not moved yet.
		if now.Sub(a.successorAt) >= a.cfg.Quiesce.Drain.Duration {
			return false, fmt.Sprintf("handed over to %s (%s)", successor, a.ineligibleReason(healthy))
		}
		return true, fmt.Sprintf("draining: %s announces the VIPs", successor)
	}
	a.successor, a.successorAt = "", time.Time{}
	waited := now.Sub(a.handoverStart)
	a.lastFailOpen = false
	switch {
	case !healthy && !candidate && !a.exiting && !a.quiescing && v.Member && a.failOpen():
		// Fail-open: every member's API server failing at once is etcd
		// losing quorum, not this node; the VIP stays where it is so that
		// recovery tools reach an endpoint. Only with quorum (checked
		// above): a minority never holds. Only one holder fails open: a real
		// API server's /readyz fails on each node a little apart, so a
		// member can claim from a failing owner and fail itself during the
		// owner's drain, leaving two holders with nobody to hand over to;
		// the less preferred one lets go.
		if other := holderAhead(v, self); other != "" {
			return false, fmt.Sprintf("fail-open: %s, preferred over this node, keeps the VIP", other)
		}
		a.lastFailOpen = true
		return true, "fail-open: local API server unhealthy but no member is eligible; keeping the VIP"
	case !healthy && !candidate:
		return false, "local API server unhealthy and no eligible member to hand over to"
	case a.exiting && !candidate:
		return false, "exiting and no eligible member to hand over to"
	case (a.exiting || !healthy) && waited >= a.cfg.Quiesce.HandoverTimeout.Duration:
		return false, fmt.Sprintf("no successor announced within %v (%s)", a.cfg.Quiesce.HandoverTimeout.Duration, a.ineligibleReason(healthy))
	case !candidate:
		return true, "quiesce pending: no eligible member to hand over to"
	}
	return true, "handing over: waiting for a successor to announce"
}

func (a *Agent) ineligibleReason(healthy bool) string {
	switch {
	case a.exiting:
		return "exiting"
	case a.quiescing:
		return "quiescing"
	case !healthy:
		return "local API server unhealthy"
	case a.handingOver:
		return "hand-over in progress"
	case !a.link.up(time.Now()):
		return "VIP interface down or back up less than " + linkHoldDown.String() + " ago"
	case a.ml != nil && !a.ml.Roster().Has(a.cfg.NodeName):
		return fmt.Sprintf("not a member of membership version %d", a.ml.Roster().Version)
	}
	return "eligible"
}

func (a *Agent) meta(eligible bool) election.Meta {
	return election.Meta{Eligible: eligible, Holding: a.holding, Quiescing: a.quiescing, ConfigDigest: a.digest(), Silent: a.silent}
}

// shutdown releases everything on every exit path.
func (a *Agent) shutdown() {
	if a.ml != nil {
		a.holding = false
		a.ml.SetMeta(a.meta(false))
	}
	if err := a.dp.Close(context.Background()); err != nil {
		a.log.Error(err, "removing the VIPs failed")
	} else if a.holding || a.transitions > 0 {
		a.log.Info("data plane closed: VIPs removed")
	}
	a.holding = false
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
