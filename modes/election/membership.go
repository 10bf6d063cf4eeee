package election

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/netip"
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
	// SecretKey (16, 24 or 32 bytes) encrypts and authenticates gossip.
	SecretKey []byte
}

// Membership is a running memberlist plus this member's gossiped Meta.
type Membership struct {
	cfg     Config
	log     logr.Logger
	ml      *memberlist.Memberlist
	changed chan struct{}

	mu   sync.Mutex
	meta Meta

	// confirmedAt (unix nanoseconds) is when a majority last answered
	// direct pings; see ConfirmedAt.
	confirmedAt atomic.Int64
	// answeredAt: member name -> time.Time (monotonic) of its last answer to a
	// direct ping (see LastAnswer in contact.go).
	answeredAt sync.Map

	metaUpdates chan struct{}
	stop        chan struct{}
	wg          sync.WaitGroup
	closeOnce   sync.Once
}

// Start creates the memberlist, joins the other configured members (members
// that are not up yet are joined later by the rejoin loop) and returns.
func Start(cfg Config, meta Meta, logger logr.Logger) (*Membership, error) {
	self, ok := cfg.member(cfg.Self)
	if !ok {
		return nil, fmt.Errorf("election: self %q is not among the members", cfg.Self)
	}
	m := &Membership{
		cfg:         cfg,
		log:         logger,
		changed:     make(chan struct{}, 1),
		meta:        meta,
		metaUpdates: make(chan struct{}, 1),
		stop:        make(chan struct{}),
	}
	mc := memberlist.DefaultLANConfig()
	mc.Name = cfg.Self
	mc.BindAddr = cfg.BindAddress
	if mc.BindAddr == "" {
		mc.BindAddr = self.Address.String()
	}
	mc.BindPort = cfg.Port
	mc.AdvertiseAddr = self.Address.String()
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
	mc.SecretKey = cfg.SecretKey
	mc.Delegate = (*delegate)(m)
	mc.Events = (*events)(m)
	mc.Alive = (*aliveFilter)(m)
	mc.Logger = log.New(&logWriter{log: logger.WithName("memberlist")}, "", 0)

	ml, err := memberlist.Create(mc)
	if err != nil {
		return nil, fmt.Errorf("election: start memberlist on %s:%d: %w", mc.BindAddr, cfg.Port, err)
	}
	m.ml = ml
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
	alive := map[string]*memberlist.Node{}
	for _, n := range m.ml.Members() {
		alive[n.Name] = n
	}
	m.mu.Lock()
	selfMeta := m.meta
	m.mu.Unlock()
	v := View{Self: m.cfg.Self, Members: make([]MemberView, 0, len(m.cfg.Members))}
	for _, c := range m.cfg.Members {
		mv := MemberView{Name: c.Name}
		if c.Name == m.cfg.Self {
			mv.Alive, mv.Meta = true, selfMeta
		} else if n, ok := alive[c.Name]; ok {
			mv.Alive = true
			_ = json.Unmarshal(n.Meta, &mv.Meta)
		}
		v.Members = append(v.Members, mv)
	}
	return v
}

// ConfirmQuorum pings every other configured member directly, in parallel,
// at its configured address, and reports how many members (this one
// included) answered and how many make a majority. It returns as soon as a
// majority answered. Gossip's view is not consulted: a direct answer is the
// ground truth that both a claim and a hold rest on. Failure detection is
// asynchronous, so a member cut off from everybody first sees one peer die
// and, for a few hundred milliseconds, still believes the other one is there;
// and on a healed partition, stale death notices make live members look dead
// for a moment.
func (m *Membership) ConfirmQuorum() (reached, needed int) {
	needed = Majority(len(m.cfg.Members))
	reached = 1
	if reached >= needed {
		m.confirmedAt.Store(time.Now().UnixNano())
		return reached, needed
	}
	answers := make(chan bool, len(m.cfg.Members))
	asked := 0
	for _, c := range m.cfg.Members {
		if c.Name == m.cfg.Self {
			continue
		}
		asked++
		addr := net.UDPAddrFromAddrPort(netip.AddrPortFrom(c.Address, uint16(m.cfg.Port)))
		go func(name string) {
			// Three tries: one lost UDP packet must not veto a claim.
			for i := 0; i < 3; i++ {
				if _, err := m.ml.Ping(name, addr); err == nil {
					m.answeredAt.Store(name, time.Now())
					answers <- true
					return
				}
			}
			answers <- false
		}(c.Name)
	}
	for i := 0; i < asked && reached < needed; i++ {
		if <-answers {
			reached++
		}
	}
	if reached >= needed {
		m.confirmedAt.Store(time.Now().UnixNano())
	}
	return reached, needed
}

// ConfirmedAt is when a majority (this member included) last answered direct
// pings, zero if never. A background loop pings every ProbeInterval, so an
// owner can tell that it has lost touch with the group even while gossip
// still lists the others: on a link too slow for the probe timeout, suspicion
// is refuted and the rejoin loop reconnects over TCP, so the dead-or-alive
// view can flap for as long as the fault lasts.
func (m *Membership) ConfirmedAt() time.Time {
	ns := m.confirmedAt.Load()
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns)
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

func (m *Membership) rejoin() {
	alive := map[string]bool{}
	for _, n := range m.ml.Members() {
		alive[n.Name] = true
	}
	var addrs []string
	for _, c := range m.cfg.Members {
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
func (d *delegate) NotifyMsg([]byte)                           {}
func (d *delegate) GetBroadcasts(overhead, limit int) [][]byte { return nil }
func (d *delegate) LocalState(join bool) []byte                { return nil }
func (d *delegate) MergeRemoteState(buf []byte, join bool)     {}

type events Membership

func (e *events) NotifyJoin(n *memberlist.Node) {
	e.log.Info("member up", "member", n.Name, "address", n.Addr.String())
	(*Membership)(e).notify()
}
func (e *events) NotifyLeave(n *memberlist.Node) {
	e.log.Info("member down (dead or left)", "member", n.Name)
	(*Membership)(e).notify()
}
func (e *events) NotifyUpdate(n *memberlist.Node) { (*Membership)(e).notify() }

// aliveFilter keeps strangers out: only configured members, from their
// configured address, may join.
type aliveFilter Membership

var errStranger = errors.New("not a configured member")

func (a *aliveFilter) NotifyAlive(peer *memberlist.Node) error {
	c, ok := a.cfg.member(peer.Name)
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
