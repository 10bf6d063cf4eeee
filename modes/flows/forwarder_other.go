//go:build !linux

package flows

import (
	"errors"
	"net/netip"
)

var errNotLinux = errors.New("flows: forwarding flows needs Linux (nftables)")

// Forwarder needs Linux (nftables); elsewhere NewForwarder fails.
type Forwarder struct{}

// NewForwarder fails: not Linux.
func NewForwarder(cfg ForwarderConfig) (*Forwarder, error) { return nil, errNotLinux }

// Set fails: not Linux.
func (f *Forwarder) Set(owners map[Flow]netip.Addr) error { return errNotLinux }

// SetVIPs fails: not Linux.
func (f *Forwarder) SetVIPs(vips []netip.Addr) error { return errNotLinux }

// SetPeers fails: not Linux.
func (f *Forwarder) SetPeers(peers []netip.Addr) error { return errNotLinux }

// Held is 0: nothing is held.
func (f *Forwarder) Held() uint64 { return 0 }

// Forwarded is 0: nothing is forwarded.
func (f *Forwarder) Forwarded() uint64 { return 0 }

// HoldFull is 0: nothing is held.
func (f *Forwarder) HoldFull() uint64 { return 0 }

// CopiesLimited is 0: nothing is copied.
func (f *Forwarder) CopiesLimited() uint64 { return 0 }

// Close does nothing.
func (f *Forwarder) Close() error { return nil }

// RemoveStale does nothing: there are no tables.
func RemoveStale() error { return nil }
