package election

import (
	"bufio"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"time"
)

// Members exchange small documents beside the gossip (the BGP data plane's flow lists, see
// modes/agent/flowshare.go) over TCP to one member, on the gossip port (streams.go): sealed with
// the gossip key (AES-GCM, the label as additional data, so that LoadBalancers sharing a segment
// and key stay apart) when there is one, and accepted only from the address gossip knows for the
// sender they name — a holder of the key can no longer speak for another member.

// maxUserMessage bounds what Send accepts and a receiver reads.
const maxUserMessage = 4 << 20

// Send delivers payload to the alive member named to (OnMessage on its side). It blocks for
// one TCP exchange, at most the membership's TCP timeout.
func (m *Membership) Send(to string, payload []byte) error {
	m.mu.Lock()
	p, ok := m.peers[to]
	m.mu.Unlock()
	if !ok {
		return fmt.Errorf("election: %s is not alive", to)
	}
	return m.send(to, p, payload)
}

// SendDeparted is Send to a node memberlist declared dead or left, at the address it had: a
// member starved of CPU is declared dead while it still serves, and its peers may still need
// to reach it (flow sharing). Alive nodes are sent to as by Send.
func (m *Membership) SendDeparted(to string, payload []byte) error {
	m.mu.Lock()
	p, ok := m.peers[to]
	if !ok {
		p, ok = m.departed[to]
	}
	m.mu.Unlock()
	if !ok {
		return fmt.Errorf("election: %s was never seen", to)
	}
	return m.send(to, p, payload)
}

func (m *Membership) send(to string, p peer, payload []byte) error {
	if len(payload) > maxUserMessage {
		return fmt.Errorf("election: message to %s is %d bytes, more than %d", to, len(payload), maxUserMessage)
	}
	body, err := m.seal(append(append([]byte{byte(len(m.cfg.Self))}, m.cfg.Self...), payload...))
	if err != nil {
		return err
	}
	frame := make([]byte, 0, len(userStreamMagic)+4+len(body))
	frame = append(frame, userStreamMagic...)
	frame = binary.BigEndian.AppendUint32(frame, uint32(len(body)))
	frame = append(frame, body...)
	// From this member's own address: the receiver binds the name to it.
	d := net.Dialer{Timeout: userStreamTimeout, LocalAddr: &net.TCPAddr{IP: m.selfAddr.AsSlice()}}
	c, err := d.Dial("tcp", netip.AddrPortFrom(p.addr, p.port).String())
	if err != nil {
		return fmt.Errorf("election: sending to %s: %w", to, err)
	}
	defer c.Close()
	_ = c.SetWriteDeadline(time.Now().Add(userStreamTimeout))
	if _, err := c.Write(frame); err != nil {
		return fmt.Errorf("election: sending to %s: %w", to, err)
	}
	return nil
}

// userStreamTimeout bounds one user message's exchange, either side.
const userStreamTimeout = 2 * time.Second

// receiveUser reads one user message from c (its magic already read) and hands it to OnMessage
// when it opens with the key and comes from its sender's address.
func (m *Membership) receiveUser(c net.Conn, r *bufio.Reader) {
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(userStreamTimeout))
	var n uint32
	if err := binary.Read(r, binary.BigEndian, &n); err != nil || n > maxUserMessage+1024 {
		m.log.V(1).Info("ignoring a malformed user message", "remote", c.RemoteAddr().String())
		return
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		m.log.V(1).Info("ignoring a user message cut short", "remote", c.RemoteAddr().String(), "error", err.Error())
		return
	}
	plain, err := m.open(body)
	if err != nil {
		m.log.Info("dropped a user message that does not open with the gossip key", "remote", c.RemoteAddr().String())
		return
	}
	from, payload, err := parseUserMessage(plain)
	if err != nil {
		m.log.V(1).Info("ignoring a malformed user message", "error", err.Error())
		return
	}
	remote, _ := netip.ParseAddrPort(c.RemoteAddr().String())
	m.mu.Lock()
	p, alive := m.peers[from]
	if !alive {
		// Declared dead (a member starved of CPU is, while it still serves): taken from the
		// address it had.
		p, alive = m.departed[from]
	}
	m.mu.Unlock()
	if !alive || p.addr != remote.Addr().Unmap() {
		m.log.Info("dropped a user message whose sender is not the member it names",
			"claims", from, "remote", remote.Addr().String(), "memberKnown", alive)
		return
	}
	if m.cfg.OnMessage != nil {
		m.cfg.OnMessage(from, payload)
	}
}

// parseUserMessage splits a user message into its sender and payload.
func parseUserMessage(b []byte) (from string, payload []byte, err error) {
	if len(b) < 1 || len(b) < 1+int(b[0]) {
		return "", nil, errors.New("user message shorter than its header")
	}
	n := int(b[0])
	if n == 0 {
		return "", nil, errors.New("user message without a sender")
	}
	return string(b[1 : 1+n]), b[1+n:], nil
}

// seal encrypts with the primary gossip key (none: as is, election.insecure).
func (m *Membership) seal(plain []byte) ([]byte, error) {
	if len(m.cfg.Keys) == 0 {
		return plain, nil
	}
	aead, err := gcm(m.cfg.Keys[0])
	if err != nil {
		return nil, err
	}
	nonce := make([]byte, aead.NonceSize(), aead.NonceSize()+len(plain)+aead.Overhead())
	if _, err := rand.Read(nonce); err != nil {
		return nil, fmt.Errorf("election: nonce: %w", err)
	}
	return aead.Seal(nonce, nonce, plain, []byte(m.cfg.Label)), nil
}

// open decrypts with any of the gossip keys (a key rotation keeps the old ones for a while).
func (m *Membership) open(body []byte) ([]byte, error) {
	if len(m.cfg.Keys) == 0 {
		return body, nil
	}
	for _, k := range m.cfg.Keys {
		aead, err := gcm(k)
		if err != nil || len(body) < aead.NonceSize() {
			continue
		}
		if plain, err := aead.Open(nil, body[:aead.NonceSize()], body[aead.NonceSize():], []byte(m.cfg.Label)); err == nil {
			return plain, nil
		}
	}
	return nil, errors.New("no gossip key opens it")
}

func gcm(key []byte) (cipher.AEAD, error) {
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("election: gossip key: %w", err)
	}
	return cipher.NewGCM(block)
}
