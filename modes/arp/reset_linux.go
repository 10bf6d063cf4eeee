//go:build linux

package arp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"syscall"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// tcpListen is the kernel's TCP_LISTEN state (include/net/tcp_states.h).
const tcpListen = 10

// resetConnections aborts the TCP connections whose local address is vip (SOCK_DESTROY: the
// kernel sends the peer a RST), for a VIP this node is about to remove. Without it the address
// goes and the connections are left blackholed: their next segments reach the new owner, or
// nobody, and the client waits for its timeout. With it a client learns at once that the
// connection is gone: an idle kept-alive connection is dropped before it is reused, a GET in
// flight is retried on a new connection (net/http, client-go) — which reaches the new owner —
// and a watch reopens. It returns how many connections it reset.
func resetConnections(vip netip.Addr) (int, error) {
	// An IPv4 VIP's connections may sit on IPv6 sockets too (a server listening on [::]
	// accepts IPv4 as v4-mapped addresses: Go's ":6443", kube-apiserver's default).
	families := []uint8{syscall.AF_INET6}
	if vip.Is4() {
		families = append(families, syscall.AF_INET)
	}
	n := 0
	var errs []error
	for _, fam := range families {
		socks, err := netlink.SocketDiagTCP(fam)
		if err != nil {
			return n, fmt.Errorf("arp: list TCP sockets: %w", err)
		}
		for _, s := range socks {
			local, ok := netip.AddrFromSlice(s.ID.Source)
			if !ok || local.Unmap() != vip || s.State == tcpListen {
				continue
			}
			if err := destroySocket(s); err != nil {
				if errors.Is(err, syscall.ENOENT) {
					continue // closed meanwhile
				}
				errs = append(errs, fmt.Errorf("%s:%d -> %s:%d: %w", s.ID.Source, s.ID.SourcePort, s.ID.Destination, s.ID.DestinationPort, err))
				continue
			}
			n++
		}
	}
	if len(errs) > 0 {
		return n, fmt.Errorf("arp: reset connections to %s: %w", vip, errors.Join(errs...))
	}
	return n, nil
}

// destroySocket sends SOCK_DESTROY for one socket as the dump described it (family, addresses,
// ports, cookie). netlink.SocketDestroy handles AF_INET only.
func destroySocket(s *netlink.Socket) error {
	req := nl.NewNetlinkRequest(nl.SOCK_DESTROY, unix.NLM_F_ACK)
	req.AddData(&diagReq{s: s})
	_, err := req.Execute(unix.NETLINK_INET_DIAG, 0)
	return err
}

// diagReq is struct inet_diag_req_v2 (linux/inet_diag.h).
type diagReq struct{ s *netlink.Socket }

func (d *diagReq) Len() int { return 56 }

func (d *diagReq) Serialize() []byte {
	b := make([]byte, 56)
	b[0], b[1] = d.s.Family, unix.IPPROTO_TCP
	nl.NativeEndian().PutUint32(b[4:], 0xfff) // every state
	binary.BigEndian.PutUint16(b[8:], d.s.ID.SourcePort)
	binary.BigEndian.PutUint16(b[10:], d.s.ID.DestinationPort)
	addr := func(off int, ip net.IP) {
		if d.s.Family == unix.AF_INET {
			copy(b[off:off+4], ip.To4())
		} else {
			copy(b[off:off+16], ip.To16())
		}
	}
	addr(12, d.s.ID.Source)
	addr(28, d.s.ID.Destination)
	nl.NativeEndian().PutUint32(b[44:], d.s.ID.Interface)
	nl.NativeEndian().PutUint32(b[48:], d.s.ID.Cookie[0])
	nl.NativeEndian().PutUint32(b[52:], d.s.ID.Cookie[1])
	return b
}
