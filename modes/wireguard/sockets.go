package wireguard

import (
	"bufio"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"strconv"
	"strings"
)

// openTCPConnections counts the node's TCP sockets on local address ap that are connections
// (not listening, not TIME_WAIT or closed): what the API server holds open through a member's
// TUN device. Connections still in the listener's queues count too (the kernel lists them),
// so a drain never ends under a connection the gateway has just opened.
func openTCPConnections(ap netip.AddrPort) (int, error) {
	return countProcTCP(func(r io.Reader) (int, error) { return countTCPConnections(r, ap) })
}

// listenersFor counts the node's TCP listeners that accept connections to ap: on ap itself or on
// the unspecified address of its family, or on :: for an IPv4 ap (a dual-stack listener, as Go
// and kube-apiserver make for "0.0.0.0" and ":port").
func listenersFor(ap netip.AddrPort) (int, error) {
	return countProcTCP(func(r io.Reader) (int, error) { return countTCPListeners(r, ap) })
}

// countProcTCP sums count over /proc/net/tcp and /proc/net/tcp6.
func countProcTCP(count func(io.Reader) (int, error)) (int, error) {
	total := 0
	for _, path := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		f, err := os.Open(path)
		if errors.Is(err, os.ErrNotExist) {
			continue // no IPv6 (or IPv4) on this node
		}
		if err != nil {
			return 0, err
		}
		n, err := count(f)
		f.Close()
		if err != nil {
			return 0, fmt.Errorf("%s: %w", path, err)
		}
		total += n
	}
	return total, nil
}

// TCP states in /proc/net/tcp (include/net/tcp_states.h) that are not connections.
const (
	tcpStateTimeWait = 0x06
	tcpStateClose    = 0x07
	tcpStateListen   = 0x0A
)

// countTCPConnections reads /proc/net/tcp or tcp6 text. An IPv4 connection accepted by a
// dual-stack listener appears in tcp6 as ::ffff:a.b.c.d; it counts for the IPv4 address.
func countTCPConnections(r io.Reader, ap netip.AddrPort) (int, error) {
	return scanProcTCP(r, func(local netip.AddrPort, state uint64) bool {
		switch state {
		case tcpStateTimeWait, tcpStateClose, tcpStateListen:
			return false
		}
		return local.Addr().Unmap() == ap.Addr().Unmap() && local.Port() == ap.Port()
	})
}

// countTCPListeners reads /proc/net/tcp or tcp6 text for listeners that take connections to ap.
func countTCPListeners(r io.Reader, ap netip.AddrPort) (int, error) {
	want := ap.Addr().Unmap()
	return scanProcTCP(r, func(local netip.AddrPort, state uint64) bool {
		if state != tcpStateListen || local.Port() != ap.Port() {
			return false
		}
		a := local.Addr()
		switch {
		case a.Unmap() == want:
			return true
		case a.IsUnspecified():
			return a.Is4() == want.Is4() || (a.Is6() && want.Is4())
		}
		return false
	})
}

// scanProcTCP counts the sockets of /proc/net/tcp or tcp6 text that match.
func scanProcTCP(r io.Reader, match func(local netip.AddrPort, state uint64) bool) (int, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	n := 0
	first := true
	for sc.Scan() {
		if first { // header
			first = false
			continue
		}
		fields := strings.Fields(sc.Text())
		if len(fields) < 4 {
			continue
		}
		local, err := parseProcAddrPort(fields[1])
		if err != nil {
			return 0, err
		}
		state, err := strconv.ParseUint(fields[3], 16, 8)
		if err != nil {
			return 0, fmt.Errorf("state %q: %w", fields[3], err)
		}
		if match(local, state) {
			n++
		}
	}
	return n, sc.Err()
}

// parseProcAddrPort reads "0100007F:1A0B" (IPv4) or 32 hex digits and a port (IPv6): the
// address is printed as 32-bit words in the host's byte order, the port in hex.
func parseProcAddrPort(s string) (netip.AddrPort, error) {
	a, p, ok := strings.Cut(s, ":")
	if !ok {
		return netip.AddrPort{}, fmt.Errorf("address %q: no port", s)
	}
	port, err := strconv.ParseUint(p, 16, 16)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("address %q: %w", s, err)
	}
	raw, err := hex.DecodeString(a)
	if err != nil || (len(raw) != 4 && len(raw) != 16) {
		return netip.AddrPort{}, fmt.Errorf("address %q is not 8 or 32 hex digits", s)
	}
	var b [16]byte
	for i := 0; i < len(raw); i += 4 {
		binary.NativeEndian.PutUint32(b[i:], binary.BigEndian.Uint32(raw[i:]))
	}
	if len(raw) == 4 {
		return netip.AddrPortFrom(netip.AddrFrom4([4]byte(b[:4])), uint16(port)), nil
	}
	return netip.AddrPortFrom(netip.AddrFrom16(b), uint16(port)), nil
}
