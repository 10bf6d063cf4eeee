//go:build linux

package arp_test

import (
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/caplb/caplb/e2e/lab"
)

// transitionWindow bounds how long after a fault (or its repair) the VIP may
// be held by zero or two nodes. Generous for a loaded 2-core CI machine; the
// benchmark measures the real figures.
const transitionWindow = 4 * time.Second

// ownerSampler checks "exactly one owner at any sampled instant outside a
// bounded transition window": it samples the nodes' kernels every 10ms and
// remembers the instants at which the test disturbed the cluster.
type ownerSampler struct {
	c    *lab.Cluster
	vip  netip.Addr
	stop chan struct{}
	done chan struct{}

	mu      sync.Mutex
	samples []sample
	events  []event
}

type sample struct {
	at      time.Time
	holders []string
}

type event struct {
	at   time.Time
	what string
}

func newOwnerSampler(c *lab.Cluster, vip netip.Addr) *ownerSampler {
	s := &ownerSampler{c: c, vip: vip, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-s.stop:
				return
			case <-t.C:
			}
			h, err := c.Holders(vip)
			if err != nil {
				continue
			}
			s.mu.Lock()
			s.samples = append(s.samples, sample{at: time.Now(), holders: h})
			s.mu.Unlock()
		}
	}()
	return s
}

// mark records a disturbance (fault or repair) starting now.
func (s *ownerSampler) mark(what string) {
	s.mu.Lock()
	s.events = append(s.events, event{at: time.Now(), what: what})
	s.mu.Unlock()
}

// check stops sampling and fails t for every sample outside all transition
// windows that does not show exactly one holder.
func (s *ownerSampler) check(t *testing.T) {
	t.Helper()
	close(s.stop)
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	var bad []string
	for _, smp := range s.samples {
		if len(smp.holders) == 1 {
			continue
		}
		covered := false
		for _, e := range s.events {
			if !smp.at.Before(e.at) && smp.at.Sub(e.at) <= transitionWindow {
				covered = true
				break
			}
		}
		if !covered {
			bad = append(bad, fmt.Sprintf("%s holders=%v", smp.at.Format("15:04:05.000"), smp.holders))
		}
	}
	if len(s.samples) < 50 {
		t.Errorf("only %d owner samples taken", len(s.samples))
	}
	var ev []string
	for _, e := range s.events {
		ev = append(ev, e.at.Format("15:04:05.000")+" "+e.what)
	}
	if len(bad) == 0 && t.Failed() {
		// Something else failed: the faults' timeline lines up with the agents' logs.
		t.Logf("events:\n%s", strings.Join(ev, "\n"))
	}
	if len(bad) > 0 {
		t.Errorf("%d of %d samples outside transition windows without exactly one owner:\n%s\nevents:\n%s",
			len(bad), len(s.samples), strings.Join(first(bad, 20), "\n"), strings.Join(ev, "\n"))
	}
}

func first(s []string, n int) []string {
	if len(s) > n {
		return s[:n]
	}
	return s
}
