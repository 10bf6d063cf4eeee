package agent

import (
	agentv1 "github.com/caplb/caplb/api/agent/v1alpha1"
)

// bgpBusyWindow: a BGP member that withdrew for a quiesce is within quiesce.drain +
// quiesce.busyDrain of its withdrawal. With flow sharing the other members send its connections
// back to it, so they do not break at the withdrawal; what breaks them is the machine going
// away once the member reports quiesced (KCP removes its etcd member, then the machine). So
// after the drain it reports quiesced only once no connection here still carries requests (the
// API server's GOAWAY moved them) or busyDrain ran out — the ARP holder's busy drain, on the
// withdrawn member.
func (r rules) bgpBusyWindow(st loopState, in inputs) bool {
	bd := r.cfg.Quiesce.BusyDrain.Duration
	return r.cfg.Mode == agentv1.ModeBGP && bd > 0 && st.quiescing && !st.holding && !st.releasedAt.IsZero() &&
		in.now.Sub(st.releasedAt) < r.cfg.Quiesce.Drain.Duration+bd
}

// bgpBusyHere is how many connections keep a withdrawn BGP member from reporting quiesced.
func (r rules) bgpBusyHere(st loopState, in inputs) int {
	if !r.bgpBusyWindow(st, in) || in.busy == nil || in.now.Sub(st.releasedAt) < r.cfg.Quiesce.Drain.Duration {
		return 0
	}
	return *in.busy
}
