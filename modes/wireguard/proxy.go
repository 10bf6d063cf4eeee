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

// handle dials a member (another one after a failed dial, each at most once) and splices bytes
// both ways. Nothing is read from the client before a member answers, so a retry is invisible
// to it.
func (g *Gateway) handle(ctx context.Context, client net.Conn) {
	tried := map[Key]bool{}
	for {
		b := g.pool.pick(tried)
		if b == nil {
			g.log.V(1).Info("no member for connection", "client", client.RemoteAddr().String(), "tried", len(tried))
			_ = client.Close()
			return
		}
		tried[b.pub] = true
		dctx, cancel := context.WithTimeout(ctx, g.cfg.DialTimeout.Duration)
		up, err := g.tun.Net.DialContextTCPAddrPort(dctx, netip.AddrPortFrom(b.addr, uint16(g.cfg.MemberPort)))
		cancel()
		if err != nil {
			g.pool.dialFailed(b, err)
			g.log.Info("dial to member failed; trying another", "node", b.node, "publicKey", b.pub.String(), "error", err.Error())
			continue
		}
		p := &proxied{client: client, upstream: up}
		if !g.pool.attach(b, p) {
			_ = up.Close() // quiesced while we dialled
			continue
		}
		splice(p)
		g.pool.detach(b, p)
		return
	}
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
