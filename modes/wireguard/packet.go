package wireguard

import (
	"encoding/binary"
	"net/netip"
)

// packet is what the TUN device's filters read from one IP packet: addresses, and for an
// unfragmented TCP segment its ports and flags. Anything else has tcp false.
type packet struct {
	src, dst   netip.Addr
	tcp        bool
	sport      uint16
	dport      uint16
	flags      uint8 // TCP flags byte (FIN 0x01, SYN 0x02, RST 0x04, ACK 0x10)
	unparsable bool
}

// TCP flags.
const (
	tcpFIN = 0x01
	tcpSYN = 0x02
	tcpRST = 0x04
	tcpACK = 0x10
)

// parsePacket reads an IPv4 or IPv6 packet. A fragment, an IPv6 packet with extension headers
// and a truncated packet are never tcp: a filter that admits only TCP to one port must not be
// walked around by a fragment whose ports it cannot see.
func parsePacket(b []byte) packet {
	if len(b) < 1 {
		return packet{unparsable: true}
	}
	var p packet
	var l4 []byte
	switch b[0] >> 4 {
	case 4:
		if len(b) < 20 {
			return packet{unparsable: true}
		}
		ihl := int(b[0]&0x0f) * 4
		if ihl < 20 || len(b) < ihl {
			return packet{unparsable: true}
		}
		p.src = netip.AddrFrom4([4]byte(b[12:16]))
		p.dst = netip.AddrFrom4([4]byte(b[16:20]))
		fragment := binary.BigEndian.Uint16(b[6:8])&0x3fff != 0 // MF or an offset
		if b[9] != 6 || fragment {
			return p
		}
		l4 = b[ihl:]
	case 6:
		if len(b) < 40 {
			return packet{unparsable: true}
		}
		p.src = netip.AddrFrom16([16]byte(b[8:24]))
		p.dst = netip.AddrFrom16([16]byte(b[24:40]))
		if b[6] != 6 { // next header: TCP directly, no extension headers
			return p
		}
		l4 = b[40:]
	default:
		return packet{unparsable: true}
	}
	if len(l4) < 20 {
		return p
	}
	p.tcp = true
	p.sport = binary.BigEndian.Uint16(l4[0:2])
	p.dport = binary.BigEndian.Uint16(l4[2:4])
	p.flags = l4[13]
	return p
}

// opensConnection: a SYN without ACK, the first segment of a connection.
func (p packet) opensConnection() bool { return p.tcp && p.flags&(tcpSYN|tcpACK) == tcpSYN }

// endsConnection: a FIN or RST.
func (p packet) endsConnection() bool { return p.tcp && p.flags&(tcpFIN|tcpRST) != 0 }

// memberAdmits is the member's inbound filter on a TUN device: only TCP to its own tunnel
// address and the API server's port. Everything else the node listens on (kubelet, SSH, etcd on
// all addresses) stays out of the gateways' reach, and a packet to another of the node's
// addresses (which Linux would accept on any interface) is dropped.
func memberAdmits(p packet, self netip.Addr, port uint16) bool {
	return p.tcp && p.dst == self && p.dport == port
}

// gatewayAdmits is the gateway's inbound filter on a TUN device: only the members' side of
// connections the gateway opened (from the member port, to the gateway's address, never a new
// connection). Nothing on the gateway host is reachable from the tunnel.
func gatewayAdmits(p packet, self netip.Addr, memberPort uint16) bool {
	return p.tcp && p.dst == self && p.sport == memberPort && !p.opensConnection()
}
