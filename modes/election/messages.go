package election

import (
	"errors"
	"fmt"

	"github.com/hashicorp/memberlist"
)

// Members exchange small documents beside the gossip (the BGP data plane's flow lists, see
// modes/agent/flowshare.go) as memberlist user messages: encrypted and authenticated with the
// gossip key like the rest, sent over TCP to one member. A user message starts with
// userMessageTag, which no membership document (JSON, '{') starts with, then the sender's name.
const userMessageTag = 0xCA

// maxUserMessage bounds what Send accepts: memberlist reads a stream message whole.
const maxUserMessage = 4 << 20

// Send delivers payload to the alive member named to (OnMessage on its side). It blocks for
// one TCP exchange, at most the membership's TCP timeout.
func (m *Membership) Send(to string, payload []byte) error {
	if len(payload) > maxUserMessage {
		return fmt.Errorf("election: message to %s is %d bytes, more than %d", to, len(payload), maxUserMessage)
	}
	var node *memberlist.Node
	for _, n := range m.ml.Members() {
		if n.Name == to {
			node = n
			break
		}
	}
	if node == nil {
		return fmt.Errorf("election: %s is not alive", to)
	}
	self := m.cfg.Self
	msg := make([]byte, 0, 2+len(self)+len(payload))
	msg = append(msg, userMessageTag, byte(len(self)))
	msg = append(msg, self...)
	msg = append(msg, payload...)
	if err := m.ml.SendReliable(node, msg); err != nil {
		return fmt.Errorf("election: sending to %s: %w", to, err)
	}
	return nil
}

// parseUserMessage splits a user message into its sender and payload; ok is false for anything
// else (a membership document).
func parseUserMessage(b []byte) (from string, payload []byte, ok bool, err error) {
	if len(b) == 0 || b[0] != userMessageTag {
		return "", nil, false, nil
	}
	if len(b) < 2 || len(b) < 2+int(b[1]) {
		return "", nil, true, errors.New("user message shorter than its header")
	}
	n := int(b[1])
	if n == 0 {
		return "", nil, true, errors.New("user message without a sender")
	}
	return string(b[2 : 2+n]), b[2+n:], true, nil
}

// notifyMsg dispatches what memberlist delivers: user messages to OnMessage, the rest (membership
// documents) to offer.
func (m *Membership) notifyMsg(b []byte) {
	from, payload, user, err := parseUserMessage(b)
	switch {
	case !user:
		m.offer(b)
	case err != nil:
		m.log.V(1).Info("ignoring a malformed user message", "error", err.Error())
	case m.cfg.OnMessage != nil:
		m.cfg.OnMessage(from, payload)
	}
}
