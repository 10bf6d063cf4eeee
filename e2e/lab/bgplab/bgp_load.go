//go:build linux

package bgplab

import (
	"context"
	"io"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/caplb/caplb/e2e/lab"
)

// Attempt is one client connection: connect, read the answering node's name, close.
type Attempt struct {
	Start, End time.Time
	// Node is the name the server answered with; empty on failure.
	Node string
	// Dialed is true once the TCP connection was established (a later Err is a reset or a
	// short read, not a failed connect).
	Dialed bool
	Err    error
}

// Load is a client that keeps connecting to a target from inside a namespace, each attempt
// from a new source port, and records every attempt. It stands in for API clients during
// faults: a failed attempt is a client that found nobody (or the wrong node) at the VIP.
type Load struct {
	stop chan struct{}
	wg   sync.WaitGroup

	mu       sync.Mutex
	attempts []Attempt
}

// StartLoad starts workers that each connect to target every interval (staggered), with a
// timeout of one second per attempt. Each worker lives on its own OS thread inside ns, so its
// sockets are created there.
func StartLoad(ns *lab.Netns, target string, workers int, interval time.Duration) *Load {
	l := &Load{stop: make(chan struct{})}
	for w := 0; w < workers; w++ {
		offset := time.Duration(w) * interval / time.Duration(workers)
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			_ = ns.Do(func() error {
				time.Sleep(offset)
				next := time.Now()
				for {
					select {
					case <-l.stop:
						return nil
					default:
					}
					l.record(attempt(target))
					next = next.Add(interval)
					if d := time.Until(next); d > 0 {
						select {
						case <-l.stop:
							return nil
						case <-time.After(d):
						}
					} else {
						next = time.Now() // fell behind (a slow attempt): do not burst
					}
				}
			})
		}()
	}
	return l
}

func attempt(target string) Attempt {
	a := Attempt{Start: time.Now()}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", target)
	if err != nil {
		a.End, a.Err = time.Now(), err
		return a
	}
	defer c.Close()
	a.Dialed = true
	_ = c.SetDeadline(a.Start.Add(time.Second))
	b, err := io.ReadAll(io.LimitReader(c, 64))
	a.End = time.Now()
	if err != nil {
		a.Err = err
		return a
	}
	a.Node = strings.TrimSpace(string(b))
	if a.Node == "" {
		a.Err = io.ErrUnexpectedEOF
	}
	return a
}

func (l *Load) record(a Attempt) {
	l.mu.Lock()
	l.attempts = append(l.attempts, a)
	l.mu.Unlock()
}

// Attempts returns a copy of the attempts so far.
func (l *Load) Attempts() []Attempt {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]Attempt(nil), l.attempts...)
}

// Between returns the attempts that started in [from, to).
func (l *Load) Between(from, to time.Time) []Attempt {
	var out []Attempt
	for _, a := range l.Attempts() {
		if !a.Start.Before(from) && a.Start.Before(to) {
			out = append(out, a)
		}
	}
	return out
}

// Stop ends the workers and returns every attempt.
func (l *Load) Stop() []Attempt {
	close(l.stop)
	l.wg.Wait()
	return l.Attempts()
}
