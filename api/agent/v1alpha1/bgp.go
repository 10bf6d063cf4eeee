package v1alpha1

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Defaults. BGP timers are whole seconds on the wire; the hold time actually used is the lower
// of ours and the peer's (RFC 4271 §4.2), so a router configured with 3 s wins over our 9 s.
const (
	// DefaultHoldTime bounds how long a silently dead node (power loss, cut link, frozen agent)
	// keeps attracting traffic. 9 s with 3 s keepalives is the common "fast" datacenter setting;
	// gobgp's own default is 90 s.
	DefaultHoldTime = 9 * time.Second
	// DefaultConnectRetry is how often a node re-dials a peer that is down. gobgp defaults to
	// 120 s, far too slow for a control-plane endpoint after a router restart.
	DefaultConnectRetry = 5 * time.Second
	// DefaultAddressLinger keeps the VIP on the node for a moment after its routes are
	// withdrawn, so that packets already routed here (before the router's FIB changed) are
	// still accepted rather than dropped.
	DefaultAddressLinger = 3 * time.Second
	// DefaultInterface is the dummy interface the VIPs are put on.
	DefaultInterface = "caplb0"
	// minHoldTime is the smallest non-zero hold time RFC 4271 allows.
	minHoldTime = 3 * time.Second
)

// BGPConfig is the `bgp:` section of the agent configuration (mode: bgp). The manager renders it
// from a LoadBalancer's spec.backend.bgp and the agent parses it, both with this type.
type BGPConfig struct {
	// ASN is this node's autonomous system number (1..4294967295). Nodes usually share one
	// private ASN (eBGP to the top-of-rack router) or use the fabric's ASN (iBGP to route
	// reflectors).
	ASN uint32 `json:"asn"`
	// RouterID is the BGP identifier, an IPv4 address unique in the fabric. Default: the node's
	// source address towards the first IPv4 peer.
	RouterID string `json:"routerID,omitempty"`
	// ListenPort makes the node accept incoming BGP sessions on this port. Default 0: do not
	// listen. The node always dials its peers, so listening is only needed for routers
	// configured as active-only; not listening avoids clashing with another BGP daemon on the
	// node (a CNI such as Calico's BIRD owns port 179 on many clusters).
	ListenPort uint16 `json:"listenPort,omitempty"`
	// Peers are the routers to announce the VIPs to. IPv4 VIPs go to IPv4 peers and IPv6 VIPs to
	// IPv6 peers (the next hop is this node's address on that session).
	Peers []BGPPeer `json:"peers"`
	// Communities are standard communities ("65000:100", or "no-export", "no-advertise",
	// "no-export-subconfed", "no-peer", "blackhole") attached to every announced VIP.
	Communities []string `json:"communities,omitempty"`
	// LargeCommunities are RFC 8092 communities ("65000:1:2") attached to every announced VIP.
	LargeCommunities []string `json:"largeCommunities,omitempty"`
	// Interface is the dummy interface the VIPs are put on so the node accepts their traffic.
	// Default caplb0. It is created and deleted by the agent: do not point it at a real NIC.
	Interface string `json:"interface,omitempty"`
	// AddressLinger is how long a VIP stays on the node after its routes are withdrawn.
	// Default 3s.
	AddressLinger *metav1.Duration `json:"addressLinger,omitempty"`
	// FlowSharing: members tell each other (over the gossip port, with the gossip key) which
	// TCP connections they terminate, and a member the routers send another member's
	// connection to (ECMP rehashes when a member joins or leaves) sends its packets on to that
	// member instead of resetting it. The members must share an L2 segment (the packets go to
	// the owner's node address as next hop). Default true; false restores the reset.
	FlowSharing *bool `json:"flowSharing,omitempty"`
}

// FlowSharingOn reports whether flow sharing is on (the default).
func (c *BGPConfig) FlowSharingOn() bool { return c.FlowSharing == nil || *c.FlowSharing }

// BGPPeer is one BGP neighbour.
type BGPPeer struct {
	// Address is the peer's IP address.
	Address string `json:"address"`
	// ASN is the peer's AS number; equal to bgp.asn makes an iBGP session.
	ASN uint32 `json:"asn"`
	// Port is the peer's TCP port. Default 179.
	Port uint16 `json:"port,omitempty"`
	// SourceAddress pins the local address of the session (e.g. a loopback for multihop).
	// Default: chosen by the kernel's routing table.
	SourceAddress string `json:"sourceAddress,omitempty"`
	// PasswordFile is a file holding the RFC 2385 TCP-MD5 password (trailing newline ignored).
	// It must not be readable by group or others (mode 0600 or 0400).
	PasswordFile string `json:"passwordFile,omitempty"`
	// EBGPMultihop is the TTL for eBGP sessions to a peer that is not directly connected.
	// Default 0: TTL 1, directly connected.
	EBGPMultihop uint8 `json:"ebgpMultihop,omitempty"`
	// HoldTime is the proposed hold time: 0 keeps the default (9s), otherwise at least 3s,
	// whole seconds.
	HoldTime *metav1.Duration `json:"holdTime,omitempty"`
	// KeepaliveTime is the keepalive interval. Default: a third of the hold time.
	KeepaliveTime *metav1.Duration `json:"keepaliveTime,omitempty"`
	// ConnectRetry is the interval between connection attempts to a peer that is down
	// (randomised up to twice as long). Default 5s.
	ConnectRetry *metav1.Duration `json:"connectRetry,omitempty"`
	// BFD runs single-hop BFD to the peer (IPv4). Off unless set.
	BFD *BFDConfig `json:"bfd,omitempty"`
}

// Validate checks the section with no I/O (the password files are checked by the speaker when it starts). Every error
// names the offending field under `bgp.` and how to fix it.
func (c *BGPConfig) Validate() error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if c.ASN == 0 {
		add("bgp.asn: required, this node's AS number (1-4294967295, e.g. 64512 for a private ASN)")
	}
	if c.RouterID != "" {
		if a, err := netip.ParseAddr(c.RouterID); err != nil || !a.Is4() {
			add("bgp.routerID: %q is not an IPv4 address; the BGP identifier is a dotted quad such as 10.0.0.11", c.RouterID)
		}
	}
	if len(c.Peers) == 0 {
		add("bgp.peers: at least one peer is required (address and asn of the router to announce the VIP to)")
	}
	seen := map[netip.Addr]int{}
	for i, p := range c.Peers {
		f := fmt.Sprintf("bgp.peers[%d]", i)
		a, err := netip.ParseAddr(p.Address)
		if err != nil || a.Zone() != "" {
			add("%s.address: %q is not an IP address (no host names or zones)", f, p.Address)
		} else {
			a = a.Unmap()
			if j, dup := seen[a]; dup {
				add("%s.address: %s is already bgp.peers[%d]; list each peer once", f, a, j)
			}
			seen[a] = i
		}
		if p.ASN == 0 {
			add("%s.asn: required, the peer's AS number", f)
		}
		if p.SourceAddress != "" {
			s, err := netip.ParseAddr(p.SourceAddress)
			if err != nil {
				add("%s.sourceAddress: %q is not an IP address", f, p.SourceAddress)
			} else if a.IsValid() && s.Unmap().Is4() != a.Is4() {
				add("%s.sourceAddress: %s and the peer address %s are of different families", f, s, a)
			}
		}
		if p.EBGPMultihop != 0 && p.ASN == c.ASN {
			add("%s.ebgpMultihop: only applies to eBGP; this peer has the same ASN as bgp.asn (iBGP), remove the field", f)
		}
		hold := DurationOr(p.HoldTime, DefaultHoldTime)
		if hold != hold.Truncate(time.Second) {
			add("%s.holdTime: %s is not a whole number of seconds (BGP timers are whole seconds)", f, hold)
		} else if hold < minHoldTime {
			add("%s.holdTime: %s is below the 3s minimum of RFC 4271; use 3s or more", f, hold)
		}
		if p.KeepaliveTime != nil {
			k := p.KeepaliveTime.Duration
			switch {
			case k != k.Truncate(time.Second) || k < time.Second:
				add("%s.keepaliveTime: %s must be a whole number of seconds, at least 1s", f, k)
			case k >= hold:
				add("%s.keepaliveTime: %s must be shorter than the hold time %s (a third of it is usual)", f, k, hold)
			}
		}
		if r := DurationOr(p.ConnectRetry, DefaultConnectRetry); r < time.Second || r != r.Truncate(time.Second) {
			add("%s.connectRetry: %s must be a whole number of seconds, at least 1s", f, r)
		}
		if p.BFD != nil {
			errs = append(errs, p.BFD.validate(f+".bfd", a)...)
		}
	}
	for i, s := range c.Communities {
		if _, err := ParseCommunity(s); err != nil {
			add("bgp.communities[%d]: %v", i, err)
		}
	}
	for i, s := range c.LargeCommunities {
		if _, err := ParseLargeCommunity(s); err != nil {
			add("bgp.largeCommunities[%d]: %v", i, err)
		}
	}
	if c.Interface != "" && (len(c.Interface) > 15 || strings.ContainsAny(c.Interface, "/ \t\n:")) {
		add("bgp.interface: %q is not a valid interface name (at most 15 characters, no '/', ':' or spaces)", c.Interface)
	}
	if c.AddressLinger != nil && c.AddressLinger.Duration < 0 {
		add("bgp.addressLinger: %s is negative; use 0 to remove the VIP as soon as it is withdrawn", c.AddressLinger.Duration)
	}
	return errors.Join(errs...)
}

// ValidateVIPs checks, with no I/O, that every VIP has a peer of its address family: IPv4 VIPs
// are announced to IPv4 peers and IPv6 VIPs to IPv6 peers. The agent calls it with its vips.
func (c *BGPConfig) ValidateVIPs(vips []netip.Addr) error {
	has := map[bool]bool{}
	for _, p := range c.Peers {
		if a, err := netip.ParseAddr(p.Address); err == nil {
			has[a.Unmap().Is4()] = true
		}
	}
	var errs []error
	for _, v := range vips {
		v = v.Unmap()
		if !has[v.Is4()] {
			fam := "IPv4"
			if v.Is6() {
				fam = "IPv6"
			}
			errs = append(errs, fmt.Errorf("bgp.peers: VIP %s needs an %s peer (the next hop is this node's address on the session); add one", v, fam))
		}
	}
	return errors.Join(errs...)
}

// DurationOr returns d, or def when d is unset or zero.
func DurationOr(d *metav1.Duration, def time.Duration) time.Duration {
	if d == nil || d.Duration == 0 {
		return def
	}
	return d.Duration
}

// Well-known communities (RFC 1997, RFC 3765, RFC 7999).
var wellKnownCommunities = map[string]uint32{
	"no-export":           0xFFFFFF01,
	"no-advertise":        0xFFFFFF02,
	"no-export-subconfed": 0xFFFFFF03,
	"no-peer":             0xFFFFFF04,
	"blackhole":           0xFFFF029A,
}

// ParseCommunity parses a standard community (ASN:VALUE or a well-known name).
func ParseCommunity(s string) (uint32, error) {
	if v, ok := wellKnownCommunities[strings.ToLower(s)]; ok {
		return v, nil
	}
	hi, lo, ok := strings.Cut(s, ":")
	if !ok {
		return 0, fmt.Errorf("%q is not a community; write ASN:VALUE (e.g. 65000:100) or a well-known name such as no-export", s)
	}
	a, err1 := strconv.ParseUint(hi, 10, 16)
	b, err2 := strconv.ParseUint(lo, 10, 16)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("%q is not a community; both halves of ASN:VALUE must be 0-65535 (use largeCommunities for 4-byte ASNs)", s)
	}
	return uint32(a)<<16 | uint32(b), nil
}

// LargeCommunity is an RFC 8092 community: global administrator (ASN) and two local parts.
type LargeCommunity struct{ ASN, Local1, Local2 uint32 }

// ParseLargeCommunity parses ASN:LOCAL1:LOCAL2.
func ParseLargeCommunity(s string) (LargeCommunity, error) {
	parts := strings.Split(s, ":")
	if len(parts) != 3 {
		return LargeCommunity{}, fmt.Errorf("%q is not a large community; write ASN:LOCAL1:LOCAL2 (e.g. 4200000000:1:2)", s)
	}
	var v [3]uint32
	for i, p := range parts {
		n, err := strconv.ParseUint(p, 10, 32)
		if err != nil {
			return LargeCommunity{}, fmt.Errorf("%q is not a large community; each part must be 0-4294967295", s)
		}
		v[i] = uint32(n)
	}
	return LargeCommunity{v[0], v[1], v[2]}, nil
}
