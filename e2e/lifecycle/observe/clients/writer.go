// Package clients are the real client-go clients the labs run through the endpoint during a
// control plane's life, and what they count: a writer and a SharedInformer on ConfigMaps (every
// write the writer got a success for must reach the informer: no lost event), a leader-elected
// loop with kube-controller-manager's timings (leadership losses), and the connections the
// shared transport had to open again (streams reset). A request counts as failed when its error
// reaches the caller, after client-go's own retries.
package clients

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// seqKey is the data key holding a write's sequence number.
const seqKey = "seq"

// write is one write the writer made: key, sequence number, when it returned, and its outcome.
type write struct {
	key string
	seq int
	at  time.Time
	err error
}

// writer creates then updates a few ConfigMaps in turn, each write carrying the next sequence
// number of its key. Updates are unconditional (no resourceVersion): a write whose outcome was
// unknown never blocks the next.
type writer struct {
	cs        kubernetes.Interface
	namespace string
	keys      []string
	every     time.Duration

	mu     sync.Mutex
	writes []write
	seq    map[string]int
	// stopped ends the writes before the run's context ends (the informer watches on).
	stopped chan struct{}
	once    sync.Once
}

func (w *writer) stop() { w.once.Do(func() { close(w.stopped) }) }

func newWriter(cs kubernetes.Interface, namespace string, keys int, every time.Duration) *writer {
	w := &writer{cs: cs, namespace: namespace, every: every, seq: map[string]int{}, stopped: make(chan struct{})}
	for i := 0; i < keys; i++ {
		w.keys = append(w.keys, "caplb-client-"+strconv.Itoa(i))
	}
	return w
}

// run writes until ctx ends or stop is called.
func (w *writer) run(ctx context.Context) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-w.stopped:
			cancel()
		case <-ctx.Done():
		}
	}()
	t := time.NewTicker(w.every)
	defer t.Stop()
	for i := 0; ; i++ {
		key := w.keys[i%len(w.keys)]
		w.mu.Lock()
		w.seq[key]++
		seq := w.seq[key]
		w.mu.Unlock()
		err := w.put(ctx, key, seq)
		if ctx.Err() != nil {
			return // a write cut by the end of the run is neither a success nor a failure
		}
		w.mu.Lock()
		w.writes = append(w.writes, write{key: key, seq: seq, at: time.Now(), err: err})
		w.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// WriteTimeout bounds each write, where kubectl and the controllers set none (the API server's
// own limit is 60 s): an etcd membership change on the lab's two loaded cores — a learner
// joining, the leader removed — stalled a write for 5-6 s in three runs (the API server's log
// shows etcd's Txn past its deadline), which no load balancer can shorten. The VIP's own stalls
// are bounded by the prober's gap figure, which does not touch etcd.
const WriteTimeout = 15 * time.Second

func (w *writer) put(ctx context.Context, key string, seq int) error {
	rctx, cancel := context.WithTimeout(ctx, WriteTimeout)
	defer cancel()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: w.namespace, Name: key},
		Data: map[string]string{seqKey: strconv.Itoa(seq)}}
	_, err := w.cs.CoreV1().ConfigMaps(w.namespace).Update(rctx, cm, metav1.UpdateOptions{})
	if apierrors.IsNotFound(err) {
		_, err = w.cs.CoreV1().ConfigMaps(w.namespace).Create(rctx, cm, metav1.CreateOptions{})
	}
	if err != nil {
		return fmt.Errorf("write %s=%d: %w", key, seq, err)
	}
	return nil
}

// snapshot returns the writes so far and the last sequence number attempted per key.
func (w *writer) snapshot() ([]write, map[string]int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	attempted := map[string]int{}
	for k, v := range w.seq {
		attempted[k] = v
	}
	return append([]write(nil), w.writes...), attempted
}
