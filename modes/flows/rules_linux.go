//go:build linux

package flows

import (
	"net/netip"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// Registers: reg1 is the 16-byte NFT_REG_1; the key of a concatenation is loaded field by field
// from the first 32-bit register, each field at the next 32-bit boundary: IPv4 saddr 8, sport 9,
// daddr 10, dport 11; IPv6 saddr 8-11, sport 12, daddr 13-16, dport 17.
const (
	reg1    = unix.NFT_REG_1
	regKey  = unix.NFT_REG32_00
	synFlag = 0x02
)

// loadKey loads the segment's flow key into the registers from regKey.
func (fm family) loadKey() []expr.Any {
	saddr := uint32(regKey)
	sport := saddr + fm.alen/4
	daddr := sport + 1
	dport := daddr + fm.alen/4
	return []expr.Any{
		&expr.Payload{DestRegister: saddr, Base: expr.PayloadBaseNetworkHeader, Offset: fm.saddrOff, Len: fm.alen},
		&expr.Payload{DestRegister: sport, Base: expr.PayloadBaseTransportHeader, Offset: 0, Len: 2},
		&expr.Payload{DestRegister: daddr, Base: expr.PayloadBaseNetworkHeader, Offset: fm.daddrOff, Len: fm.alen},
		&expr.Payload{DestRegister: dport, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
	}
}

// rules is the netlink form of (ip6 likewise, with its sets, ip6 addresses and hoplimit):
//
//	table ip caplb_flows {
//	  map owners4 { type ipv4_addr . inet_service . ipv4_addr . inet_service : ipv4_addr; }
//	  set vips4 { type ipv4_addr; }
//	  set held4 { type ...; size 131072; flags dynamic,timeout; timeout 1s; }
//	  set seen4 { type ...; size 131072; flags dynamic,timeout; timeout 10s; }
//	  set ports { type inet_service; elements = { 6443 } }
//	  chain pre { type filter hook prerouting priority -300; policy accept;
//	    tcp flags & syn == 0 ip daddr @vips4 jump vip
//	  }
//	  chain vip {
//	    socket wildcard 0 return
//	    socket wildcard 1 goto unknown
//	    socket transparent 0 return
//	    socket transparent 1 return
//	    goto unknown
//	  }
//	  chain unknown {
//	    ip ttl 255 drop
//	    ip saddr . tcp sport . ip daddr . tcp dport @owners4 goto toowner
//	    tcp dport != @ports return                       # only with served ports
//	    ip saddr . tcp sport . ip daddr . tcp dport @held4 goto spray
//	    ip saddr . tcp sport . ip daddr . tcp dport @seen4 return
//	    add @held4 { ip saddr . tcp sport . ip daddr . tcp dport } add @seen4 { ... } goto spray
//	    counter goto spray                              # the sets are full
//	  }
//	  chain toowner {
//	    ip ttl set 0 counter dup to ip saddr . tcp sport . ip daddr . tcp dport map @owners4
//	    drop
//	  }
//	  chain spray {   # SetPeers
//	    limit rate over 2000/second burst 2000 packets goto toomany
//	    ip ttl set 0 counter dup to <peer 1> dup to <peer 2> ...
//	    drop
//	  }
//	  chain toomany { counter drop }
//	}
//
// Priority -300 (raw) is before conntrack: a segment sent on leaves no state here, and the copy
// dup makes is untracked. A SYN is never looked at: a new connection, even one that reuses a
// listed 4-tuple, is this member's.
//
// Any local socket for the 4-tuple keeps the segment here, whatever the lists say: an
// established socket (wildcard 0), and a socket that is not a full one (wildcard does not match,
// transparent does), a request socket or a timewait one — TIME_WAIT, and an orphaned FIN_WAIT2,
// which List shares: sent on, its segments could come back from a member whose stale list names
// this one. A listener on 0.0.0.0 or [::] (wildcard 1) does not: nobody here has the connection.
// (A server listening on the VIP itself also reads as wildcard 0: its members' flows are then
// never sent on.)
//
// A segment a member sent on (forwarded, or a held segment's copy) is marked (see mark) and is
// never sent on again: two members whose lists name each other (stale lists crossing) would
// otherwise pass it back and forth at wire speed until a list changed, dup's TTL decrement
// wrapping at 0. With no socket here it is dropped, silently: its owner answers, or the client
// retransmits. dup routes the copy with the owner as next hop (FLOWI_FLAG_KNOWN_NH), the
// destination still the VIP; the original is dropped.
//
// A connection nobody here has and no list names yet — a member started it less than one sharing
// interval before the router rehashed it here — is held: its segments are dropped, not reset,
// for HoldUnknown from the first one, so that the owner's next list names it and the client's
// retransmission is sent on. Still unknown after that (its owner died), the stack resets it.
// Meanwhile each of its segments is copied, marked, to every peer (at most the configured rate:
// spoofed 4-tuples must not make every member a multiplier): the owner takes it at once. Only
// segments to the served ports are held; with held or seen full (spoofed 4-tuples can fill them),
// a segment is still held rather than reset, and counted.
func (fm family) rules(t *nftables.Table, c chains, s sets, byPort bool) []*nftables.Rule {
	lookup := func(set *nftables.Set, dreg bool) *expr.Lookup {
		return &expr.Lookup{SourceRegister: regKey, SetName: set.Name, SetID: set.ID, DestRegister: reg1, IsDestRegSet: dreg}
	}
	isTCP := []expr.Any{
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: reg1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: []byte{unix.IPPROTO_TCP}},
	}
	withKey := func(e ...expr.Any) []expr.Any {
		// The protocol is matched again in each chain so that nft lists "tcp sport", not "th sport".
		return append(append(append([]expr.Any{}, isTCP...), fm.loadKey()...), e...)
	}
	socket := func(key expr.SocketKey, v byte, verdict expr.Any) []expr.Any {
		return []expr.Any{&expr.Socket{Key: key, Register: reg1}, &expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: []byte{v}}, verdict}
	}
	ret := &expr.Verdict{Kind: expr.VerdictReturn}
	toUnknown := &expr.Verdict{Kind: expr.VerdictGoto, Chain: c.unknown.Name}
	toSpray := &expr.Verdict{Kind: expr.VerdictGoto, Chain: c.spray.Name}
	drop := &expr.Verdict{Kind: expr.VerdictDrop}

	match := append(append([]expr.Any{}, isTCP...),
		&expr.Payload{DestRegister: reg1, Base: expr.PayloadBaseTransportHeader, Offset: 13, Len: 1},
		&expr.Bitwise{SourceRegister: reg1, DestRegister: reg1, Len: 1, Mask: []byte{synFlag}, Xor: []byte{0}},
		&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: []byte{0}},
		&expr.Payload{DestRegister: reg1, Base: expr.PayloadBaseNetworkHeader, Offset: fm.daddrOff, Len: fm.alen},
		&expr.Lookup{SourceRegister: reg1, SetName: s.vips.Name, SetID: s.vips.ID},
		&expr.Verdict{Kind: expr.VerdictJump, Chain: c.vip.Name},
	)
	rules := []*nftables.Rule{
		{Table: t, Chain: c.pre, Exprs: match},

		{Table: t, Chain: c.vip, Exprs: socket(expr.SocketKeyWildcard, 0, ret)},
		{Table: t, Chain: c.vip, Exprs: socket(expr.SocketKeyWildcard, 1, toUnknown)},
		{Table: t, Chain: c.vip, Exprs: socket(expr.SocketKeyTransparent, 0, ret)},
		{Table: t, Chain: c.vip, Exprs: socket(expr.SocketKeyTransparent, 1, ret)},
		{Table: t, Chain: c.vip, Exprs: []expr.Any{toUnknown}},

		{Table: t, Chain: c.unknown, Exprs: append(fm.marked(), drop)},
		{Table: t, Chain: c.unknown, Exprs: withKey(lookup(s.owners, false), &expr.Verdict{Kind: expr.VerdictGoto, Chain: c.owner.Name})},
	}
	if byPort {
		rules = append(rules, &nftables.Rule{Table: t, Chain: c.unknown, Exprs: append(append([]expr.Any{}, isTCP...),
			&expr.Payload{DestRegister: reg1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
			&expr.Lookup{SourceRegister: reg1, SetName: s.ports.Name, SetID: s.ports.ID, Invert: true},
			ret)})
	}
	return append(rules,
		&nftables.Rule{Table: t, Chain: c.unknown, Exprs: withKey(lookup(s.held, false), toSpray)},
		&nftables.Rule{Table: t, Chain: c.unknown, Exprs: withKey(lookup(s.seen, false), ret)},
		&nftables.Rule{Table: t, Chain: c.unknown, Exprs: withKey(
			&expr.Dynset{SrcRegKey: regKey, SetName: s.held.Name, SetID: s.held.ID, Operation: uint32(unix.NFT_DYNSET_OP_ADD)},
			&expr.Dynset{SrcRegKey: regKey, SetName: s.seen.Name, SetID: s.seen.ID, Operation: uint32(unix.NFT_DYNSET_OP_ADD)},
			toSpray)},
		// Reached only when an add failed: a set is full.
		&nftables.Rule{Table: t, Chain: c.unknown, Exprs: []expr.Any{&expr.Counter{}, toSpray}},

		&nftables.Rule{Table: t, Chain: c.owner, Exprs: append(append(fm.mark(), &expr.Counter{}), withKey(lookup(s.owners, true), &expr.Dup{RegAddr: reg1})...)},
		&nftables.Rule{Table: t, Chain: c.owner, Exprs: []expr.Any{drop}},

		&nftables.Rule{Table: t, Chain: c.tooMany, Exprs: []expr.Any{&expr.Counter{}, drop}},
	)
}

// A segment a member sent on carries the largest TTL (IPv4) or hop limit (IPv6), 255: mark sets
// it to 0 before dup, whose decrement wraps it to 255 (nf_dup_ipv4/6 decrement without a zero
// check). No segment that crossed a router can carry 255 — every router decrements, and the
// members' segments come from the router — so a client cannot make its own segments look sent on
// (and so dropped where they should be sent on), whatever it puts in its headers: unlike the
// IPv6 flow label or the IPv4 identification, which a client may set to anything (a constant
// flow label would have lost one connection in 2^20 at every rehash). A host on the members'
// own segment could send 255, but it could forge anything there anyway. The mark costs nothing
// to the owner: its stack does not look at the TTL of a segment it takes.
const sentOnTTL = 255

// ttlOffset is where the TTL (IPv4) or hop limit (IPv6) is in the network header.
func (fm family) ttlOffset() uint32 {
	if fm.nft == nftables.TableFamilyIPv4 {
		return 8
	}
	return 7
}

// marked matches a segment a member sent on.
func (fm family) marked() []expr.Any {
	return []expr.Any{
		&expr.Payload{DestRegister: reg1, Base: expr.PayloadBaseNetworkHeader, Offset: fm.ttlOffset(), Len: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: []byte{sentOnTTL}},
	}
}

// mark makes the copy dup sends next arrive marked: TTL 0, wrapped to 255 by dup.
func (fm family) mark() []expr.Any {
	w := &expr.Payload{OperationType: expr.PayloadWrite, SourceRegister: reg1, Base: expr.PayloadBaseNetworkHeader,
		Offset: fm.ttlOffset(), Len: 1}
	if fm.nft == nftables.TableFamilyIPv4 {
		w.CsumType, w.CsumOffset = expr.CsumTypeInet, 10 // the header checksum
	}
	return []expr.Any{&expr.Immediate{Register: reg1, Data: []byte{0}}, w}
}

// sprayRules copy a held segment, marked, to every peer of fm's family and drop the original:
// the owner takes it at once instead of at the client's retransmission, after its next list. At
// most cfg's rate: beyond it a held segment is only dropped.
func (fm family) sprayRules(t *nftables.Table, c chains, cfg ForwarderConfig, peers []netip.Addr) []*nftables.Rule {
	exprs := append(fm.mark(), &expr.Counter{})
	for _, p := range peers {
		if p.Is4() != (fm.nft == nftables.TableFamilyIPv4) {
			continue
		}
		exprs = append(exprs, &expr.Immediate{Register: reg1, Data: p.AsSlice()}, &expr.Dup{RegAddr: reg1})
	}
	limit := &expr.Limit{Type: expr.LimitTypePkts, Rate: cfg.CopyRate, Over: true, Unit: expr.LimitTimeSecond, Burst: cfg.CopyBurst}
	return []*nftables.Rule{
		{Table: t, Chain: c.spray, Exprs: []expr.Any{limit, &expr.Verdict{Kind: expr.VerdictGoto, Chain: c.tooMany.Name}}},
		{Table: t, Chain: c.spray, Exprs: exprs},
		{Table: t, Chain: c.spray, Exprs: []expr.Any{&expr.Verdict{Kind: expr.VerdictDrop}}},
	}
}
