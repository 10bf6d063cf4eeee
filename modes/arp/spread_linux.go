//go:build linux

package arp

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strings"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"

	"github.com/caplb/caplb/modes/dataplane"
)

// ipsDstNAT is IPS_DST_NAT (linux/netfilter/nf_conntrack_common.h): the
// connection's destination was rewritten.
const ipsDstNAT = 1 << 5

// spreadSpec is the spread mode's forwarding, the netlink form of:
//
//	table ip caplb_spread {
//	  map backends { type integer : ipv4_addr; elements = { 0 : A, 1 : B, 2 : C } }
//	  chain prerouting { type nat hook prerouting priority dstnat;
//	    ip daddr VIP tcp dport PORT dnat to numgen inc mod 3 map @backends }
//	  chain postrouting { type nat hook postrouting priority srcnat;
//	    ct status dnat ct original ip daddr VIP meta l4proto tcp snat to SOURCE }
//	}
//
// (ip6 likewise). NAT chains see only a connection's first packet: the
// choice is conntrack's from then on, so a change of the set moves no
// established connection. A connection dealt to this node is DNATed to its
// own address and delivered here (it never reaches postrouting); one dealt
// to another member leaves from SOURCE, so that the reply comes back here to
// be translated. Round-robin (numgen inc) rather than random: equal shares
// however few the connections.
func spreadSpec(vips []netip.Addr, s dataplane.Spread) tableSpec {
	fam, proto, addrType, daddrOff, alen := nftables.TableFamilyIPv4, uint32(unix.NFPROTO_IPV4), nftables.TypeIPAddr, uint32(16), 4
	if s.Source.Is6() {
		fam, proto, addrType, daddrOff, alen = nftables.TableFamilyIPv6, unix.NFPROTO_IPV6, nftables.TypeIP6Addr, 24, 16
	}
	spec := tableSpec{
		family: fam, name: SpreadTable,
		set: &nftables.Set{Name: "backends", IsMap: true, Constant: true,
			KeyType: nftables.TypeInteger, DataType: addrType},
		chain: nftables.Chain{Name: "prerouting", Type: nftables.ChainTypeNAT,
			Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityNATDest},
		more: []chainRules{{chain: nftables.Chain{Name: "postrouting", Type: nftables.ChainTypeNAT,
			Hooknum: nftables.ChainHookPostrouting, Priority: nftables.ChainPriorityNATSource}}},
	}
	for i, b := range s.Backends {
		spec.elems = append(spec.elems, nftables.SetElement{Key: nativeUint32(uint32(i)), Val: b.AsSlice()})
	}
	tcp := []expr.Any{
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: reg1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: []byte{unix.IPPROTO_TCP}},
	}
	for _, v := range vips {
		if v.Is4() != s.Source.Is4() {
			continue
		}
		for _, p := range s.Ports {
			dnat := []expr.Any{
				&expr.Payload{DestRegister: reg1, Base: expr.PayloadBaseNetworkHeader, Offset: daddrOff, Len: uint32(alen)},
				&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: v.AsSlice()},
			}
			dnat = append(dnat, tcp...)
			dnat = append(dnat,
				&expr.Payload{DestRegister: reg1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
				&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: []byte{byte(p >> 8), byte(p)}},
				&expr.Numgen{Register: reg1, Modulus: uint32(len(s.Backends)), Type: unix.NFT_NG_INCREMENTAL},
				&expr.Lookup{SourceRegister: reg1, DestRegister: reg1, IsDestRegSet: true},
				&expr.NAT{Type: expr.NATTypeDestNAT, Family: proto, RegAddrMin: reg1},
			)
			spec.rules = append(spec.rules, nftRule{desc: fmt.Sprintf("deal new connections to %s port %d", v, p), exprs: dnat})
		}
		snat := []expr.Any{
			&expr.Ct{Register: reg1, Key: expr.CtKeySTATUS},
			&expr.Bitwise{SourceRegister: reg1, DestRegister: reg1, Len: 4, Mask: nativeUint32(ipsDstNAT), Xor: nativeUint32(0)},
			&expr.Cmp{Op: expr.CmpOpNeq, Register: reg1, Data: nativeUint32(0)},
			&expr.Ct{Register: reg1, Key: expr.CtKeyDST, Direction: 0},
			&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: v.AsSlice()},
		}
		snat = append(snat, tcp...)
		snat = append(snat,
			&expr.Immediate{Register: reg1, Data: s.Source.AsSlice()},
			&expr.NAT{Type: expr.NATTypeSourceNAT, Family: proto, RegAddrMin: reg1},
		)
		spec.more[0].rules = append(spec.more[0].rules, nftRule{desc: fmt.Sprintf("forwarded connections to %s leave from %s", v, s.Source), exprs: snat})
	}
	return spec
}

// nftSpread is the production spreadKernel.
type nftSpread struct {
	nl netlinkTables
	// forwardingFile is where IP forwarding is read (a test points it elsewhere).
	forwardingFile func(ipv6 bool) string
}

var _ spreadKernel = nftSpread{}

func forwardingSysctl(ipv6 bool) string {
	if ipv6 {
		return "/proc/sys/net/ipv6/conf/all/forwarding"
	}
	return "/proc/sys/net/ipv4/ip_forward"
}

func (k nftSpread) install(vips []netip.Addr, s dataplane.Spread) error {
	path := k.forwardingFile(s.Source.Is6())
	if b, err := os.ReadFile(path); err != nil || strings.TrimSpace(string(b)) != "1" {
		return fmt.Errorf("spread needs IP forwarding on this node (%s = 1, which kubeadm's preflight checks too): read %q, %v", path, strings.TrimSpace(string(b)), err)
	}
	other := nftables.TableFamilyIPv6
	if s.Source.Is6() {
		other = nftables.TableFamilyIPv4
	}
	return errors.Join(k.nl.replace(spreadSpec(vips, s)), k.nl.remove(other, SpreadTable))
}

func (k nftSpread) remove() error {
	return errors.Join(k.nl.remove(nftables.TableFamilyIPv4, SpreadTable), k.nl.remove(nftables.TableFamilyIPv6, SpreadTable))
}

func (k nftSpread) backends() ([]netip.Addr, error) {
	c, err := nftables.New()
	if err != nil {
		return nil, fmt.Errorf("nftables: netlink socket: %w", err)
	}
	for _, fam := range []nftables.TableFamily{nftables.TableFamilyIPv4, nftables.TableFamilyIPv6} {
		set, err := c.GetSetByName(&nftables.Table{Family: fam, Name: SpreadTable}, "backends")
		if err != nil {
			continue // no table of this family
		}
		elems, err := c.GetSetElements(set)
		if err != nil {
			return nil, fmt.Errorf("nftables: reading map %s backends: %w", SpreadTable, err)
		}
		out := make([]netip.Addr, len(elems))
		for _, e := range elems {
			i := int(e.Key[0]) | int(e.Key[1])<<8 | int(e.Key[2])<<16 | int(e.Key[3])<<24
			a, ok := netip.AddrFromSlice(e.Val)
			if !ok || i >= len(out) {
				return nil, fmt.Errorf("nftables: map %s backends: unexpected element %v", SpreadTable, e)
			}
			out[i] = a
		}
		return out, nil
	}
	return nil, nil
}

// liveTCP: conntrack TCP states of a connection that still carries data or
// is closing (not TIME_WAIT or CLOSE).
func liveTCP(state uint8) bool {
	return state >= nl.TCP_CONNTRACK_SYN_SENT && state <= nl.TCP_CONNTRACK_LAST_ACK
}

func (k nftSpread) count(vips []netip.Addr) (map[netip.Addr]int, error) {
	out := map[netip.Addr]int{}
	fams := map[netlink.InetFamily]bool{}
	isVIP := map[netip.Addr]bool{}
	for _, v := range vips {
		isVIP[v] = true
		fams[map[bool]netlink.InetFamily{true: unix.AF_INET, false: unix.AF_INET6}[v.Is4()]] = true
	}
	for fam := range fams {
		flows, err := netlink.ConntrackTableList(netlink.ConntrackTable, fam)
		if err != nil {
			return nil, fmt.Errorf("conntrack: listing connections: %w", err)
		}
		for _, f := range flows {
			if f.Forward.Protocol != unix.IPPROTO_TCP {
				continue
			}
			dst, _ := netip.AddrFromSlice(f.Forward.DstIP)
			if !isVIP[dst.Unmap()] {
				continue
			}
			if tcp, ok := f.ProtoInfo.(*netlink.ProtoInfoTCP); ok && !liveTCP(tcp.State) {
				continue
			}
			to, _ := netip.AddrFromSlice(f.Reverse.SrcIP)
			out[to.Unmap()]++
		}
	}
	return out, nil
}
