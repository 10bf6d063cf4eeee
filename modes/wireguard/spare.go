package wireguard

import (
	"errors"
	"net"
	"sync"
	"syscall"
	"time"
)

// spareDialer keeps one connection to the local API server dialled ahead, so that a tunnel
// connection (a client's, or a gateway's health check) is spliced at once instead of waiting
// for its own connect: on a loaded host that connect is a few hundred microseconds of every
// fresh connection's latency. The spare is young (closed unused after maxAge: an API server
// closes connections that start no TLS handshake in time), checked alive before use (the server
// may have closed it or restarted), and replaced only when taken, so an idle member holds at
// most one idle connection and churns none.
type spareDialer struct {
	addr    string
	timeout time.Duration
	maxAge  time.Duration

	mu      sync.Mutex
	spare   net.Conn
	born    time.Time
	expire  *time.Timer
	dialing bool
	closed  bool
}

func newSpareDialer(addr string, timeout, maxAge time.Duration) *spareDialer {
	return &spareDialer{addr: addr, timeout: timeout, maxAge: maxAge}
}

// dial returns a connection to the API server: the spare when it is young and alive, else a
// fresh one. Either way a new spare is dialled behind it.
func (s *spareDialer) dial() (net.Conn, error) {
	s.mu.Lock()
	c, born := s.spare, s.born
	s.spare = nil
	if s.expire != nil {
		s.expire.Stop()
		s.expire = nil
	}
	s.mu.Unlock()
	if c != nil && (time.Since(born) >= s.maxAge || !alive(c)) {
		_ = c.Close()
		c = nil
	}
	s.refill()
	if c != nil {
		return c, nil
	}
	return net.DialTimeout("tcp", s.addr, s.timeout)
}

// refill dials a spare in the background unless one is there or on its way.
func (s *spareDialer) refill() {
	s.mu.Lock()
	if s.closed || s.dialing || s.spare != nil {
		s.mu.Unlock()
		return
	}
	s.dialing = true
	s.mu.Unlock()
	go func() {
		c, err := net.DialTimeout("tcp", s.addr, s.timeout)
		s.mu.Lock()
		defer s.mu.Unlock()
		s.dialing = false
		if err != nil {
			return // the next dial dials its own and tries again
		}
		if s.closed || s.spare != nil {
			_ = c.Close()
			return
		}
		s.spare, s.born = c, time.Now()
		s.expire = time.AfterFunc(s.maxAge, func() { s.drop(c) })
	}()
}

// drop closes c if it is still the unused spare.
func (s *spareDialer) drop(c net.Conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.spare == c {
		_ = c.Close()
		s.spare, s.expire = nil, nil
	}
}

// close closes the spare and stops refilling.
func (s *spareDialer) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	if s.spare != nil {
		_ = s.spare.Close()
		s.spare = nil
	}
	if s.expire != nil {
		s.expire.Stop()
		s.expire = nil
	}
}

// alive reports whether the server has neither closed c nor sent anything on it (an API server
// speaks only after the client's TLS hello): a non-blocking peek must find no data yet.
func alive(c net.Conn) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	ok = false
	var buf [1]byte
	if err := rc.Read(func(fd uintptr) bool {
		_, _, rerr := syscall.Recvfrom(int(fd), buf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		ok = errors.Is(rerr, syscall.EAGAIN) || errors.Is(rerr, syscall.EWOULDBLOCK)
		return true // never wait: the answer is now
	}); err != nil {
		return false
	}
	return ok
}
