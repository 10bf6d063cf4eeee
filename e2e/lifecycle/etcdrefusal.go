//go:build linux

package lifecycle

import (
	"time"

	"github.com/caplb/caplb/e2e/lifecycle/observe"
)

// EtcdRefusalWindow is how long before a write's refused answer an etcd membership change may
// have happened and still explain it: etcd's request timeout with kubeadm's settings (5 s plus
// twice the 1 s election timeout: a proposal raft dropped while the leader moved or a member
// left waits that long) and the sampler's slack on loaded cores.
const EtcdRefusalWindow = 10 * time.Second

// etcdSampleSlack: the membership is sampled every 250 ms on cores the machines share; a change
// may be sampled after the refusal it caused returned.
const etcdSampleSlack = 2 * time.Second

// unexplainedEtcdRefusals returns the refusals (when each returned) that no change of the etcd
// membership explains. A change is every sample after the first (the recorder keeps changes
// only: a member or learner added, promoted or removed, the leader moving, the membership
// unreadable); one explains a refusal returned at t when it lies in [t-EtcdRefusalWindow,
// t+etcdSampleSlack], and each change explains one refusal at most (the writer is serial: a
// change drops the one write in flight).
func unexplainedEtcdRefusals(refusedAt []time.Time, etcd []observe.EtcdSample) []time.Time {
	var changes []time.Time
	for i := 1; i < len(etcd); i++ {
		changes = append(changes, etcd[i].At)
	}
	used := make([]bool, len(changes))
	var unexplained []time.Time
	for _, t := range refusedAt {
		found := false
		for i, c := range changes {
			if !used[i] && !c.Before(t.Add(-EtcdRefusalWindow)) && !c.After(t.Add(etcdSampleSlack)) {
				used[i], found = true, true
				break
			}
		}
		if !found {
			unexplained = append(unexplained, t)
		}
	}
	return unexplained
}
