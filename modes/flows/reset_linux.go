//go:build linux

package flows

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// tcpListen is the kernel's TCP_LISTEN state (include/net/tcp_states.h).
const tcpListen = 10

// ResetConnections aborts the TCP connections whose local address is vip (SOCK_DESTROY: the
// kernel sends the peer a RST), for a VIP this node is about to remove. Without it the address
// goes and the connections are left blackholed: their next segments reach the new owner, or
// nobody, and the client waits for its timeout. With it a client learns at once that the
// connection is gone: an idle kept-alive connection is dropped before it is reused, a GET in
// flight is retried on a new connection (net/http, client-go) — which reaches the new owner —
// and a watch reopens.
//
// A request in flight when its connection is reset fails, and client-go resends only GETs: a
// write would reach its caller as an error. So a connection that looks busy — the server
// received data after it last sent any (a request it has not answered), or it has data the
// client has not acknowledged yet (an answer on the way), or its byte counts changed within
// settleFor (an answer sent in parts) — is reset only once it turns quiet, or when patience runs
// out. It returns how many connections it reset.
func ResetConnections(vip netip.Addr, patience time.Duration) (int, error) {
	deadline := time.Now().Add(patience)
	n := 0
	var errs []error
	var quiet settler
	for {
		socks, err := vipSockets(vip)
		if err != nil {
			return n, err
		}
		now := time.Now()
		late := !now.Before(deadline)
		waiting := 0
		for _, s := range socks {
			if !late && (busy(s) || !settled(&quiet, s, now)) {
				waiting++
				continue
			}
			if err := destroySocket(s.InetDiagMsg); err != nil {
				if errors.Is(err, syscall.ENOENT) {
					continue // closed meanwhile
				}
				id := s.InetDiagMsg.ID
				errs = append(errs, fmt.Errorf("%s:%d -> %s:%d: %w", id.Source, id.SourcePort, id.Destination, id.DestinationPort, err))
				continue
			}
			n++
		}
		if waiting == 0 || len(errs) > 0 {
			break
		}
		time.Sleep(quietPoll)
	}
	if len(errs) > 0 {
		return n, fmt.Errorf("flows: reset connections to %s: %w", vip, errors.Join(errs...))
	}
	return n, nil
}

// settled: an established connection's byte counts stayed the same for settleFor (others have
// nothing in flight to wait for).
func settled(q *settler, s *netlink.InetDiagTCPInfoResp, now time.Time) bool {
	i := s.TCPInfo
	if i == nil || s.InetDiagMsg.State != tcpEstablished {
		return true
	}
	key := uint64(s.InetDiagMsg.ID.Cookie[1])<<32 | uint64(s.InetDiagMsg.ID.Cookie[0])
	return q.settled(key, i.Bytes_received, i.Bytes_sent, now)
}

// quietPoll is how often a busy connection is looked at again: a request to an API server is
// answered in a few milliseconds.
const quietPoll = 2 * time.Millisecond

// busy: the socket may carry a request in flight. tcpi_last_data_recv and _sent are
// milliseconds since the last data segment each way. Received and sent within the same
// millisecond (a request right behind the TLS handshake, or one answered at once) cannot be
// told apart: such a socket counts as busy for sameMillisecondBusy, long enough for an API
// server to answer an ordinary request.
func busy(s *netlink.InetDiagTCPInfoResp) bool {
	i := s.TCPInfo
	if i == nil || s.InetDiagMsg.State != tcpEstablished {
		return false
	}
	return i.Unacked > 0 || i.Notsent_bytes > 0 || i.Last_data_recv < i.Last_data_sent ||
		(i.Last_data_recv == i.Last_data_sent && i.Last_data_recv < sameMillisecondBusy)
}

// sameMillisecondBusy: see busy.
const sameMillisecondBusy = 100 // ms

// vipSockets lists the TCP sockets whose local address is vip, listeners aside, with their
// tcp_info.
func vipSockets(vip netip.Addr) ([]*netlink.InetDiagTCPInfoResp, error) {
	return vipSocketsIn([]netip.Addr{vip}, statesAll, true)
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
