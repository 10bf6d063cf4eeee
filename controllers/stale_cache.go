package controllers

import (
	"encoding/json"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	lbv1 "github.com/caplb/caplb/api/v1alpha1"
)

// cacheWait bounds how long a reconcile defers to the cache catching up with our own status
// patch; past it the status is taken as it is (somebody else may have written it).
const cacheWait = 2 * time.Second

// staleRetry is how soon a reconcile that found the cache behind our last patch looks again.
const staleRetry = 10 * time.Millisecond

// statusJSON is the status as it reads back from the API server (times at second precision),
// for comparing what we wrote with what the cache holds.
func statusJSON(lb *lbv1.LoadBalancer) string {
	b, err := json.Marshal(lb.Status)
	if err != nil {
		return ""
	}
	return string(b)
}

// pendingWrite is the status a reconcile wrote and the cache has not shown yet.
type pendingWrite struct {
	status string
	at     time.Time
}

// remember records the status just written for lb.
func (r *LoadBalancerReconciler) remember(lb *lbv1.LoadBalancer) {
	r.pending.Store(client.ObjectKeyFromObject(lb), pendingWrite{status: statusJSON(lb), at: time.Now()})
}

// cacheBehind reports whether the cache still holds lb from before our last status patch.
// Our patches of Machines bring the LoadBalancer straight back into the queue; a reconcile that
// read the LoadBalancer from before the patch would redo the work from stale status (restarting
// members' since times, writing again). Such a reconcile is retried shortly instead, without
// holding a worker. The status itself is compared, as the cache shows it. The memory is a
// cache: a restart forgets it and at worst costs one stale read.
func (r *LoadBalancerReconciler) cacheBehind(lb *lbv1.LoadBalancer) bool {
	key := client.ObjectKeyFromObject(lb)
	v, ok := r.pending.Load(key)
	if !ok {
		return false
	}
	p := v.(pendingWrite)
	if statusJSON(lb) == p.status || time.Since(p.at) > cacheWait {
		r.pending.CompareAndDelete(key, v)
		return false
	}
	return true
}
