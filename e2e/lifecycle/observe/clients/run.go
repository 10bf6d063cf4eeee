package clients

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// Config is what the clients need: a rest.Config whose server is the endpoint (the cluster CA,
// HTTP/2), the namespace they write in, and the writer's pace.
type Config struct {
	REST      *rest.Config
	Namespace string
	// WriteEvery is the writer's interval (default 20 ms); Keys the ConfigMaps it cycles over
	// (default 4).
	WriteEvery time.Duration
	Keys       int
	// Identity names the leader-election candidate (default "caplb-client").
	Identity string
	// WatchREST, when set, is the informer's own config (its own connection); default REST.
	// A test points it elsewhere to show what a watch that stops delivering looks like.
	WatchREST *rest.Config
}

// Result is what the clients saw, with the JSON names the benchmarks report.
type Result struct {
	Writes       int `json:"writes"`
	FailedWrites int `json:"failed_requests"`
	// FirstWriteAt and LastWriteAt are when the first and the last write returned (either
	// outcome): how long the writer ran, which a count of writes only estimates.
	FirstWriteAt time.Time `json:"first_write_at"`
	LastWriteAt  time.Time `json:"last_write_at"`
	// LostEvents are successful writes the informer never delivered with no relist to explain
	// them; RelistSkipped are those a relist coalesced (reported, not hidden).
	LostEvents    int `json:"informer_lost_events"`
	RelistSkipped int `json:"relist_skipped"`
	Relists       int `json:"relists"`
	// StoreMatches: at the end the informer's store held every key's last successful value (or
	// a later attempt whose outcome the writer never learnt).
	StoreMatches bool `json:"store_matches"`
	// LeaderAcquired and LeaderLosses count the leader-elected loop's terms.
	LeaderAcquired int `json:"leader_acquired"`
	LeaderLosses   int `json:"leader_losses"`
	// Connections the shared transport opened; StreamsReset is every one after the first: each
	// replaced a connection that broke with its streams (HTTP/2 multiplexes them on one).
	Connections  int `json:"connections"`
	StreamsReset int `json:"streams_reset"`
	// FirstFailure is the first failed write's error, for the report; FailedAt when each failed
	// write returned (to set beside the timeline).
	FirstFailure string      `json:"first_failure,omitempty"`
	FailedAt     []time.Time `json:"failed_at,omitempty"`
	// EtcdRefusals are writes an API server answered, through the endpoint, with its etcd's
	// refusal (etcdRefusal): the request and its answer crossed the endpoint, so they are not
	// FailedWrites, and are reported apart with when each returned. A lab judges them against
	// its etcd membership (a proposal forwarded while the leader moves or a member leaves is
	// dropped by raft and times out: etcd's behaviour under KCP's own steps).
	EtcdRefusals     int         `json:"etcd_refusals"`
	FirstEtcdRefusal string      `json:"first_etcd_refusal,omitempty"`
	EtcdRefusedAt    []time.Time `json:"etcd_refused_at,omitempty"`
	// EtcdRefusalsUnexplained are the refusals no change of the etcd membership explains; the
	// lab that reads the membership sets it (the clients cannot), and a life's goals miss on any.
	EtcdRefusalsUnexplained int `json:"etcd_refusals_unexplained"`
}

// Run is the clients at work.
type Run struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
	w      *writer
	inf    *informer
	ld     *leader
	dials  atomic.Int64
}

// Start starts the informer (and waits for its first list), the writer and the leader loop.
func Start(ctx context.Context, cfg Config) (*Run, error) {
	if cfg.REST == nil || cfg.Namespace == "" {
		return nil, errors.New("clients: REST and Namespace are required")
	}
	if cfg.WriteEvery == 0 {
		cfg.WriteEvery = 20 * time.Millisecond
	}
	if cfg.Keys == 0 {
		cfg.Keys = 4
	}
	if cfg.Identity == "" {
		cfg.Identity = "caplb-client"
	}
	r := &Run{}
	rc := rest.CopyConfig(cfg.REST)
	dial := rc.Dial
	if dial == nil {
		dial = (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	}
	rc.Dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err == nil {
			r.dials.Add(1)
		}
		return c, err
	}
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("clients: %w", err)
	}
	ctx, r.cancel = context.WithCancel(ctx)
	r.w = newWriter(cs, cfg.Namespace, cfg.Keys, cfg.WriteEvery)
	ics := kubernetes.Interface(cs)
	if cfg.WatchREST != nil {
		if ics, err = kubernetes.NewForConfig(cfg.WatchREST); err != nil {
			return nil, fmt.Errorf("clients: the informer's config: %w", err)
		}
	}
	r.inf = newInformer(ics, cfg.Namespace)
	r.ld = &leader{cs: cs, namespace: cfg.Namespace, identity: cfg.Identity}
	r.wg.Add(1)
	go func() { defer r.wg.Done(); r.inf.inf.Run(ctx.Done()) }()
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if !waitSynced(sctx, r.inf) {
		r.cancel()
		r.wg.Wait()
		return nil, errors.New("clients: the informer never synced")
	}
	for _, f := range []func(context.Context){r.w.run, r.ld.run} {
		r.wg.Add(1)
		go func() { defer r.wg.Done(); f(ctx) }()
	}
	return r, nil
}

// Leading reports whether the leader-elected loop holds its lease now.
func (r *Run) Leading() bool {
	a, l := r.ld.counts()
	return len(a) > len(l)
}

func waitSynced(ctx context.Context, i *informer) bool {
	for !i.inf.HasSynced() {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(20 * time.Millisecond):
		}
	}
	return true
}

// Stop stops the writer, gives the informer up to settle to catch up with its last writes, stops
// everything and returns what the clients saw.
func (r *Run) Stop(settle time.Duration) Result {
	r.stopWriter()
	deadline := time.Now().Add(settle)
	for time.Now().Before(deadline) && !r.storeMatches() {
		time.Sleep(20 * time.Millisecond)
	}
	res := r.result()
	r.cancel()
	r.wg.Wait()
	return res
}

// stopWriter stops the writes only; the informer and the leader go on until Stop's end.
func (r *Run) stopWriter() { r.w.stop() }

func (r *Run) storeMatches() bool {
	writes, attempted := r.w.snapshot()
	stored := r.inf.stored()
	for key, last := range lastSuccess(writes) {
		if s, ok := stored[key]; !ok || s < last || s > attempted[key] {
			return false
		}
	}
	return true
}

// FirstWriteAfter is how long after t the first write that returned a success after t returned
// (a write sent before t may be the one: it waited for etcd); -1 if none did.
func (r *Run) FirstWriteAfter(t time.Time) time.Duration {
	writes, _ := r.w.snapshot()
	return firstSuccessAfter(writes, t)
}

func firstSuccessAfter(writes []write, t time.Time) time.Duration {
	first := time.Duration(-1)
	for _, w := range writes {
		if w.err == nil && w.at.After(t) && (first < 0 || w.at.Sub(t) < first) {
			first = w.at.Sub(t)
		}
	}
	return first
}

func lastSuccess(writes []write) map[string]int {
	last := map[string]int{}
	for _, w := range writes {
		if w.err == nil && w.seq > last[w.key] {
			last[w.key] = w.seq
		}
	}
	return last
}

func (r *Run) result() Result {
	writes, _ := r.w.snapshot()
	seen, lists := r.inf.snapshot()
	acquired, lost := r.ld.counts()
	res := Result{Writes: len(writes), StoreMatches: r.storeMatches(), LeaderAcquired: len(acquired),
		LeaderLosses: len(lost), Connections: int(r.dials.Load())}
	if len(writes) > 0 {
		res.FirstWriteAt, res.LastWriteAt = writes[0].at, writes[len(writes)-1].at
	}
	if len(lists) > 1 {
		res.Relists = len(lists) - 1
	}
	if res.Connections > 1 {
		res.StreamsReset = res.Connections - 1
	}
	for _, w := range writes {
		if w.err != nil && etcdRefusal(w.err) {
			res.EtcdRefusals++
			res.EtcdRefusedAt = append(res.EtcdRefusedAt, w.at)
			if res.FirstEtcdRefusal == "" {
				res.FirstEtcdRefusal = w.err.Error()
			}
			continue
		}
		if w.err != nil {
			res.FailedWrites++
			res.FailedAt = append(res.FailedAt, w.at)
			if res.FirstFailure == "" {
				res.FirstFailure = w.err.Error()
			}
			continue
		}
		switch missed(w, seen[w.key], lists) {
		case missedLost:
			res.LostEvents++
		case missedAcrossRelist:
			res.RelistSkipped++
		}
	}
	return res
}

type missedKind int

const (
	delivered missedKind = iota
	missedLost
	missedAcrossRelist
)

// missed classifies a successful write the informer may not have delivered: delivered if its
// value was seen; coalesced by a relist if a list ran between the write and the first later
// value the informer delivered for its key; else lost.
func missed(w write, seen []observation, lists []time.Time) missedKind {
	sort.Slice(seen, func(i, j int) bool { return seen[i].at.Before(seen[j].at) })
	for _, o := range seen {
		if o.seq == w.seq {
			return delivered
		}
	}
	until := time.Now()
	for _, o := range seen {
		if o.seq > w.seq {
			until = o.at
			break
		}
	}
	// The write returned at w.at; it committed before that, so a list that started after the
	// write began may already show it coalesced. Lists from a second before its return count.
	for _, l := range lists[min(1, len(lists)):] {
		if l.After(w.at.Add(-time.Second)) && l.Before(until) {
			return missedAcrossRelist
		}
	}
	return missedLost
}
