package clients

import (
	"context"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// kube-controller-manager's leader election timings.
const (
	leaseDuration = 15 * time.Second
	renewDeadline = 10 * time.Second
	retryPeriod   = 2 * time.Second
)

// RenewDeadline is the leader's renew deadline: an outage of the API longer than it costs the
// leader its Lease (kube-controller-manager would restart).
const RenewDeadline = renewDeadline

// leader is a leader-elected loop, as every controller runs one: it counts the times it became
// leader and the times it lost leadership while the run was not ending (a controller would
// exit and restart; this one campaigns again).
type leader struct {
	cs        kubernetes.Interface
	namespace string
	identity  string

	mu       sync.Mutex
	acquired []time.Time
	lost     []time.Time
}

func (l *leader) run(ctx context.Context) {
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: l.namespace, Name: "caplb-client-leader"},
		Client:     l.cs.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: l.identity},
	}
	for ctx.Err() == nil {
		le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
			Lock: lock, LeaseDuration: leaseDuration, RenewDeadline: renewDeadline, RetryPeriod: retryPeriod,
			ReleaseOnCancel: true, Name: "caplb-client",
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: func(context.Context) {
					l.mu.Lock()
					l.acquired = append(l.acquired, time.Now())
					l.mu.Unlock()
				},
				OnStoppedLeading: func() {
					if ctx.Err() != nil {
						return // released at the end of the run: not a loss
					}
					l.mu.Lock()
					l.lost = append(l.lost, time.Now())
					l.mu.Unlock()
				},
			},
		})
		if err != nil {
			return
		}
		le.Run(ctx)
	}
}

func (l *leader) counts() (acquired, lost []time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]time.Time(nil), l.acquired...), append([]time.Time(nil), l.lost...)
}
