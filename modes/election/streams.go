package election

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
)

// Members' user messages (the BGP data plane's flow lists) travel on memberlist's TCP port but
// not through memberlist: memberlist hands its delegate a message without the connection it came
// on, so a sender's name inside it was only what the sender said (issue 32). streamMux takes the
// streams that open with userStreamMagic off memberlist's transport, and the receiver checks that
// the connection comes from the address gossip knows for the name the message carries.

// userStreamMagic opens a user-message stream. Its first byte is no memberlist message type (those
// are small numbers, and 244 for a label header), so memberlist's own streams never match it.
var userStreamMagic = []byte{0xCA, 'c', 'a', 'p', 'l', 'b', 'u', '1'}

// streamMux wraps memberlist's TCP/UDP transport and passes memberlist the streams that are its own.
type streamMux struct {
	*memberlist.NetTransport
	toMemberlist chan net.Conn
	onUser       func(c net.Conn, r *bufio.Reader)
	// peekTimeout bounds the wait for a stream's first bytes.
	peekTimeout time.Duration
	// done ends run once memberlist shut down: until then it must take every stream the
	// transport accepts, or the transport's Shutdown waits for ever on its own send.
	done chan struct{}
	wg   sync.WaitGroup
}

var _ memberlist.Transport = &streamMux{}

// StreamCh is what memberlist reads its inbound streams from.
func (s *streamMux) StreamCh() <-chan net.Conn { return s.toMemberlist }

// start sorts the inbound streams until close.
func (s *streamMux) start() {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		s.run()
	}()
}

// close ends the sorting; call it after memberlist's Shutdown.
func (s *streamMux) close() {
	close(s.done)
	s.wg.Wait()
}

func (s *streamMux) run() {
	for {
		select {
		case <-s.done:
			return
		case c := <-s.NetTransport.StreamCh():
			go s.sort(c)
		}
	}
}

// sort reads a stream's first bytes: a user message goes to onUser, anything else (a short or
// closed stream too: the direct contact's handshake is a label header and EOF) to memberlist,
// with those bytes still to be read.
func (s *streamMux) sort(c net.Conn) {
	r := bufio.NewReaderSize(c, 4096)
	_ = c.SetReadDeadline(time.Now().Add(s.peekTimeout))
	head, _ := r.Peek(len(userStreamMagic))
	_ = c.SetReadDeadline(time.Time{})
	if bytes.Equal(head, userStreamMagic) {
		_, _ = r.Discard(len(userStreamMagic))
		s.onUser(c, r)
		return
	}
	select {
	case s.toMemberlist <- &peekedConn{Conn: c, r: r}:
	case <-s.done:
		_ = c.Close()
	}
}

// peekedConn reads what was peeked first.
type peekedConn struct {
	net.Conn
	r io.Reader
}

func (p *peekedConn) Read(b []byte) (int, error) { return p.r.Read(b) }
