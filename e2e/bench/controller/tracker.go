package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"

	lbv1 "github.com/caplb/caplb/api/v1alpha1"
	"github.com/caplb/caplb/e2e/harness"
)

// tracker watches every LoadBalancer (an informer, i.e. list + watch) and tells waiters the
// moment a status they wait for arrives, so latencies are measured from watch events, not polls.
type tracker struct {
	mu      sync.Mutex
	latest  map[string]*lbv1.LoadBalancer
	waiters map[string][]*waiter
	// converged holds the keys of LoadBalancers that are Ready with three active members.
	converged map[string]bool
	// onConverged is closed when len(converged) reaches want.
	want        int
	onConverged chan struct{}
	convergedAt time.Time
}

type waiter struct {
	pred func(*lbv1.LoadBalancer) bool
	ch   chan time.Time
}

func converged(lb *lbv1.LoadBalancer) bool {
	return lb.Status.ActiveTargets == 3 && harness.ConditionIs(lb, lbv1.ReadyCondition, "True")
}

func startTracker(ctx context.Context, cfg *rest.Config, want int) (*tracker, error) {
	scheme, err := harness.NewScheme()
	if err != nil {
		return nil, err
	}
	c, err := cache.New(cfg, cache.Options{Scheme: scheme})
	if err != nil {
		return nil, fmt.Errorf("creating cache: %w", err)
	}
	t := &tracker{
		latest: map[string]*lbv1.LoadBalancer{}, waiters: map[string][]*waiter{},
		converged: map[string]bool{}, want: want, onConverged: make(chan struct{}),
	}
	inf, err := c.GetInformer(ctx, &lbv1.LoadBalancer{})
	if err != nil {
		return nil, fmt.Errorf("LoadBalancer informer: %w", err)
	}
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { t.observe(o) },
		UpdateFunc: func(_, o any) { t.observe(o) },
	}); err != nil {
		return nil, fmt.Errorf("adding event handler: %w", err)
	}
	go func() { _ = c.Start(ctx) }()
	if !c.WaitForCacheSync(ctx) {
		return nil, fmt.Errorf("LoadBalancer cache did not sync")
	}
	return t, nil
}

func (t *tracker) observe(o any) {
	now := time.Now()
	lb, ok := o.(*lbv1.LoadBalancer)
	if !ok {
		return
	}
	key := lb.Namespace + "/" + lb.Name
	t.mu.Lock()
	defer t.mu.Unlock()
	t.latest[key] = lb
	if converged(lb) && !t.converged[key] {
		t.converged[key] = true
		if len(t.converged) == t.want {
			t.convergedAt = now
			close(t.onConverged)
		}
	}
	ws := t.waiters[key]
	kept := ws[:0]
	for _, w := range ws {
		if w.pred(lb) {
			w.ch <- now
			continue
		}
		kept = append(kept, w)
	}
	t.waiters[key] = kept
}

// convergedCount reports how many LoadBalancers have converged.
func (t *tracker) convergedCount() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.converged)
}

// waitFor returns when the LoadBalancer's status satisfies pred, as seen through the watch:
// the time the event arrived.
func (t *tracker) waitFor(ctx context.Context, key string, pred func(*lbv1.LoadBalancer) bool) (time.Time, error) {
	w := &waiter{pred: pred, ch: make(chan time.Time, 1)}
	t.mu.Lock()
	if lb := t.latest[key]; lb != nil && pred(lb) {
		t.mu.Unlock()
		return time.Now(), nil
	}
	t.waiters[key] = append(t.waiters[key], w)
	t.mu.Unlock()
	select {
	case at := <-w.ch:
		return at, nil
	case <-ctx.Done():
		t.mu.Lock()
		desc := "never seen"
		if lb := t.latest[key]; lb != nil {
			desc = harness.DescribeLB(lb)
		}
		t.mu.Unlock()
		return time.Time{}, fmt.Errorf("LoadBalancer %s: %w; last seen: %s", key, ctx.Err(), desc)
	}
}
