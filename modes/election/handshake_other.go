//go:build !linux

package election

import (
	"net"
	"net/netip"
	"time"
)

// kernelHandshake reports whether the listener at addr completes a TCP
// handshake by deadline. Elsewhere than Linux (the agent's platform) it is
// Go's dialer, whose timer may fire before its poller reports a handshake
// that completed while this process was starved of CPU.
func kernelHandshake(addr netip.AddrPort, deadline time.Time, label string) bool {
	d := net.Dialer{Deadline: deadline}
	c, err := d.Dial("tcp", addr.String())
	if err != nil {
		return false
	}
	sendLabel(c, label)
	return true
}
