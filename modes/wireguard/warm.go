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

// Warm connections: a few tunnel connections per member dialled ahead of clients, so that a new
// client connection does not wait for the tunnel's TCP handshake (one round trip through both
// userspace stacks, and the member's connect to its API server behind it). They are safe to hand
// out because:
//   - only to a member that is healthy and eligible (not quiesced, not draining) at that moment,
//     under the same lock that quiesce and health changes take;
//   - only while young (warmMaxAge: an API server closes connections that start no TLS handshake
//     in time), and dropped by maintain once a member stops being healthy or eligible;
//   - and a client's first bytes sent on one are kept until the member answers: a member that
//     died after the connection was dialled (not yet seen by its health checks) does not answer
//     within hedgeDelay (one that closed the connection answers with EOF), and the bytes are
//     replayed on a fresh dial race (see spliceWarm), as a fresh dial to it would have been
//     raced.
//
// Only client connections (re)fill a member's pool, so an idle endpoint holds at most
// warmConnections per member for warmMaxAge, then none.

// warmMaxAge: how long a warm connection may wait for a client.
const warmMaxAge = 2 * time.Second

type warmConn struct {
	c    net.Conn
	born time.Time
}

// usableLocked: b may get a new client connection on a warm connection.
func (p *pool) usableLocked(b *backend) bool {
	return p.backends[b.pub] == b && p.eligibleLocked(b) && b.healthy
}

// takeWarm returns a warm connection to b attached to c, or nil. Warm connections found too old
// are closed. (One the member closed meanwhile is not detected here: the guard sees its EOF
// before any answer and replays at once.)
func (p *pool) takeWarm(b *backend, c *proxied, now time.Time) net.Conn {
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.usableLocked(b) && len(b.warm) > 0 {
		w := b.warm[len(b.warm)-1] // the youngest
		b.warm = b.warm[:len(b.warm)-1]
		if now.Sub(w.born) >= warmMaxAge {
			_ = w.c.Close()
			continue
		}
		c.setUpstream(w.c)
		b.conns[c] = struct{}{}
		b.served++
		return w.c
	}
	return nil
}

// warmWanted reserves a dial to refill b's warm connections; it reports whether one is wanted.
func (p *pool) warmWanted(b *backend, size int) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.usableLocked(b) || len(b.warm)+b.warmDialing >= size {
		return false
	}
	b.warmDialing++
	return true
}

// warmDialed ends a reserved dial: c joins b's warm connections unless b is no longer usable.
func (p *pool) warmDialed(b *backend, c net.Conn, now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	b.warmDialing--
	if c == nil {
		return
	}
	if !p.usableLocked(b) {
		_ = c.Close()
		return
	}
	b.warm = append(b.warm, warmConn{c: c, born: now})
}

// expireWarm closes warm connections that are too old or whose member stopped being usable.
func (p *pool) expireWarm(now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, b := range p.backends {
		keep := b.warm[:0]
		for _, w := range b.warm {
			if p.usableLocked(b) && now.Sub(w.born) < warmMaxAge {
				keep = append(keep, w)
			} else {
				_ = w.c.Close()
			}
		}
		clear(b.warm[len(keep):])
		b.warm = keep
	}
}

// dropWarm closes every warm connection of b (it is being removed).
func (p *pool) dropWarm(b *backend) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, w := range b.warm {
		_ = w.c.Close()
	}
	b.warm = nil
}

// refillWarm dials warm connections to b in the background until its pool is full.
func (g *Gateway) refillWarm(ctx context.Context, b *backend) {
	for g.cfg.WarmConnections > 0 && g.pool.warmWanted(b, g.cfg.WarmConnections) {
		go func() {
			dctx, cancel := context.WithTimeout(ctx, g.cfg.DialTimeout.Duration)
			defer cancel()
			c, err := g.tun.Net.DialContextTCPAddrPort(dctx, netip.AddrPortFrom(b.addr, uint16(g.cfg.MemberPort)))
			if err != nil {
				g.pool.warmDialed(b, nil, time.Now())
				return // the next client's own dial race judges the member
			}
			g.pool.warmDialed(b, c, time.Now())
		}()
	}
}

// maxReplay bounds the client bytes kept until a warm connection's member answers (a TLS
// ClientHello is a few KiB); a client that sends more before any answer is no longer guarded.
const maxReplay = 64 << 10

var errNoAnswer = errors.New("no answer on a warm connection within hedgeDelay")

// guard is the client-to-member half of a spliced warm connection while the member has not
// answered yet: what the client sent is kept for a replay.
type guard struct {
	mu         sync.Mutex
	buf        []byte
	committed  bool // the member answered, or the client sent too much to keep: no replay
	clientDone bool // the client finished sending (its FIN was passed on)
	sent       chan struct{}
	sentOnce   sync.Once
}

// spliceWarm splices p (attached to b on a warm connection). Until the member's first byte the
// client's bytes are also kept; when the member closes without answering, or does not answer
// within hedgeDelay of the client's first bytes, the bytes are replayed on a fresh dial race to
// the other members. A TLS ClientHello can be replayed: it has no
// effect until answered, and the client sees only the answering member's reply.
func (g *Gateway) spliceWarm(ctx context.Context, p *proxied, b *backend) {
	gd := &guard{sent: make(chan struct{})}
	upDone := make(chan struct{})
	go func() { defer close(upDone); g.clientToUpstream(p, gd) }()

	type read struct {
		data []byte
		err  error
	}
	first := make(chan read, 1)
	readFirst := func(up net.Conn) {
		buf := make([]byte, 32<<10)
		n, err := up.Read(buf)
		first <- read{data: buf[:n], err: err}
	}
	up := p.up()
	go readFirst(up)
	sent := gd.sent
	var timeout <-chan time.Time
	for committed := false; !committed; {
		var r read
		select {
		case <-sent:
			sent = nil
			t := time.NewTimer(g.cfg.HedgeDelay.Duration)
			defer t.Stop()
			timeout = t.C
			continue
		case r = <-first:
		case <-timeout:
			r = read{err: errNoAnswer}
		}
		gd.mu.Lock()
		replay := false
		switch {
		case len(r.data) > 0:
			gd.committed, gd.buf = true, nil
		case errors.Is(r.err, errNoAnswer):
			// Too much sent to keep: no longer guarded, wait for the answer as splice would.
			if gd.committed {
				timeout = nil
				gd.mu.Unlock()
				continue
			}
			replay = true
		default:
			// Closed without an answer: a failure unless unguarded, or after the client's FIN
			// (the normal end of a connection).
			replay = !gd.committed && !gd.clientDone
		}
		if replay {
			// Replay while holding gd.mu: the client's later bytes wait for the new upstream.
			// The member is not marked failed: a slow answer is not a dead member; its health
			// checks judge it, and meanwhile at most its few warm connections pay a replay.
			g.pool.detach(b, p)
			_ = up.Close()
			g.log.Info("member did not answer on a warm connection; replaying the client's first bytes on another", "node", b.node, "publicKey", b.pub.String(), "error", r.err.Error())
			nb := g.race(ctx, p, nil, b)
			gd.committed = true
			if nb == nil {
				gd.mu.Unlock()
				p.close()
				<-upDone
				return
			}
			b, up = nb, p.up()
			_, err := up.Write(gd.buf)
			gd.buf = nil
			if err == nil && gd.clientDone {
				if hc, ok := up.(halfCloser); ok {
					_ = hc.CloseWrite()
				}
			}
			gd.mu.Unlock()
			if err != nil {
				p.close()
			} else {
				g.refillWarm(ctx, nb)
				g.upstreamToClient(p, up, nil, nil)
			}
			<-upDone
			p.close()
			g.pool.detach(b, p)
			return
		}
		gd.mu.Unlock()
		committed = true
		g.upstreamToClient(p, up, r.data, r.err)
	}
	<-upDone
	p.close()
	g.pool.detach(b, p)
}

// clientToUpstream copies the client's bytes to p's current upstream, keeping them in gd until
// gd is committed.
func (g *Gateway) clientToUpstream(p *proxied, gd *guard) {
	buf := make([]byte, 32<<10)
	for {
		n, rerr := p.client.Read(buf)
		if n > 0 {
			gd.mu.Lock()
			up := p.up()
			if !gd.committed {
				if len(gd.buf)+n > maxReplay {
					gd.committed, gd.buf = true, nil
				} else {
					gd.buf = append(gd.buf, buf[:n]...)
				}
				gd.sentOnce.Do(func() { close(gd.sent) })
			}
			gd.mu.Unlock()
			if _, werr := up.Write(buf[:n]); werr != nil {
				// A replay in progress holds gd.mu and closed up: these bytes went with it.
				gd.mu.Lock()
				replaced := p.up() != up
				gd.mu.Unlock()
				if !replaced {
					p.close()
					return
				}
			}
		}
		if rerr != nil {
			gd.mu.Lock()
			gd.clientDone = true
			up := p.up()
			gd.mu.Unlock()
			if hc, ok := up.(halfCloser); ok && errors.Is(rerr, io.EOF) {
				_ = hc.CloseWrite()
			} else {
				p.close()
			}
			return
		}
	}
}

// upstreamToClient writes first (a read already done) to the client, then copies the rest, with
// splice's end semantics.
func (g *Gateway) upstreamToClient(p *proxied, up net.Conn, first []byte, ferr error) {
	err := ferr
	if len(first) > 0 {
		_, err = p.client.Write(first)
		if err == nil && ferr == nil {
			_, err = io.CopyBuffer(p.client, up, make([]byte, 32<<10))
		} else if err == nil && !errors.Is(ferr, io.EOF) {
			err = ferr
		}
	} else if ferr == nil {
		_, err = io.CopyBuffer(p.client, up, make([]byte, 32<<10))
	}
	if errors.Is(err, io.EOF) {
		err = nil
	}
	if hc, ok := p.client.(halfCloser); ok && err == nil {
		_ = hc.CloseWrite()
	} else {
		p.close()
	}
}
