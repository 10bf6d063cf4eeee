package election

import (
	"sync"
	"time"
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

func (b *answerBook) get(name string) Answers {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.by[name]
}

// Answers returns the member's record of answers to this member's direct
// pings (the background loop pings every member every ProbeInterval).
func (m *Membership) Answers(name string) Answers { return m.answers.get(name) }
