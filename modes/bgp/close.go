package bgp

import (
	"context"
	"errors"
	"time"

	api "github.com/osrg/gobgp/v3/api"
)

// Bounds on the shutdown path: Close must finish even when a peer is unreachable.
const (
	flushTimeout = time.Second
	stopTimeout  = 3 * time.Second
	// closeSettle is the longest Close keeps the VIPs after its withdrawal reached the peers, so
	// that packets the router forwarded just before its FIB changed are still accepted.
	closeSettle = 500 * time.Millisecond
)

// Close withdraws every VIP, waits (briefly) until the withdrawal is on the wire to every
// established peer, ends the sessions with a Cease NOTIFICATION (a peer drops all of this
// node's routes on it, even one that missed the UPDATE), and removes the VIPs and the dummy
// interface. It is idempotent; local cleanup does not depend on ctx.
func (s *Speaker) Close(ctx context.Context) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	if s.lingerTimer != nil {
		s.lingerTimer.Stop()
	}
	var errs []error
	withdrew := len(s.announced) > 0
	if withdrew {
		before := s.sentUpdates()
		for v := range s.announced {
			if err := s.withdraw(context.Background(), v); err != nil {
				errs = append(errs, err)
			}
		}
		s.waitFlushed(ctx, before)
	}
	// Keep the VIPs a moment longer if they were withdrawn just now, here or by the last
	// Sync (the agent withdraws before it closes): see closeSettle.
	var settleUntil time.Time
	for _, until := range s.lingering {
		if until.After(settleUntil) {
			settleUntil = until
		}
	}
	if withdrew {
		settleUntil = s.now().Add(s.linger)
	}
	settle := min(settleUntil.Sub(s.now()), closeSettle)
	s.metrics.announced.Set(0)
	s.mu.Unlock()

	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := s.srv.StopBgp(context.Background(), &api.StopBgpRequest{}); err != nil {
			s.log.Error(err, "stopping BGP")
		}
	}()
	select {
	case <-done:
	case <-time.After(stopTimeout):
		errs = append(errs, errors.New("stopping BGP timed out; peers will drop this node's routes when their hold timer expires"))
	}
	s.stopWatch()
	if s.stopBFD != nil {
		// Last: the router ended the session on our Cease, not on silence.
		s.stopBFD()
	}
	if settle > 0 {
		// Give the routers' FIBs a moment to follow before the VIPs stop being local.
		select {
		case <-time.After(settle):
		case <-ctx.Done():
		}
	}
	if err := s.addrs.Close(); err != nil {
		errs = append(errs, err)
	}
	s.mu.Lock()
	if err := s.closeFlowsLocked(); err != nil {
		errs = append(errs, err)
	}
	s.mu.Unlock()
	s.log.Info("BGP speaker stopped; VIPs withdrawn and removed from the node")
	return errors.Join(errs...)
}

// sentUpdates counts the UPDATEs written to each established session.
func (s *Speaker) sentUpdates() map[string]uint64 {
	out := map[string]uint64{}
	_ = s.srv.ListPeer(context.Background(), &api.ListPeerRequest{}, func(p *api.Peer) {
		st := p.GetState()
		if st.GetSessionState() != api.PeerState_ESTABLISHED {
			return
		}
		out[canonicalAddr(st.GetNeighborAddress())] = st.GetMessages().GetSent().GetUpdate()
	})
	return out
}

// waitFlushed polls until every session in before has written another UPDATE (the withdrawal)
// or went down, for at most flushTimeout.
func (s *Speaker) waitFlushed(ctx context.Context, before map[string]uint64) {
	deadline := time.Now().Add(flushTimeout)
	for len(before) > 0 && time.Now().Before(deadline) && ctx.Err() == nil {
		for addr, n := range s.sentUpdates() {
			if n > before[addr] {
				delete(before, addr)
			}
		}
		for addr := range before {
			if !s.tracker.established(addr) {
				delete(before, addr)
			}
		}
		if len(before) > 0 {
			time.Sleep(2 * time.Millisecond)
		}
	}
	if len(before) > 0 {
		s.log.Info("withdrawal not confirmed on the wire before shutdown; the Cease NOTIFICATION follows", "peers", len(before))
	}
}
