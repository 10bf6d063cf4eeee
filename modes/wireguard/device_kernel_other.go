//go:build !linux

package wireguard

import (
	"errors"
	"net/netip"

	"github.com/go-logr/logr"
)

// OpenKernelTunnel is Linux only; elsewhere use the netstack device.
func OpenKernelTunnel(Key, netip.Prefix, netip.Addr, string, int, int, logr.Logger) (*Tunnel, error) {
	return nil, errors.New("wireguard.device tun is supported on Linux only; use netstack")
}
