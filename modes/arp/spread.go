package arp

import (
	"net/netip"
	"slices"
	"time"

	"github.com/go-logr/logr"

	"github.com/caplb/caplb/modes/dataplane"
)

// SpreadTable is the nftables table (ip and ip6) of the spread mode.
const SpreadTable = "caplb_spread"

// spreadRecount: connections are counted at most this often (a conntrack
// dump); /status and the gossip read the last count.
const spreadRecount = 500 * time.Millisecond

// spreadKernel is what the spread mode needs of the kernel; nftables and
// conntrack over netlink in production (spread_linux.go).
type spreadKernel interface {
	// install replaces the forwarding: new TCP connections to vips (of
	// s.Source's family) on s.Ports are dealt round-robin across
	// s.Backends, SNATed to s.Source when forwarded.
	install(vips []netip.Addr, s dataplane.Spread) error
	// remove deletes the forwarding; established connections keep their
	// NAT (conntrack) and drain.
	remove() error
	// backends reads the set new connections are dealt from back from the
	// kernel, in dealing order.
	backends() ([]netip.Addr, error)
	// count returns the live TCP connections to vips by the address they
	// were forwarded to (connections served here without forwarding count
	// under the VIP itself).
	count(vips []netip.Addr) (map[netip.Addr]int, error)
}

// spreader keeps the kernel's forwarding equal to the desired spread set,
// and tracks the members that left it until they serve no forwarded
// connection. Its caller (the Announcer) serialises calls.
type spreader struct {
	k   spreadKernel
	log logr.Logger
	now func() time.Time

	vips []netip.Addr
	// want is the set asked for; installed: the kernel has it.
	want      *dataplane.Spread
	installed bool
	// draining: members that left the set, and when.
	draining map[netip.Addr]time.Time
	last     *dataplane.SpreadStatus
	err      string
}

func newSpreader(k spreadKernel, log logr.Logger, now func() time.Time) *spreader {
	return &spreader{k: k, log: log, now: now, draining: map[netip.Addr]time.Time{}}
}

// set converges the kernel to d for vips (d nil: serve everything here).
// A failure is not the Sync's: the VIPs are still served, here; it shows
// in the status and is retried on the next set.
func (s *spreader) set(vips []netip.Addr, d *dataplane.Spread) {
	now := s.now()
	old := s.want
	if d.Equal(old) && s.installed == (d != nil) && slices.Equal(vips, s.vips) {
		return
	}
	if old != nil {
		for _, b := range old.Backends {
			if b != old.Source && (d == nil || !slices.Contains(d.Backends, b)) {
				if _, ok := s.draining[b]; !ok {
					s.draining[b] = now
				}
			}
		}
	}
	if d != nil {
		for _, b := range d.Backends {
			delete(s.draining, b)
		}
	}
	s.want, s.vips, s.last = d, slices.Clone(vips), nil
	var err error
	if d == nil {
		err = s.k.remove()
		s.installed = false
	} else {
		err = s.k.install(vips, *d)
		s.installed = err == nil
	}
	switch {
	case err != nil:
		if s.err != err.Error() {
			s.log.Error(err, "spreading connections failed; serving them on this node")
		}
		s.err = err.Error()
	case d != nil:
		s.err = ""
		s.log.Info("spreading new connections", "backends", addrStrings(d.Backends), "ports", d.Ports)
	default:
		s.err = ""
	}
}

// release forgets everything: the VIPs left this node, and with them every
// connection it forwarded.
func (s *spreader) release() {
	if s.want != nil || s.installed {
		if err := s.k.remove(); err != nil {
			s.log.Error(err, "removing the spread table failed")
		}
	}
	s.want, s.installed, s.vips, s.last, s.err = nil, false, nil, nil, ""
	clear(s.draining)
}

// status is the forwarding as the kernel has it, counted at most every
// spreadRecount; nil when nothing is spread nor draining. A draining member
// is dropped once a count taken after it left finds none of its
// connections.
func (s *spreader) status() *dataplane.SpreadStatus {
	if s.want == nil && len(s.draining) == 0 && s.err == "" {
		return nil
	}
	now := s.now()
	if s.last != nil && now.Sub(s.last.CountedAt) < spreadRecount {
		return s.last
	}
	st := &dataplane.SpreadStatus{CountedAt: now, Error: s.err}
	if s.want != nil {
		st.Ports, st.Source = s.want.Ports, s.want.Source
	}
	counts, err := s.k.count(s.vips)
	if err != nil {
		st.Error = "counting connections: " + err.Error()
	}
	if s.installed {
		bs, err := s.k.backends()
		if err != nil {
			st.Error = "reading the spread set: " + err.Error()
		}
		for _, b := range bs {
			st.Backends = append(st.Backends, dataplane.SpreadBackend{Address: b, Connections: counts[b]})
		}
	}
	for b, since := range s.draining {
		// s.last is dropped on every change of the set, so this count was
		// taken after b left.
		if err == nil && counts[b] == 0 && !now.Before(since) {
			delete(s.draining, b)
			s.log.Info("member drained: no forwarded connection left", "member", b.String())
			continue
		}
		st.Draining = append(st.Draining, dataplane.SpreadBackend{Address: b, Connections: counts[b], Since: since})
	}
	slices.SortFunc(st.Draining, func(x, y dataplane.SpreadBackend) int { return x.Address.Compare(y.Address) })
	s.last = st
	if s.want == nil && len(st.Draining) == 0 && st.Error == "" {
		return nil
	}
	return st
}

func addrStrings(as []netip.Addr) []string {
	out := make([]string, len(as))
	for i, a := range as {
		out[i] = a.String()
	}
	return out
}
