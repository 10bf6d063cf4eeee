package election

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/netip"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/hashicorp/memberlist"
)

// Member is a configured member: its name and the address it gossips from.
type Member struct {
	Name    string
	Address netip.Addr
}

// Config configures the membership of one agent.
type Config struct {
	// Self is this member's name; it must be one of Members.
	Self string
	// Members in preference order (first = most preferred owner).
	Members []Member
	// BindAddress is the local address memberlist listens on; empty means
	// Self's member address.
	BindAddress string
	// Port is the gossip port (UDP and TCP), the same on every member.
	Port int
	// Timers: see docs/backends/arp.md for the trade-offs.
	ProbeInterval  time.Duration
	ProbeTimeout   time.Duration
	SuspicionMult  int
	GossipInterval time.Duration
	// RejoinInterval: how often to Join configured members that are not
	// alive; memberlist never probes dead members again, so without this two
	// halves of a healed partition would stay apart.
	RejoinInterval time.Duration
	// Keys (16, 24 or 32 bytes each) encrypt and authenticate gossip: the
	// first is the primary (used to send), the others are accepted on
	// receive, so that a key can be rotated without a VIP loss. Empty: no
	// encryption (election.insecure).
	Keys [][]byte
	// Label keeps the gossip of different LoadBalancers on one segment apart.
	Label string

	// Dynamic: Members is the versioned membership as of Version; newer
	// versions arrive by SetRoster and by gossip (OnMembership), members
	// outside the roster may gossip (they learn the next version), and Self
	// need not be a member.
	Dynamic bool
	Version int64
	// Address is this node's own address when Self is not among Members
	// (dynamic: a joiner, or the bootstrap); gossip binds and advertises it.
	Address netip.Addr
	// OnMembership is called (from memberlist's goroutines, so it must not
	// block for long) with every membership document a peer sends; the
	// caller keeps the newest and calls SetRoster once it has persisted it.
	OnMembership func(Roster)
	// OnMessage, if set, is called (from memberlist's goroutines, so it
	// must not block for long) with every user message a member sent with
	// Send: from is the sender's name as it claims it (every sender holds
	// the gossip key).
	OnMessage func(from string, payload []byte)
	// Digest, if set, computes this member's configuration digest for a
	// roster. The membership then owns the gossiped Version and
	// ConfigDigest and changes both together with the roster, so that no
	// peer ever sees a new version with the old digest (which would read
	// as a conflicting configuration).
	Digest func(Roster) string
}

// Membership is a running memberlist plus this member's gossiped Meta.
type Membership struct {
	cfg     Config
	log     logr.Logger
	ml      *memberlist.Memberlist
	changed chan struct{}

	mu     sync.Mutex
	meta   Meta
	roster Roster
	// joining is the member the latest version added that has not been
	// seen alive since (see MemberView.Joining); "" if none.
	joining string
	// seen: names seen alive since start.
	seen map[string]bool
	// peers: the alive nodes as memberlist's events last reported them,
	// copied: the *memberlist.Node values memberlist hands out are
	// mutated under its own lock, so reading them later would race.
	peers map[string]peer
	// departed: where each node memberlist last declared dead or left was
	// (its last peer entry). A member starved of CPU is declared dead while
	// it still serves: its user messages are still taken from that address
	// (the gossip key authenticates; the address binds the name), and a
	// consumer may still send to it (SendDeparted).
	departed map[string]peer
	// pushedAt: when this node last push/pulled with each alive node that
	// ran an older membership version (behindLocked).
	pushedAt map[string]time.Time
	// lastHolder is the other member whose gossip last said it holds the
	// VIP, kept when it dies (View.LastHolder), also once this member
	// claimed (the previous owner drains, and may be starved meanwhile);
	// "" once it said it does not.
	lastHolder string

	// selfAddr is this member's address: user messages go out from it.
	selfAddr netip.Addr
	// mux takes the user-message streams off memberlist's transport.
	mux *streamMux

	// base is a monotonic reference taken at Start; confirmedAt is the
	// offset from it (nanoseconds, 0 = never) at which a majority last
	// answered direct pings. Offsets from a monotonic reading, never wall
	// clock nanoseconds: a step of the wall clock (NTP) must not make an
	// owner's contact look older or younger than it is.
	base        time.Time
	confirmedAt atomic.Int64
	// answers: each member's answers to direct pings (see contact.go).
	answers answerBook

	bcast *memberlist.TransmitLimitedQueue

	metaUpdates chan struct{}
	stop        chan struct{}
	wg          sync.WaitGroup
	closeOnce   sync.Once
}

// Start creates the memberlist, joins the other configured members (members
// that are not up yet are joined later by the rejoin loop) and returns.
func Start(cfg Config, meta Meta, logger logr.Logger) (*Membership, error) {
	selfAddr := cfg.Address
	if self, ok := cfg.member(cfg.Self); ok {
		selfAddr = self.Address
	} else if !cfg.Dynamic {
		return nil, fmt.Errorf("election: self %q is not among the members", cfg.Self)
	}
	if !selfAddr.IsValid() {
		return nil, fmt.Errorf("election: self %q is not among the members and has no address of its own", cfg.Self)
	}
	m := &Membership{
		cfg:         cfg,
		log:         logger,
		changed:     make(chan struct{}, 1),
		meta:        meta,
		roster:      Roster{Version: cfg.Version, Members: append([]Member(nil), cfg.Members...)},
		seen:        map[string]bool{cfg.Self: true},
		peers:       map[string]peer{},
		departed:    map[string]peer{},
		pushedAt:    map[string]time.Time{},
		base:        time.Now(),
		metaUpdates: make(chan struct{}, 1),
		stop:        make(chan struct{}),
	}
	m.meta.Version = cfg.Version
	if cfg.Digest != nil {
		m.meta.ConfigDigest = cfg.Digest(m.roster)
	}
	mc := memberlist.DefaultLANConfig()
	mc.Name = cfg.Self
	mc.BindAddr = cfg.BindAddress
	if mc.BindAddr == "" {
		mc.BindAddr = selfAddr.String()
	}
	mc.BindPort = cfg.Port
	mc.AdvertiseAddr = selfAddr.String()
	mc.AdvertisePort = cfg.Port
	mc.ProbeInterval = cfg.ProbeInterval
	mc.ProbeTimeout = cfg.ProbeTimeout
	mc.SuspicionMult = cfg.SuspicionMult
	mc.GossipInterval = cfg.GossipInterval
	// Gossip-to-the-dead lets a member that was declared dead learn it
	// quickly and refute; the push/pull sync repairs anything gossip missed.
	mc.GossipToTheDeadTime = 5 * time.Second
	mc.PushPullInterval = 5 * time.Second
	mc.TCPTimeout = 2 * time.Second
	// A restarted member comes back under the same name and address; never
	// refuse it for a reclaim period.
	mc.DeadNodeReclaimTime = time.Nanosecond
	if len(cfg.Keys) > 0 {
		kr, err := memberlist.NewKeyring(cfg.Keys[1:], cfg.Keys[0])
		if err != nil {
			return nil, fmt.Errorf("election: keyring: %w", err)
		}
		mc.Keyring = kr
		mc.GossipVerifyIncoming, mc.GossipVerifyOutgoing = true, true
	}
	mc.Label = cfg.Label
	nt, err := memberlist.NewNetTransport(&memberlist.NetTransportConfig{
		BindAddrs: []string{mc.BindAddr}, BindPort: mc.BindPort, Logger: mc.Logger})
	if err != nil {
		return nil, fmt.Errorf("election: listen on %s:%d: %w", mc.BindAddr, cfg.Port, err)
	}
	if mc.BindPort == 0 {
		mc.BindPort = nt.GetAutoBindPort()
		mc.AdvertisePort = mc.BindPort
	}
	m.mux = &streamMux{NetTransport: nt, toMemberlist: make(chan net.Conn), onUser: m.receiveUser,
		peekTimeout: mc.TCPTimeout, done: make(chan struct{})}
	m.mux.start()
	mc.Transport = m.mux
	m.selfAddr = selfAddr
	mc.Delegate = (*delegate)(m)
	mc.Events = (*events)(m)
	mc.Alive = (*aliveFilter)(m)
	mc.Logger = log.New(&logWriter{log: logger.WithName("memberlist")}, "", 0)

	ml, err := memberlist.Create(mc)
	if err != nil {
		_ = nt.Shutdown()
		m.mux.close()
		return nil, fmt.Errorf("election: start memberlist on %s:%d: %w", mc.BindAddr, cfg.Port, err)
	}
	m.ml = ml
	m.bcast = &memberlist.TransmitLimitedQueue{NumNodes: ml.NumMembers, RetransmitMult: 3}
	m.wg.Add(3)
	go m.every(cfg.RejoinInterval, m.rejoin)
	go m.metaLoop()
	go m.every(cfg.ProbeInterval, func() { m.ConfirmQuorum() })
	m.rejoin()
	return m, nil
}

// Changed signals (coalesced) that the view may have changed.
func (m *Membership) Changed() <-chan struct{} { return m.changed }

// SetMeta replaces this member's gossiped metadata; the update is broadcast
// asynchronously (the caller never blocks on the network).
func (m *Membership) SetMeta(meta Meta) {
	m.mu.Lock()
	meta.Version = m.meta.Version
	if m.cfg.Digest != nil {
		meta.ConfigDigest = m.meta.ConfigDigest
	}
	same := m.meta == meta
	m.meta = meta
	m.mu.Unlock()
	if same {
		return
	}
	select {
	case m.metaUpdates <- struct{}{}:
	default:
	}
}

// View returns the current picture of the configured members. Self's Meta is
// the local one, never a gossiped echo.
func (m *Membership) View() View {
	m.mu.Lock()
	alive := make(map[string]peer, len(m.peers))
	for k, v := range m.peers {
		alive[k] = v
	}
	selfMeta := m.meta
	r := m.roster
	joining := m.joining
	lastHolder := m.lastHolder
	m.mu.Unlock()
	v := View{Self: m.cfg.Self, Version: r.Version, Digest: selfMeta.ConfigDigest, Members: make([]MemberView, 0, len(r.Members)),
		LastHolder: lastHolder}
	in := map[string]bool{}
	for _, c := range r.Members {
		in[c.Name] = true
		mv := MemberView{Name: c.Name, Joining: c.Name == joining, Address: c.Address}
		if c.Name == m.cfg.Self {
			mv.Alive, mv.Meta = true, selfMeta
			v.Member = true
		} else if n, ok := alive[c.Name]; ok && n.addr == c.Address {
			mv.Alive = true
			_ = json.Unmarshal(n.meta, &mv.Meta)
			if c.Name == lastHolder && !selfMeta.Holding && !n.returned.IsZero() && time.Since(n.returned) < returnedHolderWindow(m.cfg.ProbeInterval) {
				// The last holder just came back from a dead verdict saying it
				// does not hold; until its own update (or returnedHolderWindow), it
				// does for a member that might claim: a claim beside a holder
				// flips the neighbours' caches twice (docs/backends/arp.md,
				// "Starved, not gone"). A member that holds itself (it took
				// over) sees the metadata as it is, and does not yield to it.
				mv.Meta.Holding = true
			}
		}
		v.Members = append(v.Members, mv)
	}
	for name, n := range alive {
		if in[name] || name == m.cfg.Self {
			continue
		}
		mv := MemberView{Name: name, Alive: true, Address: n.addr}
		_ = json.Unmarshal(n.meta, &mv.Meta)
		v.Others = append(v.Others, mv)
	}
	sort.Slice(v.Others, func(i, j int) bool { return v.Others[i].Name < v.Others[j].Name })
	return v
}

// peer is a copy of an alive node's memberlist entry. A member is matched
// by name and address: a node that gossips under a member's name from
// another address is not that member.
type peer struct {
	addr netip.Addr
	port uint16
	meta []byte
	// returned: when the last holder came back (a join after memberlist's
	// dead verdict) with metadata that did not say it holds; zero once
	// the member itself updated its metadata (see View).
	returned time.Time
}

// returnedHolderWindow is how long a last holder back from a dead verdict
// with metadata that does not say it holds still counts as holding: half a
// probe interval. Its own update follows within a few gossip intervals (9 ms
// in the starved lab run that showed the case); longer would delay a
// failover after a real release that raced the dead verdict (a flapping
// link: bench-arp link_flap p50 13 -> 135 ms with two probe intervals).
func returnedHolderWindow(probeInterval time.Duration) time.Duration { return probeInterval / 2 }

// nodeEvent is what memberlist told about a node.
type nodeEvent int

const (
	nodeLeft    nodeEvent = iota // dead or left
	nodeJoined                   // alive again, or for the first time
	nodeUpdated                  // its own metadata update
)

func (e *events) record(n *memberlist.Node, ev nodeEvent) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if ev == nodeLeft {
		if p, ok := e.peers[n.Name]; ok {
			if e.departed == nil {
				e.departed = map[string]peer{}
			}
			e.departed[n.Name] = peer{addr: p.addr, port: p.port}
		}
		delete(e.peers, n.Name)
		return
	}
	delete(e.departed, n.Name)
	p := peer{meta: append([]byte(nil), n.Meta...)}
	a, _ := netip.AddrFromSlice(n.Addr)
	p.addr, p.port = a.Unmap(), n.Port
	var meta Meta
	if n.Name != e.cfg.Self && json.Unmarshal(n.Meta, &meta) == nil {
		switch {
		case meta.Holding:
			e.lastHolder = n.Name
		case e.lastHolder == n.Name && ev == nodeJoined:
			// Back from a dead verdict with metadata that says it does not
			// hold: that may be an older state than the holder's own (a
			// starved holder refutes, and the update that says it holds
			// follows). It is kept as the last holder, and counts as
			// holding for a moment (View), until its own update says.
			p.returned = time.Now()
			time.AfterFunc(returnedHolderWindow(e.cfg.ProbeInterval), (*Membership)(e).notify)
		case e.lastHolder == n.Name:
			e.lastHolder = ""
		}
	}
	e.peers[n.Name] = p
}

// Leave tells the others that this member is going (they drop it at once
// instead of waiting for failure detection).
func (m *Membership) Leave(timeout time.Duration) error {
	if err := m.ml.Leave(timeout); err != nil {
		return fmt.Errorf("election: leave: %w", err)
	}
	return nil
}

// Close stops the background loops and the memberlist.
func (m *Membership) Close() error {
	var err error
	m.closeOnce.Do(func() {
		close(m.stop)
		m.wg.Wait()
		err = m.ml.Shutdown()
		m.mux.close()
	})
	return err
}

func (c Config) member(name string) (Member, bool) {
	for _, mb := range c.Members {
		if mb.Name == name {
			return mb, true
		}
	}
	return Member{}, false
}

// metaLoop broadcasts metadata changes. UpdateNode blocks until the update is
// sent, so it runs here rather than in the agent loop.
func (m *Membership) metaLoop() {
	defer m.wg.Done()
	for {
		select {
		case <-m.stop:
			return
		case <-m.metaUpdates:
			if err := m.ml.UpdateNode(time.Second); err != nil {
				m.log.V(1).Info("metadata broadcast not confirmed", "error", err.Error())
			}
			m.notify()
		}
	}
}

// every runs fn every interval until Close; one of the background loops
// (the rejoin loop, the direct-ping loop that keeps ConfirmedAt current).
func (m *Membership) every(interval time.Duration, fn func()) {
	defer m.wg.Done()
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-m.stop:
			return
		case <-t.C:
			fn()
		}
	}
}

// rejoin joins the members of the roster that are not alive, and
// push/pulls with the alive nodes that run an older membership version
// (behindLocked).
func (m *Membership) rejoin() {
	alive := map[string]bool{}
	m.mu.Lock()
	for name := range m.peers {
		alive[name] = true
	}
	addrs := m.behindLocked(time.Now())
	m.mu.Unlock()
	for _, c := range m.Roster().Members {
		if c.Name != m.cfg.Self && !alive[c.Name] {
			addrs = append(addrs, net.JoinHostPort(c.Address.String(), strconv.Itoa(m.cfg.Port)))
		}
	}
	if len(addrs) == 0 {
		return
	}
	if n, err := m.ml.Join(addrs); n > 0 {
		m.log.V(1).Info("joined members", "contacted", n)
		m.notify()
	} else if err != nil {
		m.log.V(2).Info("join failed", "addresses", addrs, "error", err.Error())
	}
}

func (m *Membership) notify() {
	select {
	case m.changed <- struct{}{}:
	default:
	}
}

type delegate Membership

func (d *delegate) NodeMeta(limit int) []byte {
	d.mu.Lock()
	meta := d.meta
	d.mu.Unlock()
	b, _ := json.Marshal(meta)
	if len(b) > limit {
		return nil
	}
	return b
}

type events Membership

func (e *events) NotifyJoin(n *memberlist.Node) {
	e.log.Info("member up", "member", n.Name, "address", n.Addr.String())
	e.record(n, nodeJoined)
	e.mu.Lock()
	e.seen[n.Name] = true
	if e.joining == n.Name {
		e.joining = ""
	}
	e.mu.Unlock()
	(*Membership)(e).notify()
}
func (e *events) NotifyLeave(n *memberlist.Node) {
	e.log.Info("member down (dead or left)", "member", n.Name)
	e.record(n, nodeLeft)
	(*Membership)(e).notify()
}
func (e *events) NotifyUpdate(n *memberlist.Node) {
	e.record(n, nodeUpdated)
	(*Membership)(e).notify()
}

// aliveFilter keeps strangers out: only configured members, from their
// configured address, may join.
type aliveFilter Membership

var errStranger = errors.New("not a configured member")

func (a *aliveFilter) NotifyAlive(peer *memberlist.Node) error {
	c, ok := (*Membership)(a).Roster().member(peer.Name)
	if !ok && a.cfg.Dynamic {
		// A joiner, or a member of a version this node has not learned
		// yet: it holds the gossip key, and only the roster counts.
		return nil
	}
	if !ok {
		a.log.Info("refusing unknown member", "member", peer.Name, "address", peer.Addr.String())
		return errStranger
	}
	if addr, ok := netip.AddrFromSlice(peer.Addr); ok && addr.Unmap() != c.Address {
		a.log.Info("refusing member from an unexpected address", "member", peer.Name, "address", addr.String(), "want", c.Address.String())
		return errStranger
	}
	return nil
}

// logWriter sends memberlist's log lines to logr: warnings and errors at
// level 0, the rest (mostly [DEBUG]) at level 2.
type logWriter struct{ log logr.Logger }

func (w *logWriter) Write(p []byte) (int, error) {
	line := strings.TrimSpace(string(p))
	switch {
	case strings.Contains(line, "[ERR]"), strings.Contains(line, "[WARN]"):
		w.log.Info(line)
	default:
		w.log.V(2).Info(line)
	}
	return len(p), nil
}

var _ io.Writer = &logWriter{}
