package wireguard

import (
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"sync"
	"time"
)

// proxied is one client connection spliced to one member.
type proxied struct {
	client, upstream net.Conn
	once             sync.Once
}

func (c *proxied) close() {
	c.once.Do(func() {
		_ = c.client.Close()
		_ = c.upstream.Close()
	})
}

// serveProxy accepts client connections until ln is closed.
func (g *Gateway) serveProxy(ctx context.Context, ln net.Listener) {
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return
			}
			g.log.Error(err, "accept")
			time.Sleep(50 * time.Millisecond) // e.g. out of file descriptors: do not spin
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			g.handle(ctx, c)
		}()
	}
}

// handle dials a member and splices bytes both ways. Dials race: while none has connected,
// every hedgeDelay one more member joins (a member whose dial failed may be dialled again), and
// the first to connect wins; a connection gives up after connectBudget. So a member that died a
// moment ago costs a client about hedgeDelay, not dialTimeout, and after a NAT flush (every member
// unreachable until its own next keepalive) a fresh SYN to whichever member comes back first
// wins. A failed dial marks its member unhealthy at once. Nothing is read from the client before
// a member answers, so the race is invisible to it.
func (g *Gateway) handle(ctx context.Context, client net.Conn) {
	type dialed struct {
		b   *backend
		c   net.Conn
		err error
	}
	inflight := map[Key]int{} // dials pending per member
	busy := func(limit int) map[Key]bool {
		m := map[Key]bool{}
		for k, n := range inflight {
			if n >= limit {
				m[k] = true
			}
		}
		return m
	}
	results := make(chan dialed, 8)
	deadline := time.Now().Add(connectBudget * g.cfg.DialTimeout.Duration)
	attempts := 0
	start := func() bool {
		// A stopping gateway starts no dial: each would fail at once with the cancelled
		// context, and the race would spin through them until the deadline.
		if ctx.Err() != nil || !time.Now().Before(deadline) {
			return false
		}
		// A member with no pending dial first; else a second, fresh SYN to one whose first
		// is still unanswered (a SYN lost before a NAT mapping came back is retried only at
		// the stack's 1 s retransmission).
		b := g.pool.pick(busy(1))
		if b == nil {
			b = g.pool.pick(busy(maxDialsPerMember))
		}
		if b == nil {
			return false
		}
		inflight[b.pub]++
		attempts++
		go func() {
			dctx, cancel := context.WithTimeout(ctx, g.cfg.DialTimeout.Duration)
			defer cancel()
			c, err := g.tun.DialTCP(dctx, netip.AddrPortFrom(b.addr, uint16(g.cfg.MemberPort)))
			results <- dialed{b: b, c: c, err: err}
		}()
		return true
	}
	var won *proxied
	var wonB *backend
	if start() {
		hedge := time.NewTicker(g.cfg.HedgeDelay.Duration)
		defer hedge.Stop()
		for len(inflight) > 0 && won == nil {
			select {
			case <-hedge.C:
				start()
			case r := <-results:
				if inflight[r.b.pub]--; inflight[r.b.pub] == 0 {
					delete(inflight, r.b.pub)
				}
				if r.err == nil {
					if p := (&proxied{client: client, upstream: r.c}); g.pool.attach(r.b, p) {
						won, wonB = p, r.b
						continue
					}
					_ = r.c.Close() // quiesced while we dialled
				} else if ctx.Err() == nil { // else cancelled by the gateway's stop: not the member's fault
					g.pool.dialFailed(r.b, r.err)
					g.log.Info("dial to member failed; racing others", "node", r.b.node, "publicKey", r.b.pub.String(), "error", r.err.Error())
				}
				if len(inflight) == 0 {
					start()
				}
			}
		}
	}
	// Losers of the race are closed when they connect; their failures still count.
	n := 0
	for _, k := range inflight {
		n += k
	}
	if n > 0 {
		go func() {
			for range n {
				r := <-results
				if r.err != nil {
					if ctx.Err() == nil {
						g.pool.dialFailed(r.b, r.err)
					}
				} else {
					_ = r.c.Close()
				}
			}
		}()
	}
	if won == nil {
		g.log.V(1).Info("no member answered; closing the client connection", "client", client.RemoteAddr().String(), "attempts", attempts)
		_ = client.Close()
		return
	}
	splice(won)
	g.pool.detach(wonB, won)
}

// connectBudget bounds one client connection's dial race, in dialTimeouts; a member has at most
// maxDialsPerMember dials pending for one client connection.
const (
	connectBudget     = 3
	maxDialsPerMember = 2
)

// halfCloser is a connection whose write side can be shut alone (TCP FIN), as TLS close_notify
// and HTTP/1.0 style clients expect.
type halfCloser interface{ CloseWrite() error }

// splice copies both ways; when one side finishes sending, the other side's write half is shut;
// when both are done (or either fails) both connections close.
func splice(p *proxied) {
	done := make(chan struct{}, 2)
	cp := func(dst, src net.Conn) {
		buf := make([]byte, 32<<10)
		_, err := io.CopyBuffer(dst, src, buf)
		if hc, ok := dst.(halfCloser); ok && err == nil {
			_ = hc.CloseWrite()
		} else {
			p.close()
		}
		done <- struct{}{}
	}
	go cp(p.upstream, p.client)
	go cp(p.client, p.upstream)
	<-done
	<-done
	p.close()
}
