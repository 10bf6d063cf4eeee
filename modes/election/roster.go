package election

import (
	"encoding/json"
	"net/netip"
	"time"

	"github.com/hashicorp/memberlist"

	agentv1 "github.com/caplb/caplb/api/agent/v1alpha1"
)

// Roster is a versioned member list: the members quorum and preference are
// computed over (modes/agent keeps the newest one it has learned).
type Roster struct {
	Version int64
	Members []Member
}

// Has reports whether name is a member.
func (r Roster) Has(name string) bool { _, ok := r.member(name); return ok }

func (r Roster) member(name string) (Member, bool) {
	for _, mb := range r.Members {
		if mb.Name == name {
			return mb, true
		}
	}
	return Member{}, false
}

// Document converts r to the API's Membership document.
func (r Roster) Document() agentv1.Membership {
	d := agentv1.Membership{Version: r.Version, Members: []agentv1.MemberConfig{}}
	for _, m := range r.Members {
		d.Members = append(d.Members, agentv1.MemberConfig{Name: m.Name, Address: m.Address.String()})
	}
	return d
}

// RosterFrom converts a validated Membership document.
func RosterFrom(d agentv1.Membership) (Roster, error) {
	if err := d.Validate(); err != nil {
		return Roster{}, err
	}
	r := Roster{Version: d.Version}
	for _, m := range d.Members {
		a, _ := netip.ParseAddr(m.Address) // validated
		r.Members = append(r.Members, Member{Name: m.Name, Address: a.Unmap()})
	}
	return r, nil
}

// Roster returns the membership this node runs.
func (m *Membership) Roster() Roster {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.roster
}

// SetRoster makes r the membership this node runs, if it is newer than the
// current one (versions never go back): quorum, preference and the rejoin
// loop use it from now on, the version is gossiped in this node's metadata
// and the document is broadcast to the others. The caller persists r first.
func (m *Membership) SetRoster(r Roster) bool {
	m.mu.Lock()
	if r.Version <= m.roster.Version {
		m.mu.Unlock()
		return false
	}
	m.joining = ""
	if len(r.Members) == len(m.roster.Members)+1 {
		for _, x := range r.Members {
			if !m.roster.Has(x.Name) && !m.seen[x.Name] {
				m.joining = x.Name
			}
		}
	}
	m.roster = Roster{Version: r.Version, Members: append([]Member(nil), r.Members...)}
	m.meta.Version = r.Version
	if m.cfg.Digest != nil {
		m.meta.ConfigDigest = m.cfg.Digest(m.roster)
	}
	m.mu.Unlock()
	m.broadcastRoster(r)
	select {
	case m.metaUpdates <- struct{}{}:
	default:
	}
	m.log.Info("running membership", "version", r.Version, "members", len(r.Members), "member", r.Has(m.cfg.Self))
	go m.rejoin()
	m.notify()
	return true
}

// Pull asks the nodes at addrs for their state (a memberlist push/pull,
// which carries the membership document): used when a peer advertises a
// newer version than this node runs.
func (m *Membership) Pull(names []string) {
	var addrs []string
	m.mu.Lock()
	for _, name := range names {
		if p, ok := m.peers[name]; ok {
			addrs = append(addrs, netip.AddrPortFrom(p.addr, p.port).String())
		}
	}
	m.mu.Unlock()
	if len(addrs) > 0 {
		_, _ = m.ml.Join(addrs)
	}
}

// behindLocked returns the addresses of the alive nodes whose metadata says
// they run an older membership version than this node, at most once per
// pushBehindInterval each: the rejoin loop push/pulls with them, which
// hands them this node's membership document (LocalState). Broadcasts and
// the rejoin of members that are down do not reach every such node: a
// joiner (it knows nobody) that answers a member's direct ping first makes
// itself known by the alive message its ack carries, so every member takes
// it for alive and never joins it, and the broadcast of the version that
// added it went out before it was up; it would learn the version only when
// a periodic push/pull happened to pick it (seconds, at random). m.mu held.
func (m *Membership) behindLocked(now time.Time) []string {
	if !m.cfg.Dynamic {
		return nil
	}
	for name := range m.pushedAt {
		if _, ok := m.peers[name]; !ok {
			delete(m.pushedAt, name)
		}
	}
	var addrs []string
	for name, p := range m.peers {
		if name == m.cfg.Self {
			continue // its own entry lags behind SetRoster until the metadata update
		}
		var meta Meta
		if json.Unmarshal(p.meta, &meta) != nil || meta.Version >= m.roster.Version {
			delete(m.pushedAt, name)
			continue
		}
		if at, ok := m.pushedAt[name]; ok && now.Sub(at) < pushBehindInterval {
			continue
		}
		m.pushedAt[name] = now
		addrs = append(addrs, netip.AddrPortFrom(p.addr, p.port).String())
	}
	return addrs
}

// pushBehindInterval spaces the push/pulls with a node that stays behind
// (an agent of a release without dynamic membership, during an upgrade):
// one TCP exchange every few seconds, not every rejoin interval.
const pushBehindInterval = 5 * time.Second

func (m *Membership) broadcastRoster(r Roster) {
	if !m.cfg.Dynamic {
		return
	}
	b, err := json.Marshal(r.Document())
	if err != nil {
		return
	}
	m.bcast.QueueBroadcast(rosterBroadcast(b))
}

// offer hands a document received from a peer to the owner of the state.
func (m *Membership) offer(buf []byte) {
	if !m.cfg.Dynamic || len(buf) == 0 || m.cfg.OnMembership == nil {
		return
	}
	var d agentv1.Membership
	if err := json.Unmarshal(buf, &d); err != nil {
		m.log.V(1).Info("ignoring a membership document that does not parse", "error", err.Error())
		return
	}
	r, err := RosterFrom(d)
	if err != nil {
		m.log.Info("ignoring an invalid membership document from a peer", "error", err.Error())
		return
	}
	if r.Version <= m.Roster().Version {
		return
	}
	m.cfg.OnMembership(r)
}

type rosterBroadcast []byte

func (b rosterBroadcast) Invalidates(o memberlist.Broadcast) bool { return true }
func (b rosterBroadcast) Message() []byte                         { return b }
func (b rosterBroadcast) Finished()                               {}

func (d *delegate) NotifyMsg(b []byte) {
	if len(b) > 0 && b[0] == legacyUserMessageTag {
		// A user message of an agent before user streams (an upgrade in progress): its sender
		// cannot be told, so it is not taken.
		(*Membership)(d).log.V(1).Info("ignoring a user message sent through memberlist by an older agent")
		return
	}
	(*Membership)(d).offer(b)
}

// legacyUserMessageTag opened the user messages older agents sent through memberlist.
const legacyUserMessageTag = 0xCA

func (d *delegate) GetBroadcasts(overhead, limit int) [][]byte {
	if d.bcast == nil {
		return nil
	}
	return d.bcast.GetBroadcasts(overhead, limit)
}

// LocalState is the membership document, exchanged on join and every
// push/pull interval: a node that missed a broadcast converges from it.
func (d *delegate) LocalState(join bool) []byte {
	if !d.cfg.Dynamic {
		return nil
	}
	b, _ := json.Marshal((*Membership)(d).Roster().Document())
	return b
}

func (d *delegate) MergeRemoteState(buf []byte, join bool) { (*Membership)(d).offer(buf) }
