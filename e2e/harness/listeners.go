package harness

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
)

// Listeners are real TCP listeners on loopback addresses that accept and close connections:
// the "external load balancer" or the members' API servers, as far as a TCP probe can tell.
// Linux routes all of 127.0.0.0/8 to lo, so 127.0.0.2, .3, ... need no setup.
type Listeners struct {
	// Port all listeners share.
	Port int
	mu   sync.Mutex
	ls   map[string]net.Listener
	wg   sync.WaitGroup
}

// Listen opens a listener on each host at port (0: pick one port free on every host).
func Listen(port int, hosts ...string) (*Listeners, error) {
	if len(hosts) == 0 {
		return nil, errors.New("listen: no hosts")
	}
	// A port free on the first host is almost always free on the others; retry if not.
	for attempt := 0; attempt < 20; attempt++ {
		l := &Listeners{Port: port, ls: map[string]net.Listener{}}
		err := l.open(hosts)
		if err == nil {
			return l, nil
		}
		l.Close()
		if port != 0 {
			return nil, err
		}
	}
	return nil, fmt.Errorf("listen: no port free on all of %v", hosts)
}

func (l *Listeners) open(hosts []string) error {
	for _, h := range hosts {
		ln, err := net.Listen("tcp", net.JoinHostPort(h, strconv.Itoa(l.Port)))
		if err != nil {
			return fmt.Errorf("listen on %s:%d: %w", h, l.Port, err)
		}
		if l.Port == 0 {
			l.Port = ln.Addr().(*net.TCPAddr).Port
		}
		l.mu.Lock()
		l.ls[h] = ln
		l.mu.Unlock()
		l.wg.Add(1)
		go l.serve(ln)
	}
	return nil
}

func (l *Listeners) serve(ln net.Listener) {
	defer l.wg.Done()
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		_ = c.Close()
	}
}

// Stop closes the listener on one host (a member's API server going away).
func (l *Listeners) Stop(host string) {
	l.mu.Lock()
	ln := l.ls[host]
	delete(l.ls, host)
	l.mu.Unlock()
	if ln != nil {
		_ = ln.Close()
	}
}

// Close closes every listener and waits for their goroutines.
func (l *Listeners) Close() {
	l.mu.Lock()
	for h, ln := range l.ls {
		_ = ln.Close()
		delete(l.ls, h)
	}
	l.mu.Unlock()
	l.wg.Wait()
}
