//go:build !linux

package flows

import (
	"errors"
	"net/netip"
)

// List needs Linux (sock_diag).
func List(vips []netip.Addr, ports []uint16) (Listing, error) {
	return Listing{}, errors.New("flows: listing connections needs Linux")
}
