//go:build linux

package flows

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"time"

	"github.com/google/nftables"
)

// Chain names. Not "fwd": a reserved word of nft, which could then not parse its own listing.
const (
	preChain     = "pre"
	vipChain     = "vip"
	ownerChain   = "toowner"
	unknownChain = "unknown"
	sprayChain   = "spray"
	tooManyChain = "toomany"
)

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
// Both are sized explicitly (size entries each): a full set no longer takes new connections,
// which the unknown chain then holds all the same (and counts).
func (fm family) heldSet(t *nftables.Table, size uint32) *nftables.Set {
	return &nftables.Set{Table: t, Name: fm.heldName, Concatenation: true, KeyType: fm.flowKeyType(),
		HasTimeout: true, Timeout: HoldUnknown, Dynamic: true, Size: size}
}

func (fm family) seenSet(t *nftables.Table, size uint32) *nftables.Set {
	return &nftables.Set{Table: t, Name: fm.seenName, Concatenation: true, KeyType: fm.flowKeyType(),
		HasTimeout: true, Timeout: seenFor, Dynamic: true, Size: size}
}

// portsSet holds the served ports: only segments to them are held and copied to the peers.
func (fm family) portsSet(t *nftables.Table) *nftables.Set {
	return &nftables.Set{Table: t, Name: portsName, KeyType: nftables.TypeInetService}
}

const portsName = "ports"

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

// chains are a table's chains.
type chains struct{ pre, vip, owner, unknown, spray, tooMany *nftables.Chain }

// sets are a table's sets.
type sets struct{ owners, vips, held, seen, ports *nftables.Set }

// create queues the replacement of fm's table (any earlier one goes with its entries) by the
// sets (cfg's ports, the others empty) and the chains.
func (fm family) create(c *nftables.Conn, cfg ForwarderConfig) error {
	t := fm.table()
	// Adding the table first makes the delete succeed whether or not it existed.
	c.AddTable(t)
	c.DelTable(t)
	c.AddTable(t)
	st := sets{owners: fm.ownersMap(t), vips: fm.vipsSet(t), held: fm.heldSet(t, cfg.HoldEntries),
		seen: fm.seenSet(t, cfg.HoldEntries), ports: fm.portsSet(t)}
	var ports []nftables.SetElement
	for _, p := range cfg.Ports {
		ports = append(ports, nftables.SetElement{Key: binary.BigEndian.AppendUint16(nil, p)})
	}
	for _, add := range []struct {
		set   *nftables.Set
		elems []nftables.SetElement
	}{{st.owners, nil}, {st.vips, nil}, {st.held, nil}, {st.seen, nil}, {st.ports, ports}} {
		if err := c.AddSet(add.set, add.elems); err != nil {
			return fmt.Errorf("set %s: %w", add.set.Name, err)
		}
	}
	ch := chains{
		vip:     c.AddChain(&nftables.Chain{Table: t, Name: vipChain}),
		owner:   c.AddChain(&nftables.Chain{Table: t, Name: ownerChain}),
		unknown: c.AddChain(&nftables.Chain{Table: t, Name: unknownChain}),
		spray:   c.AddChain(&nftables.Chain{Table: t, Name: sprayChain}),
		tooMany: c.AddChain(&nftables.Chain{Table: t, Name: tooManyChain}),
		pre: c.AddChain(&nftables.Chain{Table: t, Name: preChain, Type: nftables.ChainTypeFilter,
			Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityRaw}),
	}
	for _, r := range append(fm.rules(t, ch, st, len(cfg.Ports) > 0), fm.sprayRules(t, ch, cfg, nil)...) {
		c.AddRule(r)
	}
	return nil
}
