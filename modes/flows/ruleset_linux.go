//go:build linux

package flows

import (
	"encoding/binary"
	"net/netip"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// Chain names. Not "fwd": a reserved word of nft, which could then not parse its own listing.
const (
	preChain     = "pre"
	vipChain     = "vip"
	ownerChain   = "toowner"
	unknownChain = "unknown"
	sprayChain   = "spray"
)

// copyMark marks the copies of a held segment sent to every peer: IPv4's identification field
// (meaningless on a TCP segment that may not be fragmented), IPv6's flow label. A peer drops a
// marked segment it has no socket for, silently: the owner answers, the others must not reset.
const copyMark = 0xca1b

// HoldUnknown is how long a segment of a connection nobody here knows is dropped rather than
// reset: the owner's next list (every 100 ms) names it, and the client's retransmission is then
// sent on. A connection still unknown after it (its owner died) is reset by the stack.
const HoldUnknown = time.Second

// seenFor: how long a connection let go after its hold stays let go.
const seenFor = 10 * time.Second

// family is what differs between the ip and ip6 tables.
type family struct {
	nft      nftables.TableFamily
	name     string // as nft spells it
	mapName  string
	vipsName string
	heldName string
	seenName string
	addrType nftables.SetDatatype
	alen     uint32 // address length
	saddrOff uint32 // source address offset in the network header
	daddrOff uint32
}

func familyOf(is4 bool) family {
	if is4 {
		return family{nft: nftables.TableFamilyIPv4, name: "ip", mapName: "owners4", vipsName: "vips4", heldName: "held4", seenName: "seen4", addrType: nftables.TypeIPAddr,
			alen: 4, saddrOff: 12, daddrOff: 16}
	}
	return family{nft: nftables.TableFamilyIPv6, name: "ip6", mapName: "owners6", vipsName: "vips6", heldName: "held6", seenName: "seen6", addrType: nftables.TypeIP6Addr,
		alen: 16, saddrOff: 8, daddrOff: 24}
}

func bothFamilies() []family { return []family{familyOf(true), familyOf(false)} }

func (fm family) table() *nftables.Table { return &nftables.Table{Family: fm.nft, Name: Table} }

// ownersMap is the map from a flow, seen as an arriving segment sees it (saddr . sport . daddr .
// dport: client, then service), to its owner's address.
func (fm family) ownersMap(t *nftables.Table) *nftables.Set {
	return &nftables.Set{Table: t, Name: fm.mapName, IsMap: true, Concatenation: true,
		KeyType: fm.flowKeyType(), DataType: fm.addrType}
}

// flowKeyType is the key of a flow: saddr . sport . daddr . dport.
func (fm family) flowKeyType() nftables.SetDatatype {
	return nftables.MustConcatSetType(fm.addrType, nftables.TypeInetService, fm.addrType, nftables.TypeInetService)
}

// vipsSet holds the VIPs on the node: only segments to them are looked at.
func (fm family) vipsSet(t *nftables.Table) *nftables.Set {
	return &nftables.Set{Table: t, Name: fm.vipsName, KeyType: fm.addrType}
}

// heldSet and seenSet are filled by the packet path: a connection nobody here knows is held (its
// segments dropped) for HoldUnknown from its first segment, then let go for seenFor.
func (fm family) heldSet(t *nftables.Table) *nftables.Set {
	return &nftables.Set{Table: t, Name: fm.heldName, Concatenation: true, KeyType: fm.flowKeyType(),
		HasTimeout: true, Timeout: HoldUnknown, Dynamic: true}
}

func (fm family) seenSet(t *nftables.Table) *nftables.Set {
	return &nftables.Set{Table: t, Name: fm.seenName, Concatenation: true, KeyType: fm.flowKeyType(),
		HasTimeout: true, Timeout: seenFor, Dynamic: true}
}

// elemKey is a flow as the map's key: each field starts at a 32-bit boundary, so a port takes
// four bytes, two of them zero (as a register loaded with two bytes holds it).
func elemKey(f Flow) []byte {
	b := make([]byte, 0, 40)
	b = append(b, f.Client.Addr().AsSlice()...)
	b = binary.BigEndian.AppendUint16(b, f.Client.Port())
	b = append(b, 0, 0)
	b = append(b, f.Service.Addr().AsSlice()...)
	b = binary.BigEndian.AppendUint16(b, f.Service.Port())
	return append(b, 0, 0)
}

func elem(f Flow, owner netip.Addr) nftables.SetElement {
	return nftables.SetElement{Key: elemKey(f), Val: owner.AsSlice()}
}

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

// rules is the netlink form of (ip6 likewise, with its sets and ip6 addresses):
//
//	table ip caplb_flows {
//	  map owners4 { type ipv4_addr . inet_service . ipv4_addr . inet_service : ipv4_addr; }
//	  set vips4 { type ipv4_addr; }
//	  set held4 { type ipv4_addr . inet_service . ipv4_addr . inet_service; flags dynamic,timeout; timeout 1s; }
//	  set seen4 { type ipv4_addr . inet_service . ipv4_addr . inet_service; flags dynamic,timeout; timeout 10s; }
//	  chain pre { type filter hook prerouting priority -300; policy accept;
//	    tcp flags & syn == 0 ip daddr @vips4 jump vip
//	  }
//	  chain vip {
//	    ip saddr . tcp sport . ip daddr . tcp dport @owners4 jump toowner
//	    socket wildcard 0 return
//	    socket wildcard 1 jump unknown
//	    socket transparent 0 return
//	    socket transparent 1 return
//	    jump unknown
//	  }
//	  chain toowner {
//	    socket wildcard 0 return
//	    counter dup to ip saddr . tcp sport . ip daddr . tcp dport map @owners4
//	    drop
//	  }
//	  chain unknown {
//	    ip id 0xca1b drop
//	    ip saddr . tcp sport . ip daddr . tcp dport @held4 goto spray
//	    ip saddr . tcp sport . ip daddr . tcp dport @seen4 return
//	    add @held4 { ip saddr . tcp sport . ip daddr . tcp dport } add @seen4 { ... } goto spray
//	  }
//	  chain spray {   # SetPeers
//	    ip id set 0xca1b counter dup to <peer 1> dup to <peer 2> ...
//	    drop
//	  }
//	}
//
// Priority -300 (raw) is before conntrack: a segment sent on leaves no state here, and the copy
// dup makes is untracked. A SYN is never looked at: a new connection, even one that reuses a
// listed 4-tuple, is this member's. A local socket for the 4-tuple wins over a stale entry: an
// established socket is bound to the VIP (wildcard 0), a listener on 0.0.0.0 or [::] is not
// (wildcard 1: nobody here has the connection), a request or TIME_WAIT socket is not a full
// socket (wildcard does not match, transparent does). (A server listening on the VIP itself also
// reads as wildcard 0: its members' flows are then never sent on.) dup routes the copy with the
// owner as next hop (FLOWI_FLAG_KNOWN_NH), the destination still the VIP, its TTL decremented;
// the original is dropped.
//
// A connection nobody here has and no list names yet — a member started it less than one sharing
// interval before the router rehashed it here — is held: its segments are dropped, not reset,
// for HoldUnknown from the first one, so that the owner's next list names it and the client's
// retransmission is sent on. Still unknown after that (its owner died), the stack resets it.
// Meanwhile each of its segments is copied, marked, to every peer: the owner takes it at once,
// the others drop a marked segment they have no socket for (never copying it on).
func (fm family) rules(t *nftables.Table, c chains, owners, vips, held, seen *nftables.Set) []*nftables.Rule {
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
	toUnknown := &expr.Verdict{Kind: expr.VerdictJump, Chain: c.unknown.Name}
	toSpray := &expr.Verdict{Kind: expr.VerdictGoto, Chain: c.spray.Name}
	drop := &expr.Verdict{Kind: expr.VerdictDrop}

	match := append(append([]expr.Any{}, isTCP...),
		&expr.Payload{DestRegister: reg1, Base: expr.PayloadBaseTransportHeader, Offset: 13, Len: 1},
		&expr.Bitwise{SourceRegister: reg1, DestRegister: reg1, Len: 1, Mask: []byte{synFlag}, Xor: []byte{0}},
		&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: []byte{0}},
		&expr.Payload{DestRegister: reg1, Base: expr.PayloadBaseNetworkHeader, Offset: fm.daddrOff, Len: fm.alen},
		&expr.Lookup{SourceRegister: reg1, SetName: vips.Name, SetID: vips.ID},
		&expr.Verdict{Kind: expr.VerdictJump, Chain: c.vip.Name},
	)
	return []*nftables.Rule{
		{Table: t, Chain: c.pre, Exprs: match},

		{Table: t, Chain: c.vip, Exprs: withKey(lookup(owners, false), &expr.Verdict{Kind: expr.VerdictJump, Chain: c.owner.Name})},
		{Table: t, Chain: c.vip, Exprs: socket(expr.SocketKeyWildcard, 0, ret)},
		{Table: t, Chain: c.vip, Exprs: socket(expr.SocketKeyWildcard, 1, toUnknown)},
		{Table: t, Chain: c.vip, Exprs: socket(expr.SocketKeyTransparent, 0, ret)},
		{Table: t, Chain: c.vip, Exprs: socket(expr.SocketKeyTransparent, 1, ret)},
		{Table: t, Chain: c.vip, Exprs: []expr.Any{toUnknown}},

		{Table: t, Chain: c.owner, Exprs: socket(expr.SocketKeyWildcard, 0, ret)},
		{Table: t, Chain: c.owner, Exprs: append([]expr.Any{&expr.Counter{}}, withKey(lookup(owners, true), &expr.Dup{RegAddr: reg1})...)},
		{Table: t, Chain: c.owner, Exprs: []expr.Any{drop}},

		{Table: t, Chain: c.unknown, Exprs: append(fm.marked(), drop)},
		{Table: t, Chain: c.unknown, Exprs: withKey(lookup(held, false), toSpray)},
		{Table: t, Chain: c.unknown, Exprs: withKey(lookup(seen, false), ret)},
		{Table: t, Chain: c.unknown, Exprs: withKey(
			&expr.Dynset{SrcRegKey: regKey, SetName: held.Name, SetID: held.ID, Operation: uint32(unix.NFT_DYNSET_OP_ADD)},
			&expr.Dynset{SrcRegKey: regKey, SetName: seen.Name, SetID: seen.ID, Operation: uint32(unix.NFT_DYNSET_OP_ADD)},
			toSpray)},
	}
}

// marked matches a peer's copy of a held segment (copyMark).
func (fm family) marked() []expr.Any {
	if fm.nft == nftables.TableFamilyIPv4 {
		return []expr.Any{
			&expr.Payload{DestRegister: reg1, Base: expr.PayloadBaseNetworkHeader, Offset: 4, Len: 2},
			&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: binary.BigEndian.AppendUint16(nil, copyMark)},
		}
	}
	return []expr.Any{
		&expr.Payload{DestRegister: reg1, Base: expr.PayloadBaseNetworkHeader, Offset: 0, Len: 4},
		&expr.Bitwise{SourceRegister: reg1, DestRegister: reg1, Len: 4, Mask: []byte{0, 0x0f, 0xff, 0xff}, Xor: []byte{0, 0, 0, 0}},
		&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: binary.BigEndian.AppendUint32(nil, copyMark)},
	}
}

// mark sets copyMark on the segment (then copied to the peers, the original dropped).
func (fm family) mark() []expr.Any {
	if fm.nft == nftables.TableFamilyIPv4 {
		return []expr.Any{
			&expr.Immediate{Register: reg1, Data: binary.BigEndian.AppendUint16(nil, copyMark)},
			&expr.Payload{OperationType: expr.PayloadWrite, SourceRegister: reg1, Base: expr.PayloadBaseNetworkHeader,
				Offset: 4, Len: 2, CsumType: expr.CsumTypeInet, CsumOffset: 10},
		}
	}
	return []expr.Any{
		&expr.Payload{DestRegister: reg1, Base: expr.PayloadBaseNetworkHeader, Offset: 0, Len: 4},
		&expr.Bitwise{SourceRegister: reg1, DestRegister: reg1, Len: 4, Mask: []byte{0xff, 0xf0, 0, 0},
			Xor: binary.BigEndian.AppendUint32(nil, copyMark)},
		&expr.Payload{OperationType: expr.PayloadWrite, SourceRegister: reg1, Base: expr.PayloadBaseNetworkHeader, Offset: 0, Len: 4},
	}
}

// sprayRules copy a held segment, marked, to every peer of fm's family and drop the original:
// the owner takes it at once instead of at the client's retransmission, after its next list.
func (fm family) sprayRules(t *nftables.Table, spray *nftables.Chain, peers []netip.Addr) []*nftables.Rule {
	exprs := append(fm.mark(), &expr.Counter{})
	for _, p := range peers {
		if p.Is4() != (fm.nft == nftables.TableFamilyIPv4) {
			continue
		}
		exprs = append(exprs, &expr.Immediate{Register: reg1, Data: p.AsSlice()}, &expr.Dup{RegAddr: reg1})
	}
	return []*nftables.Rule{
		{Table: t, Chain: spray, Exprs: exprs},
		{Table: t, Chain: spray, Exprs: []expr.Any{&expr.Verdict{Kind: expr.VerdictDrop}}},
	}
}

// chains are a table's chains.
type chains struct{ pre, vip, owner, unknown, spray *nftables.Chain }

// create queues the replacement of fm's table (any earlier one goes with its entries) by empty
// sets and the chains.
func (fm family) create(c *nftables.Conn) error {
	t := fm.table()
	// Adding the table first makes the delete succeed whether or not it existed.
	c.AddTable(t)
	c.DelTable(t)
	c.AddTable(t)
	owners, vips, held, seen := fm.ownersMap(t), fm.vipsSet(t), fm.heldSet(t), fm.seenSet(t)
	for _, set := range []*nftables.Set{owners, vips, held, seen} {
		if err := c.AddSet(set, nil); err != nil {
			return err
		}
	}
	ch := chains{
		vip:     c.AddChain(&nftables.Chain{Table: t, Name: vipChain}),
		owner:   c.AddChain(&nftables.Chain{Table: t, Name: ownerChain}),
		unknown: c.AddChain(&nftables.Chain{Table: t, Name: unknownChain}),
		spray:   c.AddChain(&nftables.Chain{Table: t, Name: sprayChain}),
		pre: c.AddChain(&nftables.Chain{Table: t, Name: preChain, Type: nftables.ChainTypeFilter,
			Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityRaw}),
	}
	for _, r := range append(fm.rules(t, ch, owners, vips, held, seen), fm.sprayRules(t, ch.spray, nil)...) {
		c.AddRule(r)
	}
	return nil
}
