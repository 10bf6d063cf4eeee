package agent

import "net/netip"

// vipProber checks whether any host answers for the VIPs (the bootstrap
// membership's guard against two first nodes holding at once).
type vipProber interface {
	probe(vips []netip.Addr) (probeResult, error)
}

type probeResult struct {
	// answered: a host replied for a VIP or announced it.
	answered bool
	// competing: another host is probing for a VIP at the same time.
	competing bool
}
