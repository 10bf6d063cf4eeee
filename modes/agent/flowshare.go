package agent

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"

	agentv1 "github.com/caplb/caplb/api/agent/v1alpha1"

	"github.com/caplb/caplb/modes/dataplane"
	"github.com/caplb/caplb/modes/election"
	"github.com/caplb/caplb/modes/flows"
)

// Flow sharing (BGP): the routers spread the VIP's flows over the members by ECMP, and every
// join or withdrawal rehashes some established flows onto a member without a socket for them,
// whose RST fails the requests in flight. Each member sends the others the list of flows it
// terminates; a member then sends on the packets of another's flow to it (the data plane's
// SetForeignFlows). A member that dies takes its flows' entries with it: the RST is then the
// fastest news for its clients; one that gossip only declared dead (starved of CPU) keeps them
// (sharingPeers).
const (
	// flowShareInterval: how often the local flows are read and, if changed, sent. A flow
	// started less than this before a rehash and moved by it is not known to the others yet:
	// they hold its segments (flows.HoldUnknown) until this node's next list names it.
	flowShareInterval = 100 * time.Millisecond
	// flowShareRefresh: the list is sent again unchanged this often, so that a member that
	// missed one (it restarted, a send failed) converges.
	flowShareRefresh = 2 * time.Second
)

// flowPeers is what flow sharing needs from modes/election.
type flowPeers interface {
	View() election.View
	Changed() <-chan struct{}
	// SendDeparted sends to an alive node, or to one gossip declared dead at the address it
	// had (a starved member: sharingPeers).
	SendDeparted(to string, payload []byte) error
	// Answers are a member's answers to the direct pings and handshakes of every probe
	// interval: they tell a member starved of CPU from a gone one.
	Answers(name string) election.Answers
}

// peerFlows is the last list a member sent.
type peerFlows struct {
	flows []flows.Flow
	at    time.Time
}

type inboundFlows struct {
	from  string
	flows []flows.Flow
}

// flowShare runs flow sharing for one node: it is started in BGP mode beside the agent's loop
// and owns its own state (run's goroutine).
type flowShare struct {
	dp     dataplane.FlowSharer
	peers  flowPeers
	self   string
	log    logr.Logger
	addrOf func(election.MemberView) netip.Addr
	in     chan inboundFlows
	// probeInterval is the election's (Answers are judged by it); hold how long a peer gossip
	// declared dead stays a peer here (starvedPeerHold; tests shorten it).
	probeInterval time.Duration
	hold          time.Duration
	// lastAddr is every peer's last address; downSince when gossip declared it dead.
	lastAddr  map[string]netip.Addr
	downSince map[string]time.Time

	known        map[string]peerFlows
	applied      map[flows.Flow]netip.Addr
	appliedPeers []netip.Addr
	sent         []flows.Flow
	sentAt       time.Time
	boxes        map[string]*mailbox
	listErr      bool
	setErr       string
	// mailboxes counts the running mailbox goroutines.
	mailboxes atomic.Int64
}

func newFlowShare(dp dataplane.FlowSharer, self string, log logr.Logger, addrOf func(election.MemberView) netip.Addr, probeInterval time.Duration) *flowShare {
	return &flowShare{
		dp: dp, self: self, log: log, addrOf: addrOf, probeInterval: probeInterval, hold: starvedPeerHold,
		in:    make(chan inboundFlows, 64),
		known: map[string]peerFlows{}, boxes: map[string]*mailbox{},
		lastAddr: map[string]netip.Addr{}, downSince: map[string]time.Time{},
	}
}

// receive is election.Config.OnMessage: it decodes and queues, never blocks for long.
func (f *flowShare) receive(from string, payload []byte) {
	list, err := flows.Decode(payload)
	if err != nil {
		f.log.Info("ignoring a flow list that does not decode", "from", from, "error", err.Error())
		return
	}
	select {
	case f.in <- inboundFlows{from: from, flows: list}:
	default:
		// The loop is behind; the sender's refresh brings the list again.
		f.log.V(1).Info("flow list dropped: queue full", "from", from)
	}
}

// run shares flows until ctx ends, then removes the forwarding it set.
func (f *flowShare) run(ctx context.Context, peers flowPeers) {
	f.peers = peers
	t := time.NewTicker(flowShareInterval)
	defer t.Stop()
	defer func() {
		if len(f.applied) > 0 || len(f.appliedPeers) > 0 {
			_ = f.dp.SetForeignFlows(nil, nil)
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case m := <-f.in:
			f.known[m.from] = peerFlows{flows: m.flows, at: time.Now()}
			f.drain()
		case <-peers.Changed():
		case <-t.C:
			f.publish(ctx, time.Now())
		}
		f.apply()
	}
}

// drain takes every queued list before applying, so that a burst costs one SetForeignFlows.
func (f *flowShare) drain() {
	for {
		select {
		case m := <-f.in:
			f.known[m.from] = peerFlows{flows: m.flows, at: time.Now()}
		default:
			return
		}
	}
}

// alivePeers are the other alive nodes with an address: members and others (a member the
// latest membership removed still serves its flows while it drains).
func (f *flowShare) alivePeers(v election.View) map[string]netip.Addr {
	out := map[string]netip.Addr{}
	for _, m := range append(append([]election.MemberView{}, v.Members...), v.Others...) {
		if m.Name == f.self || !m.Alive {
			continue
		}
		if a := f.addrOf(m); a.IsValid() {
			out[m.Name] = a
		}
	}
	return out
}

// owners is the forwarding the known lists ask for: flows of alive peers only, and none that this
// node lists itself (local): a peer's stale list naming one would have this node send its own
// connection's segments away, and perhaps the peer send them back.
func owners(known map[string]peerFlows, alive map[string]netip.Addr, local []flows.Flow) map[flows.Flow]netip.Addr {
	mine := make(map[flows.Flow]bool, len(local))
	for _, fl := range local {
		mine[fl] = true
	}
	out := map[flows.Flow]netip.Addr{}
	for name, pf := range known {
		addr, ok := alive[name]
		if !ok {
			continue
		}
		for _, fl := range pf.flows {
			if !mine[fl] {
				out[fl] = addr
			}
		}
	}
	return out
}

func (f *flowShare) apply() {
	alive := f.sharingPeers(f.peers.View(), time.Now())
	for name := range f.known {
		if _, ok := alive[name]; !ok {
			delete(f.known, name) // gone: its flows reset here, the fastest news
		}
	}
	want := owners(f.known, alive, f.sent)
	peers := make([]netip.Addr, 0, len(alive))
	for _, a := range alive {
		peers = append(peers, a)
	}
	slices.SortFunc(peers, netip.Addr.Compare)
	if maps.Equal(want, f.applied) && slices.Equal(peers, f.appliedPeers) {
		return
	}
	if err := f.dp.SetForeignFlows(want, peers); err != nil {
		// Retried on every step: said once per distinct failure.
		if msg := err.Error(); msg != f.setErr {
			f.log.Error(err, "forwarding other members' flows")
			f.setErr = msg
		}
		return
	}
	if f.setErr != "" {
		f.log.Info("forwarding other members' flows again", "flows", len(want))
		f.setErr = ""
	}
	f.applied, f.appliedPeers = want, peers
}

// publish sends this node's flows to every alive peer when they changed, when the refresh is
// due, or to a peer that has not had them yet.
func (f *flowShare) publish(ctx context.Context, now time.Time) {
	local, err := f.dp.LocalFlows()
	if err != nil {
		if !f.listErr {
			f.log.Error(err, "reading this node's connections for flow sharing; the last list stands")
		}
		f.listErr = true
		return
	}
	f.listErr = false
	alive := f.sharingPeers(f.peers.View(), now)
	changed := !slices.Equal(local, f.sent) || now.Sub(f.sentAt) >= flowShareRefresh
	for name, box := range f.boxes {
		if _, ok := alive[name]; !ok {
			// Its goroutine ends with it; back (after a restart), it gets a new mailbox and the
			// list at once.
			box.stop()
			delete(f.boxes, name)
		}
	}
	var payload []byte
	for name := range alive {
		box, ok := f.boxes[name]
		if !ok {
			bctx, stop := context.WithCancel(ctx)
			box = newMailbox(stop)
			f.boxes[name] = box
			f.mailboxes.Add(1)
			go func() {
				defer f.mailboxes.Add(-1)
				box.deliver(bctx, func(b []byte) error { return f.peers.SendDeparted(name, b) }, f.log.WithValues("to", name))
			}()
		}
		if !changed && box.had() {
			continue
		}
		if payload == nil {
			payload = flows.Encode(local)
		}
		box.put(payload)
	}
	if changed {
		f.sent, f.sentAt = local, now
	}
}

// mailbox holds the newest list for one peer: a slow or dead peer delays only its own sends,
// and a newer list replaces one not sent yet.
type mailbox struct {
	mu      sync.Mutex
	next    []byte
	wake    chan struct{}
	hadList bool
	// stop ends the goroutine delivering it.
	stop context.CancelFunc
}

func newMailbox(stop context.CancelFunc) *mailbox {
	return &mailbox{wake: make(chan struct{}, 1), stop: stop}
}

func (b *mailbox) put(p []byte) {
	b.mu.Lock()
	b.next, b.hadList = p, true
	b.mu.Unlock()
	select {
	case b.wake <- struct{}{}:
	default:
	}
}

// had reports whether the peer was given a list at all.
func (b *mailbox) had() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.hadList
}

func (b *mailbox) deliver(ctx context.Context, send func([]byte) error, log logr.Logger) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-b.wake:
		}
		b.mu.Lock()
		p := b.next
		b.next = nil
		b.mu.Unlock()
		if p == nil {
			continue
		}
		if err := send(p); err != nil {
			log.V(1).Info("flow list not delivered; the next refresh retries", "error", err.Error())
		}
	}
}

// startFlowSharing starts the gossip that carries the flow lists in BGP mode: the same port,
// key and label as the ARP election, membership documents applied from the store as there.
func startFlowSharing(cfg *agentv1.AgentConfiguration, store *memberStore, log logr.Logger) (*flowShare, *election.Membership, error) {
	if !cfg.Membership.Dynamic && len(cfg.Members) == 0 {
		return nil, nil, fmt.Errorf("bgp.flowSharing: no members configured to share with (members, or membership.dynamic)")
	}
	if cfg.Election.SecretKeyFile == "" {
		// The lists steer packets: they must come from members.
		return nil, nil, fmt.Errorf("bgp.flowSharing: election.secretKeyFile is empty; the flow lists must be authenticated: give a gossip key file (16, 24 or 32 bytes, mode 0600), or set bgp.flowSharing: false")
	}
	ecfg, err := electionConfig(cfg, store.roster())
	if err != nil {
		return nil, nil, fmt.Errorf("bgp.flowSharing: %w", err)
	}
	r := rules{cfg: cfg}
	share := newFlowShare(nil, cfg.NodeName, log.WithName("flowshare"), r.memberAddress, cfg.Election.ProbeInterval.Duration)
	ecfg.OnMessage = share.receive
	ecfg.OnMembership = func(r election.Roster) { store.offer(r.Document(), "gossip") }
	ml, err := election.Start(ecfg, election.Meta{ConfigDigest: cfg.Digest()}, log.WithName("flowshare").WithName("gossip"))
	if err != nil {
		return nil, nil, fmt.Errorf("bgp.flowSharing: %w", err)
	}
	store.mu.Lock()
	store.run = func(r election.Roster) { ml.SetRoster(r) }
	store.mu.Unlock()
	ml.SetRoster(store.roster())
	return share, ml, nil
}
