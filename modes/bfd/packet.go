// Package bfd is single-hop Bidirectional Forwarding Detection (RFC 5880,
// RFC 5881) in asynchronous mode, without echo, demand mode or
// authentication: what the BGP speaker needs so that a router drops a
// frozen or powered-off member's routes in well under a second instead of
// at the BGP hold timer.
//
// The session's rules are pure (session.go: a state and a clock in,
// packets and state changes out); conn_linux.go runs them on UDP port 3784
// with the TTL of 255 that RFC 5881 requires both ways.
package bfd

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"
)

// State is a session's state (RFC 5880 §4.1, Sta).
type State uint8

const (
	AdminDown State = 0
	Down      State = 1
	Init      State = 2
	Up        State = 3
)

func (s State) String() string {
	switch s {
	case AdminDown:
		return "admindown"
	case Down:
		return "down"
	case Init:
		return "init"
	case Up:
		return "up"
	}
	return fmt.Sprintf("state(%d)", uint8(s))
}

// Diag is the reason of the last change to a down state (RFC 5880 §4.1).
type Diag uint8

const (
	DiagNone             Diag = 0
	DiagDetectionExpired Diag = 1
	DiagNeighborDown     Diag = 3
	DiagAdminDown        Diag = 7
)

// controlLen is the length of a control packet without authentication.
const controlLen = 24

// Control is a BFD control packet (RFC 5880 §4.1) without the
// authentication section.
type Control struct {
	Diag       Diag
	State      State
	Poll       bool
	Final      bool
	DetectMult uint8
	MyDisc     uint32
	YourDisc   uint32
	// DesiredMinTx and RequiredMinRx travel in microseconds.
	DesiredMinTx  time.Duration
	RequiredMinRx time.Duration
}

// Marshal encodes c (version 1, no authentication, no echo).
func (c Control) Marshal() []byte {
	b := make([]byte, controlLen)
	b[0] = 1<<5 | byte(c.Diag&0x1f)
	b[1] = byte(c.State) << 6
	if c.Poll {
		b[1] |= 0x20
	}
	if c.Final {
		b[1] |= 0x10
	}
	b[2] = c.DetectMult
	b[3] = controlLen
	binary.BigEndian.PutUint32(b[4:], c.MyDisc)
	binary.BigEndian.PutUint32(b[8:], c.YourDisc)
	binary.BigEndian.PutUint32(b[12:], uint32(c.DesiredMinTx/time.Microsecond))
	binary.BigEndian.PutUint32(b[16:], uint32(c.RequiredMinRx/time.Microsecond))
	return b
}

var errInvalid = errors.New("bfd: invalid control packet")

// Parse decodes and validates a control packet as RFC 5880 §6.8.6 asks
// before a session is looked up: version 1, a sane length, a detect
// multiplier, no multipoint, a discriminator of its own, and a zero "your
// discriminator" only from a session that is down. Authentication is not
// supported: a packet that asks for it is refused.
func Parse(b []byte) (Control, error) {
	if len(b) < controlLen {
		return Control{}, fmt.Errorf("%w: %d bytes", errInvalid, len(b))
	}
	if v := b[0] >> 5; v != 1 {
		return Control{}, fmt.Errorf("%w: version %d", errInvalid, v)
	}
	length := int(b[3])
	if length < controlLen || length > len(b) {
		return Control{}, fmt.Errorf("%w: length %d", errInvalid, length)
	}
	c := Control{
		Diag:          Diag(b[0] & 0x1f),
		State:         State(b[1] >> 6),
		Poll:          b[1]&0x20 != 0,
		Final:         b[1]&0x10 != 0,
		DetectMult:    b[2],
		MyDisc:        binary.BigEndian.Uint32(b[4:]),
		YourDisc:      binary.BigEndian.Uint32(b[8:]),
		DesiredMinTx:  time.Duration(binary.BigEndian.Uint32(b[12:])) * time.Microsecond,
		RequiredMinRx: time.Duration(binary.BigEndian.Uint32(b[16:])) * time.Microsecond,
	}
	switch {
	case b[1]&0x04 != 0:
		return Control{}, fmt.Errorf("%w: authentication is not supported", errInvalid)
	case b[1]&0x01 != 0:
		return Control{}, fmt.Errorf("%w: multipoint", errInvalid)
	case c.DetectMult == 0:
		return Control{}, fmt.Errorf("%w: detect multiplier 0", errInvalid)
	case c.MyDisc == 0:
		return Control{}, fmt.Errorf("%w: my discriminator 0", errInvalid)
	case c.YourDisc == 0 && c.State != Down && c.State != AdminDown:
		return Control{}, fmt.Errorf("%w: your discriminator 0 in state %v", errInvalid, c.State)
	}
	return c, nil
}
