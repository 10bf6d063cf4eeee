//go:build !linux

package wireguard

import (
	"errors"
	"net/netip"

	"github.com/go-logr/logr"
	"golang.zx2c4.com/wireguard/tun"
)

// hostTUN is Linux only; elsewhere the netstack device is the one that works.
type hostTUN struct{}

func openHostTUN(string, netip.Prefix, int, logr.Logger) (*hostTUN, error) {
	return nil, errors.New("device tun needs Linux; use device: netstack")
}

func (*hostTUN) attach(netip.Addr, func([]byte) bool) (tun.Device, error) {
	return nil, errors.New("device tun needs Linux")
}

func (*hostTUN) Close() {}
