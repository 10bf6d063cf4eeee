package agent

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	agentv1 "github.com/caplb/caplb/api/agent/v1alpha1"

	"github.com/caplb/caplb/modes/dataplane"
	"github.com/caplb/caplb/modes/election"
)

// The ARP spread mode: the VIP holder deals new connections across every
// eligible member (the data plane forwards them). Who is in the set comes
// from the health the members gossip already (no probe of our own); a member
// that turns unhealthy, quiesces or is disabled stops being eligible and so
// gets no new connections from the holder's next step on. Its forwarded
// connections drain: the holder gossips, from its kernel, which members it
// forwards to and how many connections the ones that left still have, and a
// quiescing member reports itself quiesced only once it is out of that set
// with none left, or its drain period ran out.

// spreadMode: the ARP backend spreads connections.
func (r rules) spreadMode() bool {
	return r.cfg.Mode != agentv1.ModeBGP && r.cfg.ARP.LoadBalancing == agentv1.LoadBalancingSpread
}

// spreadSet is the forwarding the holder asks of the data plane: every
// member alive and eligible in v (this node when eligible is true), of this
// node's address family, in roster order. nil when nobody but this node
// would be in it: every connection is then served here, with no NAT.
func (r rules) spreadSet(v election.View, eligible bool) *dataplane.Spread {
	if !r.spreadMode() {
		return nil
	}
	self := r.selfAddress(v)
	if !self.IsValid() {
		return nil
	}
	var backends []netip.Addr
	for _, m := range v.Members {
		in := m.Alive && m.Meta.Eligible
		if m.Name == r.cfg.NodeName {
			in = eligible
		}
		addr := r.memberAddress(m)
		if !in || !addr.IsValid() || addr.Is4() != self.Is4() {
			continue
		}
		backends = append(backends, addr)
	}
	if len(backends) == 0 || (len(backends) == 1 && backends[0] == self) {
		return nil
	}
	return &dataplane.Spread{Ports: r.ports(), Source: self, Backends: backends}
}

// selfAddress is this node's address in v's roster (invalid when it is not
// in it).
func (r rules) selfAddress(v election.View) netip.Addr {
	for _, m := range v.Members {
		if m.Name == r.cfg.NodeName {
			return r.memberAddress(m)
		}
	}
	return netip.Addr{}
}

// ports are the TCP ports behind the VIPs.
func (r rules) ports() []uint16 {
	out := []uint16{uint16(r.cfg.Port)}
	for _, p := range r.cfg.ExtraPorts {
		out = append(out, uint16(p))
	}
	return out
}

// spreadMeta encodes the kernel's spread set and draining members (s) as
// roster indices of v, for the holder's gossip. Addresses outside the roster
// (a removed member draining) cannot be named by index and are left out: such
// a member reads a different membership and waits for its drain period.
func spreadMeta(v election.View, s *dataplane.SpreadStatus, addr func(election.MemberView) netip.Addr) (to, draining string) {
	if s == nil {
		return "", ""
	}
	index := map[netip.Addr]int{}
	for i, m := range v.Members {
		if a := addr(m); a.IsValid() {
			index[a] = i
		}
	}
	var t, d []string
	for _, b := range s.Backends {
		if i, ok := index[b.Address]; ok {
			t = append(t, strconv.Itoa(i))
		}
	}
	for _, b := range s.Draining {
		if i, ok := index[b.Address]; ok {
			d = append(d, fmt.Sprintf("%d:%d", i, b.Connections))
		}
	}
	return strings.Join(t, ","), strings.Join(d, ",")
}

// spreadDrained reports whether the holder in v forwards this node nothing
// any more: it does not list this node in its set nor among the members
// draining. known is false when that cannot be told from v (the holder runs
// another membership version, so its indices mean other members); the
// caller then waits for the drain period. With nobody else holding, nothing
// is forwarded here.
func (r rules) spreadDrained(v election.View) (drained, known bool) {
	self := -1
	for i, m := range v.Members {
		if m.Name == r.cfg.NodeName {
			self = i
		}
	}
	for _, m := range v.Members {
		if m.Name == r.cfg.NodeName || !m.Alive || !m.Meta.Holding {
			continue
		}
		if m.Meta.Version != v.Version || self < 0 {
			return false, false
		}
		idx := strconv.Itoa(self)
		for _, t := range strings.Split(m.Meta.SpreadTo, ",") {
			if t == idx {
				return false, true
			}
		}
		for _, d := range strings.Split(m.Meta.Draining, ",") {
			if i, _, ok := strings.Cut(d, ":"); ok && i == idx {
				return false, true
			}
		}
		return true, true
	}
	return true, true
}
