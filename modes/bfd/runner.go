package bfd

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"golang.org/x/net/ipv4"
)

// Port is the single-hop BFD control port (RFC 5881 §4).
const Port = 3784

// Peer is one session to run.
type Peer struct {
	Address netip.Addr
	Params  Params
}

// Change is a session's change of state, as OnChange receives it.
type Change struct {
	Peer     netip.Addr
	From, To State
	Diag     Diag
}

// PeerStatus is one session as Status shows it.
type PeerStatus struct {
	Peer  netip.Addr
	State State
	Diag  Diag
	Since time.Time
	// LocalDisc and RemoteDisc are the session's discriminators (RemoteDisc
	// 0 until the peer was heard): an up session accepts only packets that
	// carry both.
	LocalDisc, RemoteDisc uint32
}

// Runner runs the sessions of one node on UDP: it receives on port 3784
// (only packets with TTL 255: RFC 5881's protection against off-link
// spoofing), sends from a source port in 49152-65535 with TTL 255, and
// calls OnChange (from its loop goroutine) on every change of state.
type Runner struct {
	log      logr.Logger
	onChange func(Change)
	rx       *ipv4.PacketConn
	rxConn   net.PacketConn

	mu       sync.Mutex
	sessions map[netip.Addr]*entry
	byDisc   map[uint32]*entry

	in   chan received
	wake chan struct{}
	done chan struct{}
}

type entry struct {
	peer  Peer
	s     *Session
	tx    *net.UDPConn
	since time.Time
	// enabled: the session sends and receives (Enable); until then it
	// stays down and silent.
	enabled bool
}

type received struct {
	c    Control
	from netip.Addr
	at   time.Time
}

// Start opens the sockets and runs every session until ctx ends. The peers
// are IPv4 addresses, each at most once.
func Start(ctx context.Context, peers []Peer, log logr.Logger, onChange func(Change)) (*Runner, error) {
	lc := net.ListenConfig{}
	pc, err := lc.ListenPacket(ctx, "udp4", fmt.Sprintf("0.0.0.0:%d", Port))
	if err != nil {
		return nil, fmt.Errorf("bfd: listen on udp %d: %w", Port, err)
	}
	r := &Runner{log: log, onChange: onChange, rxConn: pc, rx: ipv4.NewPacketConn(pc),
		sessions: map[netip.Addr]*entry{}, byDisc: map[uint32]*entry{}, in: make(chan received, 64), wake: make(chan struct{}, 1), done: make(chan struct{})}
	if err := r.rx.SetControlMessage(ipv4.FlagTTL|ipv4.FlagSrc, true); err != nil {
		_ = pc.Close()
		return nil, fmt.Errorf("bfd: receive TTL: %w", err)
	}
	now := time.Now()
	for _, p := range peers {
		if !p.Address.Is4() {
			r.closeAll()
			return nil, fmt.Errorf("bfd: peer %s: only IPv4 peers are supported", p.Address)
		}
		if _, dup := r.sessions[p.Address]; dup {
			r.closeAll()
			return nil, fmt.Errorf("bfd: peer %s listed twice", p.Address)
		}
		tx, err := dialFrom(p.Address)
		if err != nil {
			r.closeAll()
			return nil, err
		}
		disc := r.newDiscriminator()
		e := &entry{peer: p, s: NewSession(p.Params, disc), tx: tx, since: now}
		r.sessions[p.Address], r.byDisc[disc] = e, e
	}
	go r.read()
	go r.loop(ctx)
	return r, nil
}

// dialFrom opens the sending socket to peer: a source port in 49152-65535
// (RFC 5881 §4), TTL 255.
func dialFrom(peer netip.Addr) (*net.UDPConn, error) {
	var last error
	for range 32 {
		port := 49152 + rand.IntN(65536-49152)
		c, err := net.DialUDP("udp4", &net.UDPAddr{Port: port}, net.UDPAddrFromAddrPort(netip.AddrPortFrom(peer, Port)))
		if err != nil {
			last = err
			continue
		}
		if err := ipv4.NewConn(c).SetTTL(255); err != nil {
			_ = c.Close()
			return nil, fmt.Errorf("bfd: TTL 255 to %s: %w", peer, err)
		}
		return c, nil
	}
	return nil, fmt.Errorf("bfd: no source port for %s: %w", peer, last)
}

func (r *Runner) newDiscriminator() uint32 {
	for {
		if d := rand.Uint32(); d != 0 && r.byDisc[d] == nil {
			return d
		}
	}
}

// read hands every valid packet with TTL 255 to the loop.
func (r *Runner) read() {
	buf := make([]byte, 128)
	for {
		n, cm, src, err := r.rx.ReadFrom(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		if cm == nil || cm.TTL != 255 {
			continue // RFC 5881 §5: off-link, or spoofed
		}
		ua, ok := src.(*net.UDPAddr)
		if !ok {
			continue
		}
		c, err := Parse(buf[:n])
		if err != nil {
			r.log.V(1).Info("bfd: packet dropped", "from", ua.String(), "error", err.Error())
			continue
		}
		from, _ := netip.AddrFromSlice(ua.IP)
		select {
		case r.in <- received{c: c, from: from.Unmap(), at: time.Now()}:
		case <-r.done:
			return
		}
	}
}

// loop owns the sessions' state machines.
func (r *Runner) loop(ctx context.Context) {
	defer r.closeAll()
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case p := <-r.in:
			r.receive(p)
		case <-r.wake:
		case <-timer.C:
		}
		next := r.tick(time.Now())
		timer.Reset(time.Until(next))
	}
}

func (r *Runner) receive(p received) {
	r.mu.Lock()
	var e *entry
	if p.c.YourDisc != 0 {
		e = r.byDisc[p.c.YourDisc]
	} else {
		e = r.sessions[p.from]
	}
	if e == nil || e.peer.Address != p.from || !e.enabled {
		r.mu.Unlock()
		return
	}
	from, _ := e.s.State()
	changed := e.s.Receive(p.c, p.at)
	r.mu.Unlock()
	if changed {
		r.changed(e, from, p.at)
	}
}

// tick runs every session's timers, sends what is due and returns when to
// come back.
func (r *Runner) tick(now time.Time) time.Time {
	next := now.Add(slowTx)
	r.mu.Lock()
	type change struct {
		e    *entry
		from State
	}
	var changes []change
	for _, e := range r.sessions {
		if !e.enabled {
			continue
		}
		from, _ := e.s.State()
		send, changed := e.s.Tick(now, 0.75+0.25*rand.Float64())
		if changed {
			changes = append(changes, change{e, from})
		}
		if send != nil {
			if _, err := e.tx.Write(send.Marshal()); err != nil {
				r.log.V(1).Info("bfd: send failed", "peer", e.peer.Address.String(), "error", err.Error())
			}
		}
		if n := e.s.Next(); n.Before(next) {
			next = n
		}
	}
	r.mu.Unlock()
	for _, c := range changes {
		r.changed(c.e, c.from, now)
	}
	return next
}

func (r *Runner) changed(e *entry, from State, at time.Time) {
	r.mu.Lock()
	to, diag := e.s.State()
	e.since = at
	r.mu.Unlock()
	if to == from {
		return
	}
	r.log.Info("bfd session", "peer", e.peer.Address.String(), "from", from.String(), "to", to.String(), "diag", int(diag))
	if r.onChange != nil {
		r.onChange(Change{Peer: e.peer.Address, From: from, To: to, Diag: diag})
	}
}

// Enable starts the session to peer: until then it stays down and sends
// nothing. The BGP speaker enables a peer's session once its BGP session is
// established: a router that keys its BFD session on the BGP session's
// addresses (FRR) replaces a session that came up before, and tears the BGP
// session down on that replacement.
func (r *Runner) Enable(peer netip.Addr) {
	r.mu.Lock()
	e := r.sessions[peer.Unmap()]
	changed := e != nil && !e.enabled
	if changed {
		e.enabled = true
	}
	r.mu.Unlock()
	if changed {
		select {
		case r.wake <- struct{}{}:
		default:
		}
	}
}

// Status reports every session.
func (r *Runner) Status() map[netip.Addr]PeerStatus {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[netip.Addr]PeerStatus, len(r.sessions))
	for a, e := range r.sessions {
		st, d := e.s.State()
		local, remote := e.s.Discriminators()
		out[a] = PeerStatus{Peer: a, State: st, Diag: d, Since: e.since, LocalDisc: local, RemoteDisc: remote}
	}
	return out
}

// Done is closed once the runner stopped (its context ended).
func (r *Runner) Done() <-chan struct{} { return r.done }

func (r *Runner) closeAll() {
	r.mu.Lock()
	defer r.mu.Unlock()
	select {
	case <-r.done:
		return
	default:
	}
	close(r.done)
	_ = r.rxConn.Close()
	for _, e := range r.sessions {
		_ = e.tx.Close()
	}
}
