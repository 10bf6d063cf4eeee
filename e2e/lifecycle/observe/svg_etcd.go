package observe

import (
	"fmt"
	"time"
)

// An etcd member's role in a stretch of the timeline, and how it is drawn.
type etcdRole string

const (
	roleAbsent  etcdRole = ""
	roleLeader  etcdRole = "leader"
	roleVoter   etcdRole = "voter"
	roleLearner etcdRole = "learner"
	// roleUnknown: the membership could not be read then.
	roleUnknown etcdRole = "unknown"
)

// Teal, apart from the Machines' phase greens.
var etcdRoleColour = map[etcdRole]string{
	roleLeader: "#01665e", roleVoter: "#35978f", roleLearner: "#c7eae5", roleUnknown: "#d0d0d0",
}

// etcdLegend is the legend of the etcd lanes, drawn only when there are some.
var etcdLegend = []struct{ fill, label string }{
	{etcdRoleColour[roleLeader], "etcd leader"}, {etcdRoleColour[roleVoter], "etcd voter"}, {etcdRoleColour[roleLearner], "etcd learner"},
}

// roleSpan is a stretch in which a member kept one role.
type roleSpan struct {
	role     etcdRole
	from, to time.Time
}

// etcdRoles are member's roles over the samples, each sample lasting until the next (end for
// the last), consecutive equal roles merged; stretches in which it was no member are left out.
func etcdRoles(samples []EtcdSample, member string, end time.Time) []roleSpan {
	var out []roleSpan
	for i, s := range samples {
		to := end
		if i+1 < len(samples) {
			to = samples[i+1].At
		}
		role := roleOf(s, member)
		if n := len(out); n > 0 && out[n-1].role == role {
			out[n-1].to = to
			continue
		}
		out = append(out, roleSpan{role: role, from: s.At, to: to})
	}
	// A failed read counts in the lane of a member on either side of it only.
	isMember := func(i int) bool {
		return i >= 0 && i < len(out) && out[i].role != roleAbsent && out[i].role != roleUnknown
	}
	var kept []roleSpan
	for i, r := range out {
		if r.role == roleAbsent || r.role == roleUnknown && !isMember(i-1) && !isMember(i+1) {
			continue
		}
		kept = append(kept, r)
	}
	return kept
}

func roleOf(s EtcdSample, member string) etcdRole {
	if s.Err != "" {
		return roleUnknown
	}
	for _, m := range s.Members {
		if m.Name != member {
			continue
		}
		switch {
		case m.Leader:
			return roleLeader
		case m.Learner:
			return roleLearner
		default:
			return roleVoter
		}
	}
	return roleAbsent
}

// etcdLanes draws one lane per etcd member, in the order they first appear: its role over time
// (leader, voter, learner; grey while the membership could not be read).
func (c *canvas) etcdLanes(samples []EtcdSample) {
	var members []string
	seen := map[string]bool{}
	for _, s := range samples {
		for _, m := range s.Members {
			if !seen[m.Name] {
				seen[m.Name] = true
				members = append(members, m.Name)
			}
		}
	}
	if len(members) == 0 {
		return
	}
	c.header("etcd members")
	for _, m := range members {
		top := c.lane(m, "etcd-lane")
		for _, r := range etcdRoles(samples, m, c.t1) {
			c.bar(r.from, r.to, top, etcdRoleColour[r.role], fmt.Sprintf(` class="etcd-%s"`, r.role),
				fmt.Sprintf("%s: %s %.1f–%.1f s", m, r.role, r.from.Sub(c.t0).Seconds(), r.to.Sub(c.t0).Seconds()))
			if x0, x1 := c.x(r.from), c.x(r.to); r.role != roleUnknown && x1-x0 > float64(len(r.role))*charWidth+6 {
				fill := "#222"
				if r.role == roleLeader {
					fill = "#fff"
				}
				c.text(x0+3, top+laneHeight-5, string(r.role), fmt.Sprintf(`font-size="10" fill="%s"`, fill))
			}
		}
	}
}
