package observe

import (
	"fmt"
	"slices"
	"time"
)

// spuriousClaims finds, in time-ordered holder samples, every node that began holding the VIP
// beside a holder that was not leaving: the claims the election should never make (a live,
// healthy holder joined by a second claimer, issue 36). A holder is leaving from the scenario's
// EventLeaving for its machine (a deletion, the disabled annotation, a failed health check) to
// its EventBack; a claim beside a leaving holder is a hand-over. A claim with nobody holding
// before is not spurious either: someone must hold. Failed reads say nothing and are skipped.
// Each claim is named "+<seconds into the window> <node> beside <holders>".
func spuriousClaims(hs []HolderSample, evs []Event, from time.Time) []string {
	evs = slices.Clone(evs)
	slices.SortStableFunc(evs, func(a, b Event) int { return a.At.Compare(b.At) })
	leaving := map[string]bool{}
	next := 0
	var prev []string
	var out []string
	for _, h := range hs {
		if h.Err != "" {
			continue
		}
		for ; next < len(evs) && !evs[next].At.After(h.At); next++ {
			switch e := evs[next]; e.Type {
			case EventLeaving:
				leaving[e.Machine] = true
			case EventBack:
				delete(leaving, e.Machine)
			}
		}
		if len(prev) > 0 && !slices.ContainsFunc(prev, func(p string) bool { return leaving[p] }) {
			for _, n := range h.Holders {
				if !slices.Contains(prev, n) {
					out = append(out, fmt.Sprintf("+%.3fs %s beside %v", h.At.Sub(from).Seconds(), n, prev))
				}
			}
		}
		prev = h.Holders
	}
	return out
}
