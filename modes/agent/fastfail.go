package agent

import (
	"time"

	"github.com/caplb/caplb/modes/election"
)

// lastAnswerer is implemented by election.Membership: when a member last
// answered this member's direct pings.
type lastAnswerer interface {
	LastAnswer(name string) time.Time
}

// silentHolderAfter: a holder that has not answered our direct pings (sent
// every probeInterval, three tries of probeTimeout each) for this long is
// reported silent in our gossiped metadata.
func silentHolderAfter(c *Config) time.Duration { return 2 * c.Election.ProbeInterval.Duration }

// silentHolder returns the other member that gossip shows holding the VIPs
// and that has not answered our direct pings for silentHolderAfter, "" if
// none.
func (a *Agent) silentHolder(v election.View, now time.Time) string {
	la, ok := a.ml.(lastAnswerer)
	if !ok {
		return ""
	}
	for _, m := range v.Members {
		if m.Name == a.cfg.NodeName || !m.Alive || !m.Meta.Holding {
			continue
		}
		if at := la.LastAnswer(m.Name); !at.IsZero() && now.Sub(at) >= silentHolderAfter(a.cfg) {
			return m.Name
		}
	}
	return ""
}

// dropSilentHolders marks as dead, in v, a holder that a majority of the
// configured members (this one included, the holder excluded) reports
// silent: each of them has had no direct answer from it for
// silentHolderAfter. That is memberlist's own verdict (direct and indirect
// probes unanswered) without its suspicion timeout (suspicionMult x
// probeInterval, 200 ms at the defaults), which was the largest single term
// of a failover (docs/benchmarks.md, "Where the time goes"). The holder,
// cut off from that majority, releases on its own after contactTimeout, or
// at once when its link went down. A claim still needs quorum and a
// majority answering direct pings, so a minority never claims; a holder
// that was only slow answers again, and if it still holds, the stickiness
// rule keeps one of the two.
func (a *Agent) dropSilentHolders(v *election.View) {
	if a.silent == "" {
		a.silentLogged = ""
		return
	}
	observers := 0
	for _, m := range v.Members {
		if m.Name == a.cfg.NodeName {
			observers++ // a.silent is set: we report it
		} else if m.Alive && m.Meta.Silent == a.silent {
			observers++
		}
	}
	if observers < election.Majority(len(v.Members)) {
		return
	}
	for i := range v.Members {
		if v.Members[i].Name == a.silent {
			v.Members[i].Alive = false
		}
	}
	if a.silentLogged != a.silent {
		a.silentLogged = a.silent
		a.log.Info("holder silent to a majority: treated as failed", "member", a.silent, "observers", observers)
	}
}
