package agent

import (
	"time"

	"github.com/caplb/caplb/modes/election"
)

// answerRecorder is implemented by election.Membership: each member's
// answers to this member's direct pings.
type answerRecorder interface {
	Answers(name string) election.Answers
}

var _ answerRecorder = (*election.Membership)(nil)

// silentHolder returns the other member that gossip shows holding the VIPs
// and that is gone (election.Answers.Gone: silent to our direct pings for
// two probe intervals, one answer after that not ending the silence, and
// its gossip listener no longer completing TCP handshakes), "" if none. Like memberlist's Lifeguard awareness, a member
// reports silence only while every other alive member answers it: if they
// are silent too, the likely culprit is this member (starved of CPU, or its
// own link), and gossip's slower verdict decides.
func (r rules) silentHolder(v election.View, answers map[string]election.Answers, now time.Time) string {
	if answers == nil {
		return ""
	}
	probe := r.cfg.Election.ProbeInterval.Duration
	silent := ""
	for _, m := range v.Members {
		if m.Name == r.cfg.NodeName || !m.Alive {
			continue
		}
		ans := answers[m.Name]
		quiet := ans.Silent(now, probe)
		switch {
		case m.Meta.Holding && ans.Gone(now, probe) && silent == "":
			// Silent to pings is not enough: a holder starved of CPU (a
			// member booting beside it) still completes handshakes, and
			// a claim beside it would flip the neighbours' caches twice.
			silent = m.Name
		case m.Meta.Holding:
		case !m.Meta.Holding && (!ans.Heard() || quiet):
			return "" // we are not hearing the others either
		}
	}
	return silent
}

// dropSilentHolders marks as dead, in a copy of v, the holder that a majority of the
// configured members (this one included, the holder excluded) reports
// silent: each of them has had no direct answer from it for
// election.SilentAfter. That is memberlist's own verdict (direct and indirect
// probes unanswered) without its suspicion timeout (suspicionMult x
// probeInterval, 200 ms at the defaults), which was the largest single term
// of a failover (docs/benchmarks.md, "Where the time goes"). The holder,
// cut off from that majority, releases on its own after contactTimeout, or
// at once when its link went down. A claim still needs quorum and a
// majority answering direct pings, so a minority never claims; a holder
// that was only slow answers again, and if it still holds, the stickiness
// rule keeps one of the two.
func (r rules) dropSilentHolders(v election.View, silent, logged string, out *output) (election.View, string) {
	if silent == "" {
		return v, ""
	}
	observers := 0
	for _, m := range v.Members {
		if m.Name == r.cfg.NodeName {
			observers++ // silent is set: we report it
		} else if m.Alive && m.Meta.Silent == silent {
			observers++
		}
	}
	if observers < election.Majority(len(v.Members)) {
		return v, logged
	}
	v.Members = append([]election.MemberView(nil), v.Members...)
	for i := range v.Members {
		if v.Members[i].Name == silent {
			v.Members[i].Alive = false
		}
	}
	if logged != silent {
		out.note("holder silent to a majority: treated as failed", "member", silent, "observers", observers)
	}
	return v, silent
}

// starvedHolder returns the member that last held the VIPs when gossip no
// longer shows it alive (memberlist declared it dead, or a majority reported
// it silent) but its kernel still completes handshakes with its gossip
// listener: its agent is starved of CPU, not gone, and the VIPs are still on
// its interface. "" when there is none, or when nothing was ever heard from
// it (nothing to go by). After election.FrozenAfter without an answer to a
// ping it counts as gone all the same.
func (r rules) starvedHolder(v election.View, answers map[string]election.Answers, now time.Time) string {
	h := v.LastHolder
	if h == "" || h == r.cfg.NodeName || answers == nil {
		return ""
	}
	for _, m := range append(append([]election.MemberView{}, v.Members...), v.Others...) {
		if m.Name == h && m.Alive {
			return "" // alive in the view: Decide weighs it
		}
	}
	if ans := answers[h]; ans.Heard() && !ans.Unreachable(now, r.cfg.Election.ProbeInterval.Duration) {
		return h
	}
	return ""
}
