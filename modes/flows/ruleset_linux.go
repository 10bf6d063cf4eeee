//go:build linux

package flows

import (
	"encoding/binary"
	"net/netip"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// Chain names. Not "fwd": a reserved word of nft, which could then not parse its own listing.
const (
	preChain   = "pre"
	ownerChain = "toowner"
)

// family is what differs between the ip and ip6 tables.
type family struct {
	nft      nftables.TableFamily
	name     string // as nft spells it
	mapName  string
	addrType nftables.SetDatatype
	alen     uint32 // address length
	saddrOff uint32 // source address offset in the network header
	daddrOff uint32
}

func familyOf(is4 bool) family {
	if is4 {
		return family{nft: nftables.TableFamilyIPv4, name: "ip", mapName: "owners4", addrType: nftables.TypeIPAddr,
			alen: 4, saddrOff: 12, daddrOff: 16}
	}
	return family{nft: nftables.TableFamilyIPv6, name: "ip6", mapName: "owners6", addrType: nftables.TypeIP6Addr,
		alen: 16, saddrOff: 8, daddrOff: 24}
}

func bothFamilies() []family { return []family{familyOf(true), familyOf(false)} }

func (fm family) table() *nftables.Table { return &nftables.Table{Family: fm.nft, Name: Table} }

// ownersMap is the map from a flow, seen as an arriving segment sees it (saddr . sport . daddr .
// dport: client, then service), to its owner's address.
func (fm family) ownersMap(t *nftables.Table) *nftables.Set {
	return &nftables.Set{Table: t, Name: fm.mapName, IsMap: true, Concatenation: true,
		KeyType:  nftables.MustConcatSetType(fm.addrType, nftables.TypeInetService, fm.addrType, nftables.TypeInetService),
		DataType: fm.addrType}
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

// chains is the netlink form of (ip6 likewise, with owners6 and ip6 addresses):
//
//	table ip caplb_flows {
//	  map owners4 { type ipv4_addr . inet_service . ipv4_addr . inet_service : ipv4_addr; }
//	  chain pre { type filter hook prerouting priority -300; policy accept;
//	    tcp flags & syn == 0 ip saddr . tcp sport . ip daddr . tcp dport @owners4 jump toowner
//	  }
//	  chain toowner {
//	    socket wildcard 0 return
//	    counter dup to ip saddr . tcp sport . ip daddr . tcp dport map @owners4
//	    drop
//	  }
//	}
//
// Priority -300 (raw) is before conntrack: a segment sent on leaves no state here, and the copy
// dup makes is untracked. A SYN is never sent on: a new connection that reuses a listed 4-tuple
// is this member's. "socket wildcard 0 return" lets a local socket for the 4-tuple win over a
// stale entry: an established socket is bound to the VIP (wildcard 0), a listener on 0.0.0.0 or
// [::] is not, and no socket at all (or a TIME_WAIT one) does not match. (A server listening on
// the VIP itself also reads as wildcard 0: its members' flows are then never sent on.) dup routes
// the copy with the owner as next hop (FLOWI_FLAG_KNOWN_NH), the destination still the VIP, its
// TTL decremented; the original is dropped.
func (fm family) rules(t *nftables.Table, pre, owner *nftables.Chain, set *nftables.Set) []*nftables.Rule {
	lookup := func(dreg bool) *expr.Lookup {
		return &expr.Lookup{SourceRegister: regKey, SetName: set.Name, SetID: set.ID, DestRegister: reg1, IsDestRegSet: dreg}
	}
	isTCP := []expr.Any{
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: reg1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: []byte{unix.IPPROTO_TCP}},
	}
	match := append(append([]expr.Any{}, isTCP...),
		&expr.Payload{DestRegister: reg1, Base: expr.PayloadBaseTransportHeader, Offset: 13, Len: 1},
		&expr.Bitwise{SourceRegister: reg1, DestRegister: reg1, Len: 1, Mask: []byte{synFlag}, Xor: []byte{0}},
		&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: []byte{0}},
	)
	match = append(match, fm.loadKey()...)
	match = append(match, lookup(false), &expr.Verdict{Kind: expr.VerdictJump, Chain: owner.Name})

	local := []expr.Any{
		&expr.Socket{Key: expr.SocketKeyWildcard, Register: reg1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: []byte{0}},
		&expr.Verdict{Kind: expr.VerdictReturn},
	}
	// Only TCP jumps here; the protocol is matched again so that nft lists "tcp sport", not "th sport".
	send := append([]expr.Any{&expr.Counter{}}, isTCP...)
	send = append(send, fm.loadKey()...)
	send = append(send, lookup(true), &expr.Dup{RegAddr: reg1})
	drop := []expr.Any{&expr.Verdict{Kind: expr.VerdictDrop}}
	return []*nftables.Rule{
		{Table: t, Chain: pre, Exprs: match},
		{Table: t, Chain: owner, Exprs: local},
		{Table: t, Chain: owner, Exprs: send},
		{Table: t, Chain: owner, Exprs: drop},
	}
}

// create queues the replacement of fm's table (any earlier one goes with its entries) by an empty
// map and the chains.
func (fm family) create(c *nftables.Conn) error {
	t := fm.table()
	// Adding the table first makes the delete succeed whether or not it existed.
	c.AddTable(t)
	c.DelTable(t)
	c.AddTable(t)
	set := fm.ownersMap(t)
	if err := c.AddSet(set, nil); err != nil {
		return err
	}
	owner := c.AddChain(&nftables.Chain{Table: t, Name: ownerChain})
	pre := c.AddChain(&nftables.Chain{Table: t, Name: preChain, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityRaw})
	for _, r := range fm.rules(t, pre, owner, set) {
		c.AddRule(r)
	}
	return nil
}
