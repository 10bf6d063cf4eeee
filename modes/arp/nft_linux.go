//go:build linux

package arp

import (
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// netlinkTables programs nftables over netlink (github.com/google/nftables):
// no nft binary, no subprocess. Each call builds one batch, which the kernel
// applies as one transaction; if it is refused, the batch is replayed one
// rule at a time so that the error names the rule the kernel rejected.
type netlinkTables struct{}

// nftRule is one rule of a batch with a description for errors.
type nftRule struct {
	desc  string
	exprs []expr.Any
}

// tableSpec is one table with at most one set (or map) and its base
// chains: chain with rules, then any further chains.
type tableSpec struct {
	family nftables.TableFamily
	name   string
	set    *nftables.Set // may be nil
	elems  []nftables.SetElement
	chain  nftables.Chain
	rules  []nftRule
	more   []chainRules
}

// chainRules is a further base chain of a table and its rules.
type chainRules struct {
	chain nftables.Chain
	rules []nftRule
}

// ruleRef is one rule of a table: its chain (0: spec.chain, i: more[i-1]).
type ruleRef struct {
	chain int
	rule  nftRule
}

// allRules lists the table's rules chain by chain, in the order they are added.
func (spec tableSpec) allRules() []ruleRef {
	var out []ruleRef
	for _, r := range spec.rules {
		out = append(out, ruleRef{0, r})
	}
	for i, c := range spec.more {
		for _, r := range c.rules {
			out = append(out, ruleRef{i + 1, r})
		}
	}
	return out
}

func familyName(f nftables.TableFamily) string {
	switch f {
	case nftables.TableFamilyIPv4:
		return "ip"
	case nftables.TableFamilyIPv6:
		return "ip6"
	case nftables.TableFamilyARP:
		return "arp"
	}
	return fmt.Sprintf("family %d", f)
}

// replace atomically replaces (or creates) the table described by spec.
func (netlinkTables) replace(spec tableSpec) error {
	c, err := nftables.New()
	if err != nil {
		return fmt.Errorf("nftables: netlink socket: %w", err)
	}
	where := fmt.Sprintf("table %s %s", familyName(spec.family), spec.name)
	queue := func(rules []ruleRef) *nftables.Table {
		// Adding the table first makes the delete succeed whether or not
		// it existed: the batch replaces any earlier table.
		t := &nftables.Table{Family: spec.family, Name: spec.name}
		c.AddTable(t)
		c.DelTable(t)
		c.AddTable(t)
		var set *nftables.Set
		if spec.set != nil {
			s := *spec.set
			s.Table, s.ID = t, 0
			set = &s
			if err := c.AddSet(set, spec.elems); err != nil {
				c.DelTable(t)
				return nil
			}
		}
		chains := []*nftables.Chain{}
		for _, ch := range append([]nftables.Chain{spec.chain}, chainsOf(spec.more)...) {
			ch.Table = t
			chains = append(chains, c.AddChain(&ch))
		}
		for _, r := range rules {
			c.AddRule(&nftables.Rule{Table: t, Chain: chains[r.chain], Exprs: bindSet(r.rule.exprs, set)})
		}
		return t
	}
	all := spec.allRules()
	if t := queue(all); t == nil {
		return fmt.Errorf("nftables: %s: set %q refused", where, spec.set.Name)
	}
	err = c.Flush()
	if err == nil {
		return nil
	}
	// Find the rule the kernel refuses: table, set and chains first, then
	// one more rule per batch. The table is left out on every path.
	defer func() {
		c.DelTable(&nftables.Table{Family: spec.family, Name: spec.name})
		_ = c.Flush()
	}()
	queue(nil)
	if ferr := c.Flush(); ferr != nil {
		return fmt.Errorf("nftables: %s: creating the table, set and base chains: %w", where, ferr)
	}
	for i := range all {
		queue(all[:i+1])
		if ferr := c.Flush(); ferr != nil {
			return fmt.Errorf("nftables: %s: rule %q: %w", where, all[i].rule.desc, ferr)
		}
	}
	return fmt.Errorf("nftables: %s: %w", where, err)
}

func chainsOf(more []chainRules) []nftables.Chain {
	out := make([]nftables.Chain, len(more))
	for i, c := range more {
		out[i] = c.chain
	}
	return out
}

// remove deletes the table if it exists.
func (netlinkTables) remove(family nftables.TableFamily, name string) error {
	c, err := nftables.New()
	if err != nil {
		return fmt.Errorf("nftables: netlink socket: %w", err)
	}
	t := &nftables.Table{Family: family, Name: name}
	c.AddTable(t)
	c.DelTable(t)
	if err := c.Flush(); err != nil {
		return fmt.Errorf("nftables: removing table %s %s: %w", familyName(family), name, err)
	}
	return nil
}

// bindSet points lookups and dynset updates at the set as queued in this
// batch (its ID is allocated when it is added).
func bindSet(exprs []expr.Any, set *nftables.Set) []expr.Any {
	if set == nil {
		return exprs
	}
	out := make([]expr.Any, len(exprs))
	for i, e := range exprs {
		switch v := e.(type) {
		case *expr.Lookup:
			l := *v
			l.SetID, l.SetName = set.ID, set.Name
			out[i] = &l
		case *expr.Dynset:
			d := *v
			d.SetID, d.SetName = set.ID, set.Name
			out[i] = &d
		default:
			out[i] = e
		}
	}
	return out
}

// Registers as nft uses them: reg 1 is the 16-byte NFT_REG_1; a key
// concatenated after a 4-byte IPv4 address starts at the 32-bit register
// right after it (NFT_REG32_01), after a 16-byte IPv6 address at NFT_REG_2.
const (
	// nfARPOut is NF_ARP_OUT (linux/netfilter_arp.h): the arp family's output hook.
	nfARPOut = 1

	reg1      = 1
	reg2      = 2
	reg32Next = unix.NFT_REG32_01
)

func ifnameBytes(name string) []byte {
	b := make([]byte, 16)
	copy(b, name+"\x00")
	return b
}

// handoverSpec is the successor's redirect during a graceful hand-over, the
// netlink form of:
//
//	table ip caplb_handover {
//	  set flows { type ipv4_addr . inet_service; flags dynamic,timeout; size 65535 }
//	  chain prerouting {
//	    type filter hook prerouting priority -500; policy accept;
//	    iifname IFACE ip daddr VIP meta l4proto tcp tcp flags & (syn|ack) == syn
//	      update @flows { ip saddr . tcp sport timeout 10s } accept
//	    iifname IFACE ip daddr VIP meta l4proto tcp ip saddr . tcp sport != @flows
//	      dup to PREV device IFACE drop
//	  }
//	}
//
// (ip6 likewise). The chain runs before conntrack (priority -500), so a
// segment handed to the previous owner leaves no state here. dup clones the
// segment to PREV's MAC with the VIP still its destination, and the
// original is dropped: a forward at layer 2.
func handoverSpec(iface string, ifindex int, vips []netip.Addr, prev netip.Addr) tableSpec {
	fam, addrType, daddrOff, saddrOff, alen := nftables.TableFamilyIPv4, nftables.TypeIPAddr, uint32(16), uint32(12), uint32(4)
	portReg := uint32(reg32Next)
	if prev.Is6() {
		fam, addrType, daddrOff, saddrOff, alen = nftables.TableFamilyIPv6, nftables.TypeIP6Addr, 24, 8, 16
		portReg = reg2
	}
	keyType := nftables.MustConcatSetType(addrType, nftables.TypeInetService)
	spec := tableSpec{
		family: fam, name: HandoverTable,
		set: &nftables.Set{Name: "flows", KeyType: keyType, Concatenation: true,
			HasTimeout: true, Dynamic: true, Size: 65535},
		chain: nftables.Chain{Name: "prerouting", Type: nftables.ChainTypeFilter,
			Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityRef(-500)},
	}
	flowKey := []expr.Any{
		&expr.Payload{DestRegister: reg1, Base: expr.PayloadBaseNetworkHeader, Offset: saddrOff, Len: alen},
		&expr.Payload{DestRegister: portReg, Base: expr.PayloadBaseTransportHeader, Offset: 0, Len: 2},
	}
	for _, v := range vips {
		if v.Is4() != prev.Is4() {
			continue
		}
		match := []expr.Any{
			&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: reg1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: ifnameBytes(iface)},
			&expr.Payload{DestRegister: reg1, Base: expr.PayloadBaseNetworkHeader, Offset: daddrOff, Len: alen},
			&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: v.AsSlice()},
			&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: reg1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: []byte{unix.IPPROTO_TCP}},
		}
		// A SYN without ACK starts a flow here: remember it and let it in.
		syn := append(append([]expr.Any{}, match...),
			&expr.Payload{DestRegister: reg1, Base: expr.PayloadBaseTransportHeader, Offset: 13, Len: 1},
			&expr.Bitwise{SourceRegister: reg1, DestRegister: reg1, Len: 1, Mask: []byte{0x12}, Xor: []byte{0}},
			&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: []byte{0x02}},
		)
		syn = append(syn, flowKey...)
		syn = append(syn,
			&expr.Dynset{SrcRegKey: reg1, Operation: unix.NFT_DYNSET_OP_UPDATE, Timeout: handoverFlowTimeout},
			&expr.Verdict{Kind: expr.VerdictAccept},
		)
		// Any other segment of a flow not started here belongs to the old owner.
		fwd := append(append([]expr.Any{}, match...), flowKey...)
		fwd = append(fwd,
			&expr.Lookup{SourceRegister: reg1, Invert: true},
			&expr.Immediate{Register: reg1, Data: prev.AsSlice()},
			&expr.Immediate{Register: reg2, Data: nativeUint32(uint32(ifindex))},
			&expr.Dup{RegAddr: reg1, RegDev: reg2, IsRegDevSet: true},
			&expr.Verdict{Kind: expr.VerdictDrop},
		)
		spec.rules = append(spec.rules,
			nftRule{desc: fmt.Sprintf("%s %s: record flows whose SYN arrives here", iface, v), exprs: syn},
			nftRule{desc: fmt.Sprintf("%s %s: send flows not started here to %s", iface, v, prev), exprs: fwd},
		)
	}
	return spec
}

// quietSpecs are the tables that keep a quiet (draining) owner's kernel
// from answering for the VIPs it still holds, so that a neighbour resolving
// a VIP for the first time during the drain learns the successor's MAC:
//
//	table arp caplb_quiet { chain output { type filter hook output priority 0;
//	  arp operation reply arp saddr ip VIP drop } }
//	table ip6 caplb_quiet { chain output { type filter hook output priority 0;
//	  icmpv6 type nd-neighbor-advert <target> == VIP drop } }
//
// Only the kernel's answers pass these hooks: the agent's own gratuitous ARP
// goes out through a packet socket (it is silent while quiet anyway).
func quietSpecs(vips []netip.Addr) (v4, v6 tableSpec) {
	v4 = tableSpec{family: nftables.TableFamilyARP, name: QuietTable,
		chain: nftables.Chain{Name: "output", Type: nftables.ChainTypeFilter,
			Hooknum: nftables.ChainHookRef(nfARPOut), Priority: nftables.ChainPriorityFilter}}
	v6 = tableSpec{family: nftables.TableFamilyIPv6, name: QuietTable,
		chain: nftables.Chain{Name: "output", Type: nftables.ChainTypeFilter,
			Hooknum: nftables.ChainHookOutput, Priority: nftables.ChainPriorityFilter}}
	for _, v := range vips {
		if v.Is4() {
			v4.rules = append(v4.rules, nftRule{desc: fmt.Sprintf("drop ARP replies for %s", v), exprs: []expr.Any{
				// arp operation (offset 6) == reply; sender IP (offset 14,
				// after a 6-byte hardware address) == VIP.
				&expr.Payload{DestRegister: reg1, Base: expr.PayloadBaseNetworkHeader, Offset: 6, Len: 2},
				&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: []byte{0, 2}},
				&expr.Payload{DestRegister: reg1, Base: expr.PayloadBaseNetworkHeader, Offset: 14, Len: 4},
				&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: v.AsSlice()},
				&expr.Verdict{Kind: expr.VerdictDrop},
			}})
			continue
		}
		v6.rules = append(v6.rules, nftRule{desc: fmt.Sprintf("drop neighbour advertisements for %s", v), exprs: []expr.Any{
			&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: reg1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: []byte{unix.IPPROTO_ICMPV6}},
			&expr.Payload{DestRegister: reg1, Base: expr.PayloadBaseTransportHeader, Offset: 0, Len: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: []byte{136}}, // neighbour advertisement
			&expr.Payload{DestRegister: reg1, Base: expr.PayloadBaseTransportHeader, Offset: 8, Len: 16},
			&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: v.AsSlice()},
			&expr.Verdict{Kind: expr.VerdictDrop},
		}})
	}
	return v4, v6
}

// nativeUint32: an interface index in a register is host byte order.
func nativeUint32(v uint32) []byte {
	b := make([]byte, 4)
	// Every platform this agent runs on (amd64, arm64) is little-endian.
	b[0], b[1], b[2], b[3] = byte(v), byte(v>>8), byte(v>>16), byte(v>>24)
	return b
}

// nftTables is the production tables implementation.
type nftTables struct{ nl netlinkTables }

func (t nftTables) installHandover(iface string, vips []netip.Addr, prev netip.Addr) error {
	ifi, err := net.InterfaceByName(iface)
	if err != nil {
		return fmt.Errorf("nftables: interface %q: %w", iface, err)
	}
	return t.nl.replace(handoverSpec(iface, ifi.Index, vips, prev))
}

func (t nftTables) removeHandover() error {
	return errors.Join(t.nl.remove(nftables.TableFamilyIPv4, HandoverTable),
		t.nl.remove(nftables.TableFamilyIPv6, HandoverTable),
		// Written by agents before the netlink rewrite (nft, netdev family).
		t.nl.remove(nftables.TableFamilyNetdev, HandoverTable))
}

func (t nftTables) installQuiet(vips []netip.Addr) error {
	v4, v6 := quietSpecs(vips)
	var errs []error
	for _, s := range []tableSpec{v4, v6} {
		if len(s.rules) > 0 {
			errs = append(errs, t.nl.replace(s))
		}
	}
	return errors.Join(errs...)
}

func (t nftTables) removeQuiet() error {
	return errors.Join(t.nl.remove(nftables.TableFamilyARP, QuietTable),
		t.nl.remove(nftables.TableFamilyIPv6, QuietTable))
}
