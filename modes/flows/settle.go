package flows

import "time"

// settleFor is how long a connection's byte counts must stay unchanged before a reset takes it
// as quiet. tcp_info's last-data times count in jiffies (4 ms at HZ=250): an HTTP/2 server sends
// a response's HEADERS and DATA in separate segments, and one jiffy after the HEADERS the
// connection already looked answered — a reset there cut a GET's body in one CI run, which
// client-go does not resend. Unchanged counters across more than a jiffy leave only a server
// stalled that long mid-answer.
const settleFor = 5 * time.Millisecond

// byteCounts is one connection's tcpi_bytes_received and tcpi_bytes_sent at a time.
type byteCounts struct {
	received, sent uint64
	since          time.Time
}

// settler remembers each connection's counts since they last changed. Pure: samples in, a
// verdict out.
type settler struct {
	seen map[uint64]byteCounts
}

// settled records connection key's counts at now and reports whether they have not changed
// for settleFor. A connection seen for the first time has not settled.
func (s *settler) settled(key, received, sent uint64, now time.Time) bool {
	if s.seen == nil {
		s.seen = map[uint64]byteCounts{}
	}
	prev, ok := s.seen[key]
	if !ok || prev.received != received || prev.sent != sent {
		s.seen[key] = byteCounts{received: received, sent: sent, since: now}
		return false
	}
	return now.Sub(prev.since) >= settleFor
}
