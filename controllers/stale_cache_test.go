package controllers

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lbv1 "github.com/caplb/caplb/api/v1alpha1"
)

// A reconcile that reads the LoadBalancer from before our own last status patch defers to the
// cache; once the cache shows what we wrote, or after cacheWait (someone else wrote it), it acts.
func TestCacheBehind(t *testing.T) {
	written := &lbv1.LoadBalancer{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "lb"}}
	written.Status.Endpoint = lbv1.APIEndpoint{Host: "10.0.0.10", Port: 6443}
	stale := written.DeepCopy()
	stale.Status.Endpoint = lbv1.APIEndpoint{}
	other := written.DeepCopy()
	other.Name = "other"

	for _, tc := range []struct {
		name    string
		age     time.Duration
		read    *lbv1.LoadBalancer
		want    bool
		forgets bool
	}{
		{"cache shows an older status", 0, stale, true, false},
		{"cache caught up", 0, written, false, true},
		{"another LoadBalancer", 0, other, false, false},
		{"waited long enough: someone else wrote it", cacheWait + time.Second, stale, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			r := &LoadBalancerReconciler{}
			r.remember(written)
			if tc.age > 0 {
				key := client.ObjectKeyFromObject(written)
				v, _ := r.pending.Load(key)
				p := v.(pendingWrite)
				p.at = p.at.Add(-tc.age)
				r.pending.Store(key, p)
			}
			g.Expect(r.cacheBehind(tc.read)).To(Equal(tc.want))
			_, kept := r.pending.Load(client.ObjectKeyFromObject(written))
			g.Expect(kept).To(Equal(!tc.forgets), "the memory is dropped once it served")
		})
	}
}
