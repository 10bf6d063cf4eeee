package agent

import (
	"net/netip"
	"time"

	agentv1 "github.com/caplb/caplb/api/agent/v1alpha1"

	"github.com/caplb/caplb/modes/dataplane"
	"github.com/caplb/caplb/modes/election"
)

// rules are the fixed parameters of the state machine: the configuration
// and what was wired at start. step and everything it calls are methods of
// rules and pure: they read their arguments and return new values.
type rules struct {
	cfg  *agentv1.AgentConfiguration
	vips []netip.Addr
	// probeBootstrap: in the bootstrap membership, check that nobody
	// answers for the VIP before taking it (an ARP prober is wired).
	probeBootstrap bool
	// canProbe: an ARP prober is wired (arp.claimWhenSilent needs it).
	canProbe bool
}

// loopState is all the agent loop remembers from one step to the next. Only
// step produces a new one.
type loopState struct {
	// holding: the VIPs are held (ARP) or announced (BGP), as the data plane
	// confirmed with a successful Sync.
	holding bool
	// quiet: the Desired.Quiet of the last successful Sync.
	quiet bool
	// spread: the Desired.Spread of the last successful Sync.
	spread    *dataplane.Spread
	quiescing bool
	// quiesceSince: when quiescing began (zero while not quiescing).
	quiesceSince time.Time
	exiting      bool
	// quiesceBy: who asks this node to stay out ("admin", "node"), and why.
	quiesceBy map[string]string
	// handingOver: a successor announces the VIPs; the hand-over runs to its
	// end even if this node becomes eligible again meanwhile.
	handingOver bool
	// redirectFrom: the previous owner this node's claim redirects flows to
	// (Desired.HandOver); zero when none, or once that owner let go or died.
	redirectFrom netip.Addr

	quorumSince   time.Time
	quorumLostAt  time.Time
	handoverStart time.Time
	successor     string
	successorAt   time.Time
	lastSync      time.Time
	confirmFailAt time.Time
	claimSince    time.Time
	releasedAt    time.Time
	pulledAt      time.Time
	// nextProbe and lastProbe: the bootstrap probe's back-off and outcome.
	nextProbe    time.Time
	lastProbe    string
	lastFailOpen bool
	// silent: the holder we have not heard from (fastfail.go);
	// silentLogged: the one already logged as treated as failed.
	silent       string
	silentLogged string

	transitions   int
	lastReason    string
	lastChange    time.Time
	waitingReason string
}

// inputs is everything one step reads from the world, gathered before it.
type inputs struct {
	now          time.Time
	healthy      bool
	healthDetail string
	// linkDown: the VIP interface is down now; linkUp: it is up and has been
	// for linkHoldDown (both as if up when the link is not watched).
	linkDown, linkUp bool
	// exit: the first stop signal arrived since the last step; quiesce: the
	// quiesce requests that arrived, in order.
	exit    bool
	quiesce []quiesceRequest

	// election: the ARP membership runs; the fields below come from it.
	election    bool
	view        election.View
	roster      election.Roster
	confirmedAt time.Time
	// answers: each member's answers to our direct pings (nil: not
	// recorded, no silent-holder detection).
	answers map[string]election.Answers
	// confirmation and probe are the outcomes of the I/O a previous pass of
	// the same step asked for (output.needConfirmation, needProbe).
	confirmation *confirmation
	probe        *probeOutcome
	// probeJitter is added to the bootstrap probe's one-second back-off so
	// that two nodes that collided do not probe in step again.
	probeJitter time.Duration

	// busy is the data plane's count of connections to the VIPs that still
	// carry requests, read while a holder drains with quiesce.busyDrain
	// (nil: not read; output.needBusy asks for it).
	busy *int

	// spread is what the data plane reports of the spread mode's forwarding
	// (nil when it does not spread).
	spread *dataplane.SpreadStatus
	// peers are the BGP speaker's sessions (nil in arp mode). Only the report
	// reads them, so publish fills them in from the status it reads anyway.
	peers []dataplane.PeerStatus

	// digest is what this node gossips as its configuration digest.
	digest string
	// runningVersion and runningMember: the membership this node runs and
	// whether it is in it (for the Node report).
	runningVersion int64
	runningMember  bool
}

// confirmation is a direct-ping round's outcome (election.ConfirmQuorum).
type confirmation struct{ reached, needed int }

// probeOutcome is the bootstrap probe's outcome.
type probeOutcome struct {
	res probeResult
	err error
}

// output is what a step asks of the world.
type output struct {
	// needConfirmation / needProbe: the step cannot decide without a
	// direct-ping round / the bootstrap probe; the loop runs it and steps
	// again, from the same state, with its outcome in the inputs.
	needConfirmation, needProbe bool
	// needBusy: the drain cannot decide without the data plane's count of
	// busy connections (inputs.busy).
	needBusy bool
	// metaBefore is gossiped before the Sync (eligibility, silence); after a
	// change of role the new state's meta follows it.
	metaBefore election.Meta
	desired    dataplane.Desired
	// sync: desired changed, or the periodic re-sync is due.
	sync bool
	// unsynced is the state to keep instead of the step's if the Sync
	// fails: a claim does not happen, and nobody is told we hold.
	unsynced loopState
	// pull: peers to ask for the newer membership they advertise.
	pull  []string
	notes []note

	// What /status shows of this step.
	eligible bool
	view     election.View
	decision election.Decision
}

// note is a log line a step asks for.
type note struct {
	msg string
	kv  []any
}

func (o *output) note(msg string, kv ...any) { o.notes = append(o.notes, note{msg: msg, kv: kv}) }

// meta is what this node gossips about itself in st.
func (st loopState) meta(eligible bool, digest string) election.Meta {
	return election.Meta{Eligible: eligible, Holding: st.holding, Quiescing: st.quiescing, ConfigDigest: digest, Silent: st.silent}
}

// become records the outcome of a step: holding want for reason.
func (st loopState) become(want bool, reason string, now time.Time) loopState {
	if want == st.holding {
		return st
	}
	st.holding = want
	st.transitions++
	st.lastReason, st.lastChange = reason, now
	st.handoverStart, st.successorAt, st.successor = time.Time{}, time.Time{}, ""
	if !want {
		st.handingOver = false
		st.releasedAt = now
	}
	return st
}
