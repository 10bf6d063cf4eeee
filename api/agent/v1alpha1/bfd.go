package v1alpha1

import (
	"fmt"
	"net/netip"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// BFD defaults: a frozen member's routes leave the router after 300 ms x 3.
const (
	DefaultBFDInterval   = 300 * time.Millisecond
	DefaultBFDMultiplier = 3
	minBFDInterval       = 10 * time.Millisecond
	maxBFDInterval       = time.Minute
)

// BFDConfig runs single-hop BFD (RFC 5880, 5881) to one BGP peer (modes/bfd), started once the BGP
// session is established: the peer drops this member's routes when it stops hearing from it.
type BFDConfig struct {
	// MinRx is the fastest this member accepts control packets at. Default 300ms.
	MinRx *metav1.Duration `json:"minRx,omitempty"`
	// MinTx is how often this member would like to send once the session is up. Default 300ms.
	MinTx *metav1.Duration `json:"minTx,omitempty"`
	// Multiplier: the peer declares this member down after this many intervals without a
	// packet. Default 3.
	Multiplier uint8 `json:"multiplier,omitempty"`
}

// Timers returns the configured timers with their defaults.
func (b *BFDConfig) Timers() (minRx, minTx time.Duration, multiplier uint8) {
	multiplier = b.Multiplier
	if multiplier == 0 {
		multiplier = DefaultBFDMultiplier
	}
	return DurationOr(b.MinRx, DefaultBFDInterval), DurationOr(b.MinTx, DefaultBFDInterval), multiplier
}

// validate checks b for the peer at addr; f names the field.
func (b *BFDConfig) validate(f string, addr netip.Addr) []error {
	var errs []error
	if addr.IsValid() && !addr.Is4() {
		errs = append(errs, fmt.Errorf("%s: BFD runs to IPv4 peers only; remove it from the IPv6 peer %s", f, addr))
	}
	minRx, minTx, mult := b.Timers()
	for _, x := range []struct {
		name string
		d    time.Duration
	}{{"minRx", minRx}, {"minTx", minTx}} {
		if x.d < minBFDInterval || x.d > maxBFDInterval {
			errs = append(errs, fmt.Errorf("%s.%s: %s is outside 10ms to 60s (300ms is usual)", f, x.name, x.d))
		}
	}
	if mult < 2 {
		errs = append(errs, fmt.Errorf("%s.multiplier: %d; use 2 or more (3 is usual): one lost packet must not take the routes away", f, mult))
	}
	return errs
}
