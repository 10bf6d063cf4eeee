package dataplane

import (
	"net/netip"
	"time"
)

// Status is a data plane's own account of the node: one of its fields is set, by the kind of
// data plane that reports it.
type Status struct {
	// ARP is set by the ARP/NDP data plane (modes/arp).
	ARP *ARPStatus `json:"arp,omitempty"`
	// BGP is set by the BGP speaker (modes/bgp).
	BGP *BGPStatus `json:"bgp,omitempty"`
}

// ARPStatus is the ARP/NDP data plane's state: the interface and the VIPs held on it.
type ARPStatus struct {
	Interface  string       `json:"interface"`
	MAC        string       `json:"mac"`
	Held       []netip.Addr `json:"held"`
	Duplicates []Duplicate  `json:"duplicates,omitempty"`
	// Spread is the forwarding of spread mode as the kernel has it (nil: every connection is
	// served on this node).
	Spread *SpreadStatus `json:"spread,omitempty"`
}

// SpreadStatus is spread mode's forwarding on the VIP holder, read back from the kernel: the
// nftables map new connections are dealt from, and conntrack's count of the connections each
// member serves.
type SpreadStatus struct {
	Ports  []uint16   `json:"ports"`
	Source netip.Addr `json:"source"`
	// Backends are the members new connections go to, in dealing order.
	Backends []SpreadBackend `json:"backends"`
	// Draining are members that left the set and still serve connections forwarded before;
	// each stays listed until conntrack counts none, measured after it left.
	Draining []SpreadBackend `json:"draining,omitempty"`
	// CountedAt is when the connections were counted.
	CountedAt time.Time `json:"countedAt,omitzero"`
	// Error is the last failure to program or read the forwarding, "" when none.
	Error string `json:"error,omitempty"`
}

// SpreadBackend is one member of the spread set.
type SpreadBackend struct {
	Address netip.Addr `json:"address"`
	// Connections are the live TCP connections to the VIPs this node forwards to it (for this
	// node itself: serves), per conntrack.
	Connections int `json:"connections"`
	// Since: for a draining member, when it left the set.
	Since time.Time `json:"since,omitzero"`
}

// Duplicate is another MAC seen answering for a VIP this node holds.
type Duplicate struct {
	VIP       netip.Addr `json:"vip"`
	MAC       string     `json:"mac"`
	FirstSeen time.Time  `json:"firstSeen"`
	LastSeen  time.Time  `json:"lastSeen"`
	Packets   int        `json:"packets"`
}

// BGPStatus is the BGP speaker's state: its sessions and announced prefixes.
type BGPStatus struct {
	// RouterID and ASN are what the speaker presents to its peers.
	RouterID string `json:"routerID"`
	ASN      uint32 `json:"asn"`
	// Announced are the prefixes currently advertised (VIP/32, VIP/128).
	Announced []string `json:"announced"`
	// Peers are the sessions, in configuration order.
	Peers []PeerStatus `json:"peers"`
}

// PeerEstablished is PeerStatus.State for a session that is up: the router takes this node's
// routes (the agent reports how many are, for the manager).
const PeerEstablished = "established"

// PeerStatus is one BGP session.
type PeerStatus struct {
	Address string `json:"address"`
	ASN     uint32 `json:"asn"`
	// State is the BGP FSM state: idle, connect, active, opensent, openconfirm, established.
	State string `json:"state"`
	// Since is when the session entered State.
	Since time.Time `json:"since"`
	// LastError explains the latest failure (a NOTIFICATION, a connect error, an expired hold
	// timer), cleared when the session is established.
	LastError string `json:"lastError,omitempty"`
	// LastErrorTime is when LastError was seen.
	LastErrorTime *time.Time `json:"lastErrorTime,omitempty"`
	// BFD is the BFD session's state (down, init, up), "" without BFD.
	BFD string `json:"bfd,omitempty"`
}
