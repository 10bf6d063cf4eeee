package wireguard

import (
	"encoding/binary"
	"net/netip"
	"testing"

	. "github.com/onsi/gomega"
)

// ipPacket builds an IPv4 or IPv6 packet carrying proto; for TCP (6) a 20-byte header with
// the ports and flags.
func ipPacket(src, dst netip.Addr, proto uint8, sport, dport uint16, flags uint8) []byte {
	var l4 []byte
	if proto == 6 {
		l4 = make([]byte, 20)
		binary.BigEndian.PutUint16(l4[0:], sport)
		binary.BigEndian.PutUint16(l4[2:], dport)
		l4[12] = 5 << 4
		l4[13] = flags
	} else {
		l4 = make([]byte, 8)
	}
	if src.Is4() {
		h := make([]byte, 20)
		h[0] = 0x45
		binary.BigEndian.PutUint16(h[2:], uint16(20+len(l4)))
		h[8], h[9] = 64, proto
		copy(h[12:], src.AsSlice())
		copy(h[16:], dst.AsSlice())
		return append(h, l4...)
	}
	h := make([]byte, 40)
	h[0] = 0x60
	binary.BigEndian.PutUint16(h[4:], uint16(len(l4)))
	h[6], h[7] = proto, 64
	copy(h[8:], src.AsSlice())
	copy(h[24:], dst.AsSlice())
	return append(h, l4...)
}

func TestTunnelFilters(t *testing.T) {
	gw6, self6, other6 := netip.MustParseAddr("fd63:6c62:7767::1"), netip.MustParseAddr("fd63:6c62:7767::2"), netip.MustParseAddr("fd00::9")
	gw4, self4, node4 := netip.MustParseAddr("10.231.0.1"), netip.MustParseAddr("10.231.0.2"), netip.MustParseAddr("192.168.1.10")
	fragment := ipPacket(gw4, self4, 6, 40000, 6443, tcpSYN)
	fragment[6] = 0x20 // more fragments
	laterFragment := ipPacket(gw4, self4, 6, 40000, 6443, tcpSYN)
	binary.BigEndian.PutUint16(laterFragment[6:], 8) // offset 64 bytes: its "ports" are payload
	withExtension := ipPacket(gw6, self6, 6, 40000, 6443, tcpSYN)
	withExtension[6] = 0 // hop-by-hop options before TCP
	tests := []struct {
		name            string
		pkt             []byte
		member, gateway bool
		opens, ends     bool
	}{
		{"member: SYN to the API port (IPv6)", ipPacket(gw6, self6, 6, 40000, 6443, tcpSYN), true, false, true, false},
		{"member: SYN to the API port (IPv4)", ipPacket(gw4, self4, 6, 40000, 6443, tcpSYN), true, false, true, false},
		{"member: data to the API port", ipPacket(gw6, self6, 6, 40000, 6443, tcpACK), true, false, false, false},
		{"member: FIN to the API port", ipPacket(gw6, self6, 6, 40000, 6443, tcpFIN|tcpACK), true, false, false, true},
		{"member: kubelet's port", ipPacket(gw6, self6, 6, 40000, 10250, tcpSYN), false, false, true, false},
		{"member: SSH", ipPacket(gw4, self4, 6, 40000, 22, tcpSYN), false, false, true, false},
		{"member: API port on another of the node's addresses", ipPacket(gw4, node4, 6, 40000, 6443, tcpSYN), false, false, true, false},
		{"member: API port on another tunnel address", ipPacket(gw6, other6, 6, 40000, 6443, tcpSYN), false, false, true, false},
		{"UDP", ipPacket(gw6, self6, 17, 40000, 6443, 0), false, false, false, false},
		{"ICMP", ipPacket(gw4, self4, 1, 0, 0, 0), false, false, false, false},
		{"first IPv4 fragment", fragment, false, false, false, false},
		{"later IPv4 fragment", laterFragment, false, false, false, false},
		{"IPv6 extension header", withExtension, false, false, false, false},
		{"truncated TCP header", ipPacket(gw6, self6, 6, 40000, 6443, tcpSYN)[:50], false, false, false, false},
		{"truncated IP header", []byte{0x45, 0, 0}, false, false, false, false},
		{"not IP", []byte{0x00, 1, 2, 3}, false, false, false, false},
		{"empty", nil, false, false, false, false},
		{"gateway: member's SYN-ACK", ipPacket(self6, gw6, 6, 6443, 40000, tcpSYN|tcpACK), false, true, false, false},
		{"gateway: member's data", ipPacket(self4, gw4, 6, 6443, 40000, tcpACK), false, true, false, false},
		{"gateway: member's RST", ipPacket(self4, gw4, 6, 6443, 40000, tcpRST), false, true, false, true},
		{"gateway: a new connection from a member", ipPacket(self6, gw6, 6, 6443, 22, tcpSYN), false, false, true, false},
		{"gateway: from another port of a member", ipPacket(self6, gw6, 6, 10250, 40000, tcpACK), false, false, false, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			p := parsePacket(tc.pkt)
			self, gw := self6, gw6
			if p.src.Is4() {
				self, gw = self4, gw4
			}
			if p.dst == gw { // a packet towards the gateway
				self = gw
			}
			g.Expect(memberAdmits(p, self, 6443)).To(Equal(tc.member), "member")
			g.Expect(gatewayAdmits(p, self, 6443)).To(Equal(tc.gateway), "gateway")
			g.Expect(p.opensConnection()).To(Equal(tc.opens), "opens")
			g.Expect(p.endsConnection()).To(Equal(tc.ends), "ends")
		})
	}
}
