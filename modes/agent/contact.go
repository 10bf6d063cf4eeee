package agent

import (
	"time"

	agentv1 "github.com/caplb/caplb/api/agent/v1alpha1"

	"github.com/caplb/caplb/modes/election"
)

// lostContact: a majority has not answered direct pings for longer than
// election.contactTimeout. Gossip alone can keep a cut-off owner believing
// it has quorum (see election.Membership.ConfirmedAt).
func (r rules) lostContact(in inputs) bool {
	at := in.confirmedAt
	return !at.IsZero() && in.now.Sub(at) > r.cfg.Election.ContactTimeout.Duration
}

// holdThroughNoQuorum: gossip lost quorum only just now, while a majority
// answered direct pings within the last two probe intervals. When a
// partition heals, the isolated side's stale death notices make live
// members look dead for a few milliseconds, until they refute them; an
// owner that released on that blip would hand the VIP back to the member
// that was cut off. A real minority stops getting answers before gossip
// gives up on the others, so it still releases at once.
func (r rules) holdThroughNoQuorum(st loopState, in inputs) bool {
	e, now, at := r.cfg.Election, in.now, in.confirmedAt
	return !at.IsZero() && now.Sub(at) <= 2*e.ProbeInterval.Duration &&
		!st.quorumLostAt.IsZero() && now.Sub(st.quorumLostAt) <= e.ContactTimeout.Duration
}

// aliveAhead counts alive members preferred over self.
func aliveAhead(v election.View, self string) int {
	n := 0
	for _, m := range v.Members {
		if m.Name == self {
			break
		}
		if m.Alive {
			n++
		}
	}
	return n
}

// holderAhead is the first alive member preferred over self that holds the VIP, "" if none.
func holderAhead(v election.View, self string) string {
	for _, m := range v.Members {
		if m.Name == self {
			break
		}
		if m.Alive && m.Meta.Holding {
			return m.Name
		}
	}
	return ""
}

// eligibleOther reports whether an alive member other than self is eligible: someone the VIP
// can be handed over to.
func eligibleOther(v election.View, self string) bool {
	for _, m := range v.Members {
		if m.Name != self && m.Alive && m.Meta.Eligible {
			return true
		}
	}
	return false
}

// claimStagger is the head start per alive member preferred over this one:
// three gossip rounds.
func claimStagger(c *agentv1.AgentConfiguration) time.Duration {
	return 3 * c.Election.GossipInterval.Duration
}
