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

// handle dials a member and splices bytes both ways. A failed dial is retried on another member
// (each member at most once); while dials are unanswered, every hedgeDelay another member joins
// the race, and the first to connect wins, so a member that died a moment ago (before its
// health check noticed) costs a client hedgeDelay, not dialTimeout. Nothing is read from the
// client before a member answers, so retries are invisible to it.
func (g *Gateway) handle(ctx context.Context, client net.Conn) {
	tried := map[Key]bool{}
	type dialed struct {
		b   *backend
		c   net.Conn
		err error
	}
	results := make(chan dialed, 8)
	pending := 0
	start := func() bool {
		b := g.pool.pick(tried)
		if b == nil {
			return false
		}
		tried[b.pub] = true
		pending++
		go func() {
			dctx, cancel := context.WithTimeout(ctx, g.cfg.DialTimeout.Duration)
			defer cancel()
			c, err := g.tun.Net.DialContextTCPAddrPort(dctx, netip.AddrPortFrom(b.addr, uint16(g.cfg.MemberPort)))
			if err != nil {
				results <- dialed{b: b, err: err}
				return
			}
			results <- dialed{b: b, c: c}
		}()
		return true
	}
	var won *proxied
	var wonB *backend
	if start() {
		hedge := time.NewTicker(g.cfg.HedgeDelay.Duration)
		defer hedge.Stop()
		for pending > 0 && won == nil {
			select {
			case <-hedge.C:
				// Every hedgeDelay one more member joins the race until all have: after a NAT
				// flush every member is unreachable until its own next keepalive, and a fresh
				// SYN to whichever comes back first wins.
				if !start() {
					hedge.Stop()
				}
			case r := <-results:
				pending--
				switch {
				case r.err != nil:
					g.pool.dialFailed(r.b, r.err)
					g.log.Info("dial to member failed; trying another", "node", r.b.node, "publicKey", r.b.pub.String(), "error", r.err.Error())
					if pending == 0 {
						start()
					}
				default:
					p := &proxied{client: client, upstream: r.c}
					if g.pool.attach(r.b, p) {
						won, wonB = p, r.b
						break
					}
					_ = r.c.Close() // quiesced while we dialled
					if pending == 0 {
						start()
					}
				}
			}
		}
	}
	// Losers of the race that connect later are closed; their failures still count.
	if pending > 0 {
		go func(n int) {
			for range n {
				r := <-results
				if r.err != nil {
					g.pool.dialFailed(r.b, r.err)
				} else {
					_ = r.c.Close()
				}
			}
		}(pending)
	}
	if won == nil {
		g.log.V(1).Info("no member for connection", "client", client.RemoteAddr().String(), "tried", len(tried))
		_ = client.Close()
		return
	}
	splice(won)
	g.pool.detach(wonB, won)
}

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
