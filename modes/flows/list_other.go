//go:build !linux

package flows

import (
	"errors"
	"net/netip"
)

// List needs Linux (sock_diag).
func List(vips []netip.Addr, ports []uint16) ([]Flow, error) {
	return nil, errors.New("flows: listing connections needs Linux")
}
