package election

import (
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
)

// SilentAfter is how long a member may go without answering this member's
// direct pings (sent every probe interval, three tries of the probe timeout
// each) before it counts as silent: two ping rounds.
func SilentAfter(probeInterval time.Duration) time.Duration { return 2 * probeInterval }

// Answers is one member's record of answers to this member's direct pings.
// It lets the agent report a silent holder (Meta.Silent) before memberlist's
// suspicion timeout runs out.
type Answers struct {
	// Last is the latest answer, zero if the member never answered.
	Last time.Time
	// Resumed is the first answer after the latest silence (no answer for
	// SilentAfter), zero if the member has had no such silence since its
	// first answer.
	Resumed time.Time
	// Listening is the latest TCP handshake its gossip listener completed,
	// and Unanswered the latest one it refused or let time out. The pings
	// need the member's process to run; a handshake needs only its kernel
	// and a live listening socket. So a member whose pings go unanswered
	// while its handshakes complete is alive and starved of CPU (a new
	// member booting beside it on the same cores), not gone: the handshake
	// is tried only after a round of pings went unanswered.
	Listening, Unanswered time.Time
}

// FrozenAfter is how long a member whose kernel still completes handshakes
// may go without answering pings before it counts as gone all the same: a
// process stopped for that long (SIGSTOP, a deadlock) cannot hand over or
// notice its API server failing, so its VIP is taken from it.
func FrozenAfter(probeInterval time.Duration) time.Duration { return 30 * probeInterval }

// Unreachable reports whether the member is gone as far as its kernel
// tells: the latest handshake with its gossip listener failed (it was
// refused or timed out: the member died, its machine went, or the path to
// it did), after its last answer to a ping or with that answer only a
// moment's (one answer does not end a silence, see Silent); or it has
// answered no ping for FrozenAfter. A member that answers pings, or only
// handshakes (starved of CPU), is not. Never heard: not unreachable.
func (a Answers) Unreachable(now time.Time, probeInterval time.Duration) bool {
	if !a.Heard() {
		return false
	}
	if now.Sub(a.Last) >= FrozenAfter(probeInterval) {
		return true
	}
	if a.Unanswered.IsZero() || !a.Unanswered.After(a.Listening) {
		return false
	}
	return a.Unanswered.After(a.Last) || (!a.Resumed.IsZero() && a.Last.Sub(a.Resumed) < probeInterval/2)
}

// Gone: silent to pings (Silent) and unreachable to its kernel
// (Unreachable); only then may another member take the VIP it holds.
func (a Answers) Gone(now time.Time, probeInterval time.Duration) bool {
	return a.Silent(now, probeInterval) && a.Unreachable(now, probeInterval)
}

// Heard: the member has answered at least once.
func (a Answers) Heard() bool { return !a.Last.IsZero() }

// Silent reports whether a member that has answered before is silent at
// now: no answer for SilentAfter, or answers that resumed after a silence
// but have not yet spanned half a probe interval. One answer does not end a
// silence: a link that comes up for a moment between two downs (a flap)
// lets one ping through while the holder's gossip still says it holds the
// VIP (its release reached nobody); if that answer ended the silence, a
// successor that had claimed would yield to it, and observers that had not
// would start over from the second down (docs/benchmarks.md, ARP,
// link_flap). A member that is back answers the next ping round too, by
// when its fresh gossip has arrived.
func (a Answers) Silent(now time.Time, probeInterval time.Duration) bool {
	if !a.Heard() {
		return false
	}
	if now.Sub(a.Last) >= SilentAfter(probeInterval) {
		return true
	}
	return !a.Resumed.IsZero() && a.Last.Sub(a.Resumed) < probeInterval/2
}

// record adds an answer at now to a.
func (a Answers) record(now time.Time, probeInterval time.Duration) Answers {
	if a.Heard() && now.Sub(a.Last) >= SilentAfter(probeInterval) {
		a.Resumed = now
	}
	a.Last = now
	return a
}

// answerBook holds the Answers of every member, keyed by name.
type answerBook struct {
	mu sync.Mutex
	by map[string]Answers
}

func (b *answerBook) record(name string, now time.Time, probeInterval time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.by == nil {
		b.by = map[string]Answers{}
	}
	b.by[name] = b.by[name].record(now, probeInterval)
}

// handshake records the outcome of a TCP handshake with the member's gossip
// listener at now.
func (b *answerBook) handshake(name string, now time.Time, ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.by == nil {
		b.by = map[string]Answers{}
	}
	a := b.by[name]
	if ok {
		a.Listening = now
	} else {
		a.Unanswered = now
	}
	b.by[name] = a
}

func (b *answerBook) get(name string) Answers {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.by[name]
}

// Answers returns the member's record of answers to this member's direct
// pings (the background loop pings every member every ProbeInterval).
func (m *Membership) Answers(name string) Answers { return m.answers.get(name) }

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
	m.mu.Lock()
	r, joining := m.roster, m.joining
	m.mu.Unlock()
	needed = Majority(len(r.Members))
	// Holding needs a majority of the members without the one the latest
	// version added and nobody has seen yet (a machine still booting);
	// a claim needs a majority of all (see Decide).
	holdNeeded := needed
	if joining != "" {
		holdNeeded = Majority(len(r.Members) - 1)
	}
	if r.Has(m.cfg.Self) {
		reached = 1
	}
	// A non-member (a removed owner handing over) needs a majority of the
	// roster it left, without itself: its hold rests on that.
	if len(r.Members) == 0 {
		return 0, 1
	}
	if reached >= needed {
		m.markConfirmed()
		return reached, needed
	}
	if reached >= holdNeeded {
		m.markConfirmed()
	}
	answers := make(chan bool, len(r.Members))
	asked := 0
	for _, c := range r.Members {
		if c.Name == m.cfg.Self {
			continue
		}
		asked++
		addr := net.UDPAddrFromAddrPort(netip.AddrPortFrom(c.Address, uint16(m.cfg.Port)))
		go func(name string, at netip.AddrPort) {
			// Three tries: one lost UDP packet must not veto a claim.
			var kernel chan bool
			for i := 0; i < 3; i++ {
				if _, err := m.ml.Ping(name, addr); err == nil {
					m.answers.record(name, time.Now(), m.cfg.ProbeInterval)
					answers <- true
					return
				}
				if kernel == nil {
					// Unanswered: its process may only be starved (pings
					// need it, a handshake needs only its kernel), or it is
					// gone (see Answers). Ask its kernel now, beside the
					// other tries, so that the verdict is in about when the
					// silence counts (SilentAfter), and a gone holder is not
					// taken over later than before the handshake existed.
					kernel = make(chan bool, 1)
					go func() { kernel <- m.askKernel(name, at) }()
				}
			}
			answers <- <-kernel
		}(c.Name, netip.AddrPortFrom(c.Address, uint16(m.cfg.Port)))
	}
	for i := 0; i < asked && reached < needed; i++ {
		if <-answers {
			reached++
			if reached == holdNeeded {
				m.markConfirmed()
			}
		}
	}
	if reached >= needed {
		m.markConfirmed()
	}
	return reached, needed
}

// askKernel tries a handshake with the member's gossip listener and records
// the outcome. A failure is recorded at the moment the handshake started:
// a ping answered while it was under way is newer, so it still counts as
// the member's latest word (Unreachable compares the two).
func (m *Membership) askKernel(name string, at netip.AddrPort) bool {
	started := time.Now()
	ok := m.handshake(at)
	if ok {
		m.answers.handshake(name, time.Now(), true)
	} else {
		m.answers.handshake(name, started, false)
	}
	return ok
}

// handshakeTimeout is how long a handshake may take before the member's
// kernel counts as unreachable: a probe interval, or two probe timeouts if
// longer. A kernel answers a SYN from its network softirq, within
// milliseconds even while every process on the machine is starved, so this
// is a bound on the path, not on the member's load; longer would only delay
// the takeover of a holder whose machine or link went.
func (m *Membership) handshakeTimeout() time.Duration {
	return max(m.cfg.ProbeInterval, 2*m.cfg.ProbeTimeout)
}

// handshake reports whether the gossip listener at addr completes a TCP
// handshake within handshakeTimeout (kernelHandshake: the kernel is asked at
// the deadline, not a timer). The stream carries the label header and then
// ends, which the peer's memberlist reads as a clean end of stream: nothing
// is logged.
func (m *Membership) handshake(addr netip.AddrPort) bool {
	return kernelHandshake(addr, time.Now().Add(m.handshakeTimeout()), m.cfg.Label)
}

// sendLabel writes memberlist's label header on an established connection
// and closes it.
func sendLabel(c net.Conn, label string) {
	if label != "" {
		_ = c.SetWriteDeadline(time.Now().Add(time.Second))
		_ = memberlist.AddLabelHeaderToStream(c, label)
	}
	_ = c.Close()
}

func (m *Membership) markConfirmed() {
	// +1 keeps a confirmation in the first nanosecond distinct from never.
	m.confirmedAt.Store(int64(time.Since(m.base)) + 1)
}

// ConfirmedAt is when a majority (this member included) last answered direct
// pings, zero if never. A background loop pings every ProbeInterval, so an
// owner can tell that it has lost touch with the group even while gossip
// still lists the others: on a link too slow for the probe timeout, suspicion
// is refuted and the rejoin loop reconnects over TCP, so the dead-or-alive
// view can flap for as long as the fault lasts.
func (m *Membership) ConfirmedAt() time.Time {
	off := m.confirmedAt.Load()
	if off == 0 {
		return time.Time{}
	}
	// base carries a monotonic reading and Add keeps it, so Sub against
	// time.Now() measures elapsed time, not the wall clock.
	return m.base.Add(time.Duration(off - 1))
}
