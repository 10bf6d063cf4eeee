//go:build !linux

package arp

import (
	"context"
	"errors"
	"net/netip"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/caplb/caplb/modes/dataplane"
)

var errLinuxOnly = errors.New("arp: the ARP/NDP data plane needs Linux")

// Announcer is the ARP/NDP data plane; it only works on Linux.
type Announcer struct{}

var _ dataplane.Dataplane = &Announcer{}

// New fails: Linux only.
func New(Config, logr.Logger, prometheus.Registerer) (*Announcer, error) { return nil, errLinuxOnly }

// Sync fails: Linux only.
func (*Announcer) Sync(context.Context, dataplane.Desired) error { return errLinuxOnly }

// Close does nothing.
func (*Announcer) Close(context.Context) error { return nil }

// BusyConnections is 0: nothing is held.
func (*Announcer) BusyConnections() int { return 0 }

// Status is empty.
func (*Announcer) Status() dataplane.Status { return dataplane.Status{} }

// RemoveStale fails: Linux only.
func RemoveStale([]netip.Addr) ([]string, error) { return nil, errLinuxOnly }

// InterfaceFor fails: Linux only.
func InterfaceFor(netip.Addr) (string, error) { return "", errLinuxOnly }
