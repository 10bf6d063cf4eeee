package bgp

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/caplb/caplb/modes/dataplane"
	"github.com/caplb/caplb/modes/flows"
)

// Flow sharing (dataplane.FlowSharer): the agent exchanges the members' connection lists; the
// speaker lists this node's and programs the kernel to send on the packets of the others'.

// flowLingerRecheck: how often a withdrawn VIP that still has connections is looked at again.
const flowLingerRecheck = time.Second

// flowTable is the kernel's forwarding of other members' flows (flows.Forwarder).
type flowTable interface {
	Set(owners map[flows.Flow]netip.Addr) error
	SetVIPs(vips []netip.Addr) error
	SetPeers(peers []netip.Addr) error
	Forwarded() uint64
	Held() uint64
	HoldFull() uint64
	CopiesLimited() uint64
	Close() error
}

// flowKernel is how the speaker reaches the kernel for flow sharing; a field, so that unit tests
// run without root.
type flowKernel struct {
	list         func(vips []netip.Addr, ports []uint16) (flows.Listing, error)
	newForwarder func(cfg flows.ForwarderConfig) (flowTable, error)
	// removeStale deletes the tables a killed earlier run left.
	removeStale func() error
	// gateway is the router the node reaches addr through; invalid when addr is on-link.
	gateway func(addr netip.Addr) (netip.Addr, error)
	// sampleBusy counts the connections to vips that carry requests (flows.SampleBusy).
	sampleBusy func(b *flows.BusyTracker, now time.Time, vips []netip.Addr) (int, error)
	// reset aborts the connections to vip, each once it answered its request (flows.ResetConnections).
	reset func(vip netip.Addr, patience time.Duration) (int, error)
}

var (
	_ dataplane.FlowSharer = &Speaker{}
	_ flowTable            = &flows.Forwarder{}
)

func kernelFlows() flowKernel {
	return flowKernel{
		list:         flows.List,
		newForwarder: func(cfg flows.ForwarderConfig) (flowTable, error) { return flows.NewForwarder(cfg) },
		removeStale:  flows.RemoveStale,
		gateway:      gatewayTo,
		sampleBusy:   flows.SampleBusy,
		reset:        flows.ResetConnections,
	}
}

// heldLocked lists the VIPs on the node: announced and lingering. Called with s.mu held.
func (s *Speaker) heldLocked() []netip.Addr {
	out := make([]netip.Addr, 0, len(s.announced)+len(s.lingering))
	for v := range s.announced {
		out = append(out, v)
	}
	for v := range s.lingering {
		if !s.announced[v] {
			out = append(out, v)
		}
	}
	return out
}

// LocalFlows lists the TCP connections, on any port, to the VIPs this node holds (but withdrawn
// ones past their cap: the others stop sending their packets here before the VIP goes).
func (s *Speaker) LocalFlows() ([]flows.Flow, error) {
	s.mu.Lock()
	now := s.now()
	vips := slices.DeleteFunc(s.heldLocked(), func(v netip.Addr) bool { return s.pastFlowCapLocked(v, now) })
	s.countForwardedLocked()
	s.mu.Unlock()
	if len(vips) == 0 {
		return nil, nil
	}
	l, err := s.flowKernel.list(vips, nil)
	if err != nil {
		return nil, fmt.Errorf("listing connections to the VIPs: %w", err)
	}
	s.noteCut(l.Cut)
	return l.Flows, nil
}

// noteCut counts the connections left out of this node's list (flows.PerClient, flows.MaxFlows):
// the others reset them if the routers move them; said when the count of them changes.
func (s *Speaker) noteCut(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n > 0 {
		s.metrics.flowsCut.Add(float64(n))
	}
	if n != s.flowsCut {
		s.log.Info("flow sharing: connections left out of this node's list (the oldest are kept, at most per client address and in all); the routers' rehashes reset those",
			"left out", n, "per client address", flows.PerClient, "in all", flows.MaxFlows)
		s.flowsCut = n
	}
}

// SetForeignFlows programs the forwarding of other members' flows; the kernel tables are created
// on the first non-empty set and removed by Close.
func (s *Speaker) SetForeignFlows(owners map[flows.Flow]netip.Addr, peers []netip.Addr) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errors.New("bgp speaker is closed")
	}
	if s.fwd == nil && len(owners) == 0 && len(peers) == 0 {
		return nil
	}
	if err := s.ensureForwarderLocked(); err != nil {
		return err
	}
	owners, offLink := s.onLinkOwnersLocked(owners)
	onLink := slices.DeleteFunc(slices.Clone(peers), func(p netip.Addr) bool { return s.offLinkLocked(p) != nil })
	err := errors.Join(offLink, s.fwd.Set(owners), s.fwd.SetPeers(onLink))
	s.metrics.foreignFlows.Set(float64(len(owners)))
	s.countForwardedLocked()
	return err
}

// onLinkOwnersLocked drops the flows of owners the node reaches through a router: the packets
// keep the VIP as destination, so the router would send them back by ECMP rather than to the
// owner. Reported once per owner (members must share an L2 segment for flow sharing).
func (s *Speaker) onLinkOwnersLocked(owners map[flows.Flow]netip.Addr) (map[flows.Flow]netip.Addr, error) {
	verdict := map[netip.Addr]error{}
	var errs []error
	out := make(map[flows.Flow]netip.Addr, len(owners))
	for fl, owner := range owners {
		err, seen := verdict[owner]
		if !seen {
			err = s.offLinkLocked(owner)
			verdict[owner] = err
			if err != nil && !s.offLinkLogged[owner] {
				errs = append(errs, err)
				s.offLinkLogged[owner] = true
			}
		}
		if err == nil {
			out[fl] = owner
		}
	}
	return out, errors.Join(errs...)
}

// offLinkLocked: nil when member addr is on this node's segment, else why not.
func (s *Speaker) offLinkLocked(addr netip.Addr) error {
	gw, err := s.flowKernel.gateway(addr)
	switch {
	case err != nil:
		return fmt.Errorf("bgp.flowSharing: no route to member %s: %w", addr, err)
	case gw.IsValid():
		return fmt.Errorf("bgp.flowSharing: member %s is reached through router %s, not on this node's segment; its connections are not forwarded (flow sharing needs the members on one L2 segment)", addr, gw)
	}
	return nil
}

// ensureForwarderLocked creates the kernel tables, holding the VIPs on the node.
func (s *Speaker) ensureForwarderLocked() error {
	if s.fwd != nil {
		return nil
	}
	fwd, err := s.flowKernel.newForwarder(flows.ForwarderConfig{Ports: s.servedPorts})
	if err != nil {
		return fmt.Errorf("bgp.flowSharing: %w", err)
	}
	if err := fwd.SetVIPs(s.heldLocked()); err != nil {
		_ = fwd.Close()
		return fmt.Errorf("bgp.flowSharing: %w", err)
	}
	s.fwd = fwd
	return nil
}

// syncFlowVIPsLocked keeps the forwarding to the VIPs on the node (flow sharing on): connections
// to them that nobody here knows are held for their owner's list from the first VIP on.
func (s *Speaker) syncFlowVIPsLocked(held []netip.Addr) {
	if !s.keepWhileFlows || (s.fwd == nil && len(held) == 0) {
		return
	}
	err := s.ensureForwarderLocked()
	if err == nil {
		err = s.fwd.SetVIPs(held)
	}
	switch {
	case err != nil && err.Error() != s.flowVIPErr:
		s.log.Error(err, "flow sharing: the VIPs' forwarding is not in place; connections the routers move here are reset")
		s.flowVIPErr = err.Error()
	case err == nil && s.flowVIPErr != "":
		s.log.Info("flow sharing: the VIPs' forwarding is in place again")
		s.flowVIPErr = ""
	}
}

// flowCountInterval: the flow-sharing metrics are brought up to the kernel's counters at most
// this often. Reading them is eight nftables rule dumps; on every list (10 a second) and every
// forwarding change it was an eighth of a BGP agent's CPU in the real-control-plane lab.
const flowCountInterval = 500 * time.Millisecond

// countForwardedLocked brings the flow-sharing metrics up to the kernel's counters, unless it did
// less than flowCountInterval ago.
func (s *Speaker) countForwardedLocked() {
	if s.fwd == nil {
		return
	}
	if now := s.now(); now.Sub(s.countedAt) >= flowCountInterval {
		s.countedAt = now
		s.readCountersLocked()
	}
}

// readCountersLocked adds what the kernel's counters gained since the last read to the metrics.
func (s *Speaker) readCountersLocked() {
	if n := s.fwd.Forwarded(); n > s.forwarded {
		s.metrics.flowPackets.Add(float64(n - s.forwarded))
		s.forwarded = n
	}
	if n := s.fwd.Held(); n > s.held {
		s.metrics.flowHeld.Add(float64(n - s.held))
		s.held = n
	}
	if n := s.fwd.HoldFull(); n > s.holdFull {
		s.metrics.flowHoldFull.Add(float64(n - s.holdFull))
		s.holdFull = n
	}
	if n := s.fwd.CopiesLimited(); n > s.copiesLimited {
		s.metrics.flowCopiesLimited.Add(float64(n - s.copiesLimited))
		s.copiesLimited = n
	}
}

// flowLetGo: after its cap a withdrawn VIP is no longer listed (the others drop its connections'
// entries with this node's next list) and stays this much longer, so that no packet sent on
// finds it gone: it would be routed back to the router, and by ECMP to a member that sends it
// here again.
const flowLetGo = 500 * time.Millisecond

// keepForFlowsLocked is until when withdrawn VIP v stays for its connections (flow sharing): while
// they are open, up to flowLingerCap after the withdrawal, then flowLetGo more; a time not after
// now lets it go.
func (s *Speaker) keepForFlowsLocked(v netip.Addr, now time.Time) time.Time {
	if !s.keepWhileFlows {
		return time.Time{}
	}
	if at, ok := s.withdrawnAt[v]; ok && s.flowLingerCap > 0 {
		capAt := at.Add(s.flowLingerCap)
		switch {
		case !now.Before(capAt.Add(flowLetGo)):
			return time.Time{}
		case !now.Before(capAt):
			s.resetAtCapLocked(v)
			return capAt.Add(flowLetGo)
		}
		if !s.hasFlowsLocked(v) {
			return time.Time{}
		}
		return minTime(now.Add(flowLingerRecheck), capAt)
	}
	if !s.hasFlowsLocked(v) {
		return time.Time{}
	}
	return now.Add(flowLingerRecheck)
}

// resetPatience bounds how long the reset at the cap waits for a busy connection's answer.
const resetPatience = 300 * time.Millisecond

// resetAtCapLocked resets, once, the connections still open to withdrawn VIP v at its cap: the
// client learns at once (a GET is retried, a watch reopens) rather than after the others held
// its segments for their owner (flows.HoldUnknown), as an ARP holder's release does.
func (s *Speaker) resetAtCapLocked(v netip.Addr) {
	if s.capReset[v] {
		return
	}
	s.capReset[v] = true
	n, err := s.flowKernel.reset(v, resetPatience)
	if err != nil {
		s.log.Error(err, "resetting the connections to a withdrawn VIP", "vip", v)
	}
	if n > 0 {
		s.log.Info("reset the connections still open to a withdrawn VIP at the end of its drain", "vip", v, "connections", n)
	}
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// pastFlowCapLocked: withdrawn VIP v is past its cap: its connections are no longer listed.
func (s *Speaker) pastFlowCapLocked(v netip.Addr, now time.Time) bool {
	at, ok := s.withdrawnAt[v]
	return ok && !s.announced[v] && s.flowLingerCap > 0 && !now.Before(at.Add(s.flowLingerCap))
}

// hasFlowsLocked: connections to v are still open here.
func (s *Speaker) hasFlowsLocked(v netip.Addr) bool {
	l, err := s.flowKernel.list([]netip.Addr{v}, nil)
	if err != nil {
		s.log.Error(err, "listing connections to a withdrawn VIP; keeping it a moment longer", "vip", v)
		return true
	}
	return len(l.Flows) > 0
}

// closeFlowsLocked removes the forwarding tables.
func (s *Speaker) closeFlowsLocked() error {
	if s.fwd == nil {
		return nil
	}
	// What the tables counted since the last read; the next tables count from zero.
	s.readCountersLocked()
	s.forwarded, s.held, s.holdFull, s.copiesLimited = 0, 0, 0, 0
	err := s.fwd.Close()
	s.fwd = nil
	s.metrics.foreignFlows.Set(0)
	return err
}
