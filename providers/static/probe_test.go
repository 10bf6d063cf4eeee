package static

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

// flipDialer connects (to a pipe) or refuses, as told, and counts its dials.
type flipDialer struct {
	refuse atomic.Bool
	dials  atomic.Int64
}

func (d *flipDialer) DialContext(context.Context, string, string) (net.Conn, error) {
	d.dials.Add(1)
	if d.refuse.Load() {
		return nil, errors.New("connection refused")
	}
	a, b := net.Pipe()
	_ = b.Close()
	return a, nil
}

// In notify mode the prober re-probes on its own and reports changes only: a healthy endpoint
// costs no reconcile after the first, a change costs exactly one.
func TestProberNotifiesChangesOnly(t *testing.T) {
	g := NewWithT(t)
	d := &flipDialer{}
	var mu sync.Mutex
	notified := map[string]int{}
	count := func() int { mu.Lock(); defer mu.Unlock(); return notified["k"] }
	p := newProber(d, time.Now, func(key string) { mu.Lock(); notified[key]++; mu.Unlock() })
	const interval = 20 * time.Millisecond

	res, known, next := p.last("k", "10.0.0.1:6443", interval, time.Second)
	g.Expect(known).To(BeTrue(), "the first probe lands within firstProbeWait")
	g.Expect(res.err).NotTo(HaveOccurred())
	g.Expect(next).To(BeZero(), "no periodic requeue in notify mode")
	g.Eventually(count).Should(Equal(1), "the first result is a change")

	// Still healthy over many intervals: re-probed, not notified.
	g.Eventually(d.dials.Load).Should(BeNumerically(">=", 5))
	g.Consistently(count, 5*interval).Should(Equal(1))

	d.refuse.Store(true)
	g.Eventually(count).Should(Equal(2), "unreachable is a change")
	res, known, next = p.last("k", "10.0.0.1:6443", interval, time.Second)
	g.Expect(known).To(BeTrue())
	g.Expect(res.err).To(HaveOccurred())
	g.Expect(next).To(BeZero())

	p.forget("k")
	n := d.dials.Load()
	// A probe already started may still dial once; a periodic one would dial five more times.
	g.Consistently(d.dials.Load, 5*interval).Should(BeNumerically("<=", n+1), "a forgotten key is no longer probed")
}

// Without notify the reconcile is told when to look again, as before.
func TestProberPollsWithoutNotify(t *testing.T) {
	g := NewWithT(t)
	p := newProber(&flipDialer{}, time.Now, nil)
	_, known, next := p.last("k", "10.0.0.1:6443", time.Minute, time.Second)
	g.Expect(known).To(BeTrue())
	g.Expect(next).To(BeNumerically("~", time.Minute, time.Second))
}
