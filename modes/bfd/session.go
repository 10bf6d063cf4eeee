package bfd

import "time"

// Params are this side's timers for one session.
type Params struct {
	// DesiredMinTx is how often this side would like to send once the
	// session is up (RFC 5880 bfd.DesiredMinTxInterval).
	DesiredMinTx time.Duration
	// RequiredMinRx is the fastest this side accepts packets at.
	RequiredMinRx time.Duration
	// DetectMult: the peer declares this side down after this many
	// intervals without a packet.
	DetectMult uint8
}

// slowTx is the transmit interval while a session is not up: RFC 5880
// §6.8.3 asks for at least one second, so that a peer that does not run
// BFD is not flooded.
const slowTx = time.Second

// Session is one BFD session's state machine (RFC 5880 §6.8). It is pure:
// every method takes the time it runs at and does no I/O; the runner
// (conn_linux.go) sends what Tick returns and feeds it what arrives.
type Session struct {
	params Params
	local  uint32
	remote uint32
	state  State
	diag   Diag

	remoteState     State
	remoteMinRx     time.Duration
	remoteDesiredTx time.Duration
	remoteMult      uint8
	lastRx          time.Time
	nextTx          time.Time
	// polling: a Poll Sequence runs (this side's timers changed): packets
	// carry P until one with F arrives. sendFinal: answer the peer's
	// poll with F in the next packet, sent at once.
	polling   bool
	sendFinal bool
	// lastPollAnswered is when a Poll last got a Final (finalGap).
	lastPollAnswered time.Time
}

// NewSession returns a session in state Down with local discriminator
// disc (non-zero, unique on this node).
func NewSession(p Params, disc uint32) *Session {
	return &Session{params: p, local: disc, state: Down, remoteMinRx: time.Microsecond}
}

// State is the session's state and the diagnostic of its last change down.
func (s *Session) State() (State, Diag) { return s.state, s.diag }

// Discriminators are this side's and the peer's (0 until heard).
func (s *Session) Discriminators() (local, remote uint32) { return s.local, s.remote }

// Receive applies a valid control packet for this session (RFC 5880
// §6.8.6) and reports whether the state changed.
func (s *Session) Receive(c Control, now time.Time) bool {
	// An up session has exchanged discriminators both ways; RFC 5880 §6.8.6
	// selects a session by Your Discriminator, and leaves the selection of a
	// packet with a zero one (Down/AdminDown only) to the application. A
	// peer sends zero only before it heard us or after a Detection Time
	// without our packets (§6.8.1, bfd.RemoteDiscr), so an up session does
	// not select such a packet, nor one with another My Discriminator, and
	// discards it: a single spoofed packet from the router's address must
	// not take the session, and the member's routes, down. A peer that did
	// reset is noticed when the Detection Time expires here.
	if s.state == Up && (c.YourDisc != s.local || c.MyDisc != s.remote) {
		return false
	}
	before := s.state
	s.remote = c.MyDisc
	s.remoteState = c.State
	s.remoteDesiredTx = c.DesiredMinTx
	s.remoteMinRx = c.RequiredMinRx
	s.remoteMult = c.DetectMult
	s.lastRx = now
	if c.Final {
		s.polling = false
	}
	if c.Poll && now.Sub(s.lastPollAnswered) >= s.finalGap() {
		s.sendFinal, s.lastPollAnswered = true, now
		s.nextTx = now
	}
	if s.state == AdminDown {
		return false
	}
	switch {
	case c.State == AdminDown:
		if s.state != Down {
			s.down(DiagNeighborDown)
		}
	case s.state == Down && c.State == Down:
		s.state, s.diag = Init, DiagNone
	case s.state == Down && c.State == Init, s.state == Init && (c.State == Init || c.State == Up):
		s.state, s.diag = Up, DiagNone
		// The transmit interval drops from slowTx to DesiredMinTx: tell
		// the peer with a Poll Sequence, now.
		s.polling, s.nextTx = true, now
	case s.state == Up && c.State == Down:
		s.down(DiagNeighborDown)
	}
	if s.state != before && s.state != Up {
		s.nextTx = now // tell the peer at once
	}
	return s.state != before
}

// finalGap is the shortest time between two Polls answered with a Final:
// half the interval the peer may send at (it sends no faster than 75 % of
// RequiredMinRx, §6.8.7), so that its own Polls are all answered while a
// flood of them is not reflected to the router packet for packet. A Poll
// left unanswered costs nothing: the peer repeats it on its periodic
// packets until a Final arrives (§6.5). Whatever the configuration, at most
// a hundred Finals a second.
func (s *Session) finalGap() time.Duration {
	return max(s.params.RequiredMinRx/2, 10*time.Millisecond)
}

func (s *Session) down(d Diag) {
	s.state, s.diag, s.polling = Down, d, false
}

// desiredTx is bfd.DesiredMinTxInterval: at least slowTx while not up.
func (s *Session) desiredTx() time.Duration {
	if s.state == Up {
		return s.params.DesiredMinTx
	}
	return max(s.params.DesiredMinTx, slowTx)
}

// txInterval is the interval between periodic packets (RFC 5880 §6.8.7)
// before jitter; 0 when the peer asks for none.
func (s *Session) txInterval() time.Duration {
	if s.remote != 0 && s.remoteMinRx == 0 {
		return 0
	}
	return max(s.desiredTx(), s.remoteMinRx)
}

// DetectionTime is how long the session waits for a packet before it goes
// down (RFC 5880 §6.8.4, asynchronous mode); 0 before the peer was heard.
func (s *Session) DetectionTime() time.Duration {
	if s.remoteMult == 0 {
		return 0
	}
	return time.Duration(s.remoteMult) * max(s.params.RequiredMinRx, s.remoteDesiredTx)
}

// Tick runs the session's timers at now: the detection time (Init or Up
// without a packet for that long goes down) and the periodic transmission.
// It returns the packet to send now, if any, and whether the state
// changed. jitter, in [0.75, 1], scales the next interval (RFC 5880
// §6.8.7: 75-100 %, at most 90 % with a detect multiplier of 1).
func (s *Session) Tick(now time.Time, jitter float64) (send *Control, changed bool) {
	if (s.state == Init || s.state == Up) && now.Sub(s.lastRx) > s.DetectionTime() {
		s.down(DiagDetectionExpired)
		s.remote, s.remoteMult, s.remoteMinRx = 0, 0, time.Microsecond
		s.nextTx, changed = now, true
	}
	if now.Before(s.nextTx) {
		return nil, changed
	}
	iv := s.txInterval()
	if iv == 0 && !s.sendFinal {
		s.nextTx = now.Add(slowTx)
		return nil, changed
	}
	if s.params.DetectMult == 1 {
		jitter = min(jitter, 0.9)
	}
	s.nextTx = now.Add(time.Duration(float64(iv) * jitter))
	c := s.packet()
	return &c, changed
}

// Next is when Tick next has something to do.
func (s *Session) Next() time.Time {
	next := s.nextTx
	if (s.state == Init || s.state == Up) && s.remoteMult != 0 {
		if d := s.lastRx.Add(s.DetectionTime() + time.Microsecond); d.Before(next) {
			next = d
		}
	}
	return next
}

// packet is the control packet this side sends now.
func (s *Session) packet() Control {
	c := Control{
		Diag: s.diag, State: s.state, Poll: s.polling && !s.sendFinal, Final: s.sendFinal,
		DetectMult: s.params.DetectMult, MyDisc: s.local, YourDisc: s.remote,
		DesiredMinTx: s.desiredTx(), RequiredMinRx: s.params.RequiredMinRx,
	}
	s.sendFinal = false
	return c
}
