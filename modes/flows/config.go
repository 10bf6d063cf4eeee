package flows

import "slices"

// Defaults of ForwarderConfig.
const (
	// DefaultCopyRate and DefaultCopyBurst bound the held segments copied to the peers, per
	// family: far above the segments of the connections one rehash moves within a sharing
	// interval (a member's share of a control plane's clients), far below what spoofed 4-tuples
	// could make every member send to every other.
	DefaultCopyRate  = 2000
	DefaultCopyBurst = 2000
	// DefaultHoldEntries sizes the held and seen sets (each, per family): twice MaxFlows. An
	// entry takes about 150 bytes of kernel memory, so a full set costs about 20 MiB.
	DefaultHoldEntries = 2 * MaxFlows
)

// ForwarderConfig bounds what segments nobody here knows may cost.
type ForwarderConfig struct {
	// Ports are the ports the VIPs serve: only segments to them are held and copied to the
	// peers. Empty: every port.
	Ports []uint16
	// CopyRate is how many held segments a second are copied to the peers, CopyBurst how many
	// at once; beyond, a held segment is only dropped (its owner gets the client's
	// retransmission once its list names the connection). 0: the defaults.
	CopyRate  uint64
	CopyBurst uint32
	// HoldEntries is the size of the held and seen sets. 0: DefaultHoldEntries.
	HoldEntries uint32
}

// withDefaults fills in the zero fields and sorts the ports.
func (c ForwarderConfig) withDefaults() ForwarderConfig {
	if c.CopyRate == 0 {
		c.CopyRate = DefaultCopyRate
	}
	if c.CopyBurst == 0 {
		c.CopyBurst = DefaultCopyBurst
	}
	if c.HoldEntries == 0 {
		c.HoldEntries = DefaultHoldEntries
	}
	c.Ports = slices.Compact(slices.Sorted(slices.Values(c.Ports)))
	return c
}
