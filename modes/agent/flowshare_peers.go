package agent

import (
	"net/netip"
	"time"

	"github.com/caplb/caplb/modes/election"
)

// starvedPeerHold is how long a peer gossip declared dead stays a flow-sharing peer when its
// direct contact does not say it is gone. A rollout boots machines on the members' cores; a
// member starved by one answers memberlist's pings late and is declared dead for a moment
// (refuted 0.3-1.5 s later in the real-control-plane lab) while it serves its connections.
// Dropping its flows at that moment reset one: a segment of its kept-alive client-go connection
// that the rehash of the same rollout brought here met no socket (2026-11-29, BGP life, one PUT
// "connection reset by peer"). A peer that is really gone is dropped as soon as its answers say
// so (members), or after the hold (nodes outside the roster, which are not pinged directly):
// its clients' segments are dropped, not reset, meanwhile, and the RST follows.
const starvedPeerHold = 3 * time.Second

// sharingPeers are the peers whose flows this node forwards and to which it sends its own
// list: the alive ones (alivePeers), and each one gossip declared dead less than f.hold ago,
// at the address it had, unless it is a member whose answers to direct pings and handshakes
// say it is gone (election.Answers.Gone: silent, and its kernel refuses or ignores a
// handshake). It runs on run's goroutine and keeps the addresses and verdict times.
func (f *flowShare) sharingPeers(v election.View, now time.Time) map[string]netip.Addr {
	out := f.alivePeers(v)
	for name, a := range out {
		f.lastAddr[name] = a
		delete(f.downSince, name)
	}
	members := make(map[string]bool, len(v.Members))
	for _, m := range v.Members {
		members[m.Name] = true
	}
	for name, a := range f.lastAddr {
		if _, alive := out[name]; alive {
			continue
		}
		since, ok := f.downSince[name]
		if !ok {
			since = now
			f.downSince[name] = now
		}
		if now.Sub(since) >= f.hold || (members[name] && f.gone(name, now)) {
			delete(f.lastAddr, name)
			delete(f.downSince, name)
			continue
		}
		out[name] = a
	}
	return out
}

// gone: the member's direct contact says it is gone. Never answered: not known to be gone (the
// hold bounds it).
func (f *flowShare) gone(name string, now time.Time) bool {
	a := f.peers.Answers(name)
	return a.Heard() && a.Gone(now, f.probeInterval)
}
