// Package arp is the layer-2 data plane of the agent: it puts the VIPs on the
// node's interface with netlink and makes the segment send their traffic here
// with gratuitous ARP (IPv4, mdlayher/arp) and unsolicited neighbour
// advertisements (IPv6, mdlayher/ndp).
//
// On takeover it announces at once, then in a short burst (for neighbours
// that missed the first packet), then with a slow refresh. While it holds a
// VIP it also asks "who has VIP?" now and then and listens to every ARP/NDP
// packet on the interface: another MAC answering for a VIP it holds is a
// duplicate owner (a node whose agent was SIGKILLed and left the address
// behind, a partition straggler, a manual address). Duplicates are counted,
// logged, shown in status and answered with a fresh announcement, so the
// legitimate owner wins the neighbours' caches back; the election remains the
// authority on who should own.
//
// Sync is declarative (like MetalLB's speaker): it gets the whole desired
// state and converges to it.
package arp

import (
	"time"
)

// AddressLabel is the suffix of the IPv4 address label the data plane puts on
// the VIPs it adds ("eth0:caplb"), so that `ip addr` shows whose they are.
const AddressLabel = "caplb"

// Config configures the data plane.
type Config struct {
	// Interface carries the VIPs.
	Interface string
	// BurstCount announcements follow the first one, BurstInterval apart.
	BurstCount    int
	BurstInterval time.Duration
	// RefreshInterval between announcements after the burst.
	RefreshInterval time.Duration
	// ProbeInterval between duplicate-owner probes while holding.
	ProbeInterval time.Duration
}
