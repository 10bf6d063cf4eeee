//go:build linux

package wglab

import "github.com/caplb/caplb/e2e/lab"

// Network builds the lab's topology only — the public segment, the NAT router and the members'
// private segment, with the gateways' and members' namespaces (see Start) — and runs nothing:
// for a test whose gateways and members get everything they run from the management cluster.
func Network(l *lab.Lab, members int) (*Lab, error) {
	w := &Lab{L: l}
	return w, w.network(members)
}
