//go:build linux

package flows

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// Every reader of the VIPs' connections (the flow list, the busy sampler, the reset) asks the
// kernel for those sockets only: an inet_diag bytecode filter on the local address. A full dump
// of an API server's node (thousands of sockets: etcd, kubelets, controllers) every 100 ms was
// most of the work, and grows with the node's own connections, not the VIP's (issue 32).

const (
	inetDiagReqBytecode = 1 // INET_DIAG_REQ_BYTECODE (linux/inet_diag.h)
	inetDiagBcJmp       = 1 // INET_DIAG_BC_JMP
	inetDiagBcSCond     = 7 // INET_DIAG_BC_S_COND
	sizeofInetDiagMsg   = 72
)

// States for vipSockets' mask (1 << TCP state).
const (
	statesAll         = 0xfff &^ (1 << tcpListen)
	statesEstablished = 1 << tcpEstablished
)

// vipFilter is the bytecode that keeps the sockets whose local address is one of vips, laid out
// as ss(8) compiles an OR, because the kernel's audit wants every target reachable along the
// "yes" jumps: each condition's "yes" goes on to a JMP whose "no" (a JMP always takes it) lands at
// the end, accepting; its "no" skips that JMP to the next condition; the last one's "no" jumps
// past the end, rejecting. An IPv4 condition also matches the v4-mapped address of an AF_INET6
// socket (a dual-stack listener's IPv4 client), as the kernel applies it.
func vipFilter(vips []netip.Addr) []byte {
	ne := nl.NativeEndian()
	var conds [][]byte
	for _, v := range vips {
		v = v.Unmap().WithZone("")
		family, addr := byte(unix.AF_INET6), v.AsSlice()
		if v.Is4() {
			family = unix.AF_INET
		}
		op := make([]byte, 4+8+len(addr))
		op[0] = inetDiagBcSCond
		op[4], op[5] = family, byte(8*len(addr)) // hostcond: family, prefix_len
		ne.PutUint32(op[8:], 0xffffffff)         // port -1: any
		copy(op[12:], addr)
		op[1] = byte(len(op))                   // yes: the next op
		ne.PutUint16(op[2:], uint16(len(op)+4)) // no: skip the JMP after it (or past the end)
		conds = append(conds, op)
	}
	total := 4 * (len(conds) - 1)
	for _, c := range conds {
		total += len(c)
	}
	var out []byte
	for i, c := range conds {
		out = append(out, c...)
		if i == len(conds)-1 {
			break
		}
		jmp := make([]byte, 4)
		jmp[0], jmp[1] = inetDiagBcJmp, 4
		ne.PutUint16(jmp[2:], uint16(total-len(out))) // to the end: accept
		out = append(out, jmp...)
	}
	return out
}

func nlaAlign(n int) int { return (n + 3) &^ 3 }

// vipSocketsIn returns the TCP sockets in states whose local address is one of vips, with their
// tcp_info when withInfo.
func vipSocketsIn(vips []netip.Addr, states uint32, withInfo bool) ([]*netlink.InetDiagTCPInfoResp, error) {
	if len(vips) == 0 {
		return nil, nil
	}
	var ext uint8
	if withInfo {
		ext = 1 << (netlink.INET_DIAG_INFO - 1)
	}
	// An IPv4 VIP's connections may sit on AF_INET6 sockets too (a listener on [::]), so both
	// families are read, in one request: the kernel walks its whole TCP hash table (262,144
	// buckets on a machine with a few GiB) for every dump, whatever the filter keeps, and that
	// walk was the flow list's cost (1 ms per family here, every 100 ms on every BGP member).
	// The original request (TCPDIAG_GETSOCK, inet_diag_req) dumps both families in one walk;
	// SOCK_DIAG_BY_FAMILY takes one family per walk.
	req := nl.NewNetlinkRequest(tcpDiagGetSock, unix.NLM_F_DUMP)
	req.AddData(&diagDumpBoth{ext: ext, states: states, bytecode: vipFilter(vips)})
	var out []*netlink.InetDiagTCPInfoResp
	var perr error
	err := req.ExecuteIter(unix.NETLINK_INET_DIAG, tcpDiagGetSock, func(msg []byte) bool {
		s, err := parseDiagMsg(msg)
		if err != nil {
			perr = err
			return false
		}
		out = append(out, s)
		return true
	})
	if err == nil {
		err = perr
	}
	if err != nil {
		return nil, fmt.Errorf("flows: listing the VIPs' TCP sockets: %w", err)
	}
	return out, nil
}

// tcpDiagGetSock is TCPDIAG_GETSOCK (linux/inet_diag.h): a dump of TCP sockets of both families.
const tcpDiagGetSock = 18

// sizeofDiagReqV1 is the size of struct inet_diag_req.
const sizeofDiagReqV1 = 60

// diagDumpBoth is an inet_diag_req (the request before inet_diag_req_v2, which the kernel serves
// with the family unspecified: IPv4 and IPv6 sockets in one walk) with a bytecode filter.
type diagDumpBoth struct {
	ext      uint8
	states   uint32
	bytecode []byte
}

func (d *diagDumpBoth) Len() int { return sizeofDiagReqV1 + nlaAlign(4+len(d.bytecode)) }

func (d *diagDumpBoth) Serialize() []byte {
	b := make([]byte, d.Len())
	b[0], b[3] = unix.AF_INET, d.ext // idiag_family: not read for a dump
	nl.NativeEndian().PutUint32(b[52:], d.states)
	attr := b[sizeofDiagReqV1:]
	nl.NativeEndian().PutUint16(attr[0:], uint16(4+len(d.bytecode)))
	nl.NativeEndian().PutUint16(attr[2:], inetDiagReqBytecode)
	copy(attr[4:], d.bytecode)
	return b
}

// parseDiagMsg reads an inet_diag_msg and its INET_DIAG_INFO attribute (the fields of tcp_info
// the readers use).
func parseDiagMsg(b []byte) (*netlink.InetDiagTCPInfoResp, error) {
	if len(b) < sizeofInetDiagMsg {
		return nil, fmt.Errorf("inet_diag_msg: %d bytes, want %d", len(b), sizeofInetDiagMsg)
	}
	ne := nl.NativeEndian()
	s := &netlink.Socket{Family: b[0], State: b[1], Timer: b[2], Retrans: b[3]}
	s.ID.SourcePort = binary.BigEndian.Uint16(b[4:])
	s.ID.DestinationPort = binary.BigEndian.Uint16(b[6:])
	if s.Family == unix.AF_INET6 {
		s.ID.Source = net.IP(append([]byte(nil), b[8:24]...))
		s.ID.Destination = net.IP(append([]byte(nil), b[24:40]...))
	} else {
		s.ID.Source = net.IPv4(b[8], b[9], b[10], b[11])
		s.ID.Destination = net.IPv4(b[24], b[25], b[26], b[27])
	}
	s.ID.Interface = ne.Uint32(b[40:])
	s.ID.Cookie[0], s.ID.Cookie[1] = ne.Uint32(b[44:]), ne.Uint32(b[48:])
	s.Expires, s.RQueue, s.WQueue = ne.Uint32(b[52:]), ne.Uint32(b[56:]), ne.Uint32(b[60:])
	s.UID, s.INode = ne.Uint32(b[64:]), ne.Uint32(b[68:])
	resp := &netlink.InetDiagTCPInfoResp{InetDiagMsg: s}
	attrs, err := nl.ParseRouteAttr(b[sizeofInetDiagMsg:])
	if err != nil {
		return nil, fmt.Errorf("inet_diag attributes: %w", err)
	}
	for _, a := range attrs {
		if a.Attr.Type == netlink.INET_DIAG_INFO {
			resp.TCPInfo = parseTCPInfo(a.Value)
		}
	}
	return resp, nil
}

// parseTCPInfo reads the struct tcp_info fields the readers use (linux/tcp.h offsets); a kernel
// older than a field leaves it zero.
func parseTCPInfo(b []byte) *netlink.TCPInfo {
	ne := nl.NativeEndian()
	u32 := func(off int) uint32 {
		if len(b) < off+4 {
			return 0
		}
		return ne.Uint32(b[off:])
	}
	u64 := func(off int) uint64 {
		if len(b) < off+8 {
			return 0
		}
		return ne.Uint64(b[off:])
	}
	i := &netlink.TCPInfo{
		Unacked:        u32(24),
		Last_data_sent: u32(44),
		Last_data_recv: u32(52),
		Bytes_acked:    u64(120),
		Bytes_received: u64(128),
		Notsent_bytes:  u32(144),
		Bytes_sent:     u64(200),
	}
	if len(b) > 0 {
		i.State = b[0]
	}
	return i
}
