package clients

import (
	"context"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// observation is one value the informer delivered, and when.
type observation struct {
	seq int
	at  time.Time
}

// informer is a SharedInformer on the namespace's ConfigMaps that records every value it
// delivers and every (re)list it makes: a list after the first is a relist, across which
// intermediate values may be coalesced without being lost.
type informer struct {
	inf cache.SharedIndexInformer

	mu       sync.Mutex
	seen     map[string][]observation
	lists    []time.Time
	listsReq int
}

func newInformer(cs kubernetes.Interface, namespace string) *informer {
	i := &informer{seen: map[string][]observation{}}
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			i.listed()
			return cs.CoreV1().ConfigMaps(namespace).List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			if o.SendInitialEvents != nil && *o.SendInitialEvents {
				i.listed() // a streaming list (watch-list) is a list too
			}
			return cs.CoreV1().ConfigMaps(namespace).Watch(ctx, o)
		},
	}
	i.inf = cache.NewSharedIndexInformer(lw, &corev1.ConfigMap{}, 0, cache.Indexers{})
	record := func(obj any) {
		cm, ok := obj.(*corev1.ConfigMap)
		if !ok {
			return
		}
		seq, err := strconv.Atoi(cm.Data[seqKey])
		if err != nil {
			return
		}
		i.mu.Lock()
		i.seen[cm.Name] = append(i.seen[cm.Name], observation{seq: seq, at: time.Now()})
		i.mu.Unlock()
	}
	_, _ = i.inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    record,
		UpdateFunc: func(_, n any) { record(n) },
	})
	return i
}

func (i *informer) listed() {
	i.mu.Lock()
	i.lists = append(i.lists, time.Now())
	i.mu.Unlock()
}

// stored is the sequence number the informer's store holds per key.
func (i *informer) stored() map[string]int {
	out := map[string]int{}
	for _, obj := range i.inf.GetStore().List() {
		cm := obj.(*corev1.ConfigMap)
		if seq, err := strconv.Atoi(cm.Data[seqKey]); err == nil {
			out[cm.Name] = seq
		}
	}
	return out
}

func (i *informer) snapshot() (map[string][]observation, []time.Time) {
	i.mu.Lock()
	defer i.mu.Unlock()
	seen := map[string][]observation{}
	for k, v := range i.seen {
		seen[k] = append([]observation(nil), v...)
	}
	return seen, append([]time.Time(nil), i.lists...)
}
