package providers

import "time"

// Defaults of Polling.
const (
	// DefaultStaleAfter: a node-side report (an agent's, a gateway's) older than this counts as
	// silence. Agents and gateways report at least every 10s.
	DefaultStaleAfter = 45 * time.Second
	// DefaultPendingPoll is how soon Ensure and Quiesce look again while they wait on reports.
	DefaultPendingPoll = time.Second
	// DefaultResync is how soon Ensure looks again when nothing is pending, to notice reporters
	// that fell silent (a watch sees reports change, not stop).
	DefaultResync = 15 * time.Second
)

// Polling paces a backend that waits on node-side reports. A zero field takes its default.
type Polling struct {
	StaleAfter, PendingPoll, Resync time.Duration
}

// StaleAfterOrDefault is StaleAfter, or DefaultStaleAfter when unset.
func (p Polling) StaleAfterOrDefault() time.Duration {
	return orDefault(p.StaleAfter, DefaultStaleAfter)
}

// PendingPollOrDefault is PendingPoll, or DefaultPendingPoll when unset.
func (p Polling) PendingPollOrDefault() time.Duration {
	return orDefault(p.PendingPoll, DefaultPendingPoll)
}

// ResyncOrDefault is Resync, or DefaultResync when unset.
func (p Polling) ResyncOrDefault() time.Duration { return orDefault(p.Resync, DefaultResync) }

func orDefault(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}
