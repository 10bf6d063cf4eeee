package flows

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
)

// codecVersion is the first byte of an encoded list. A member that cannot read a peer's version
// ignores that peer's flows (they are reset, as without this package) rather than misread them.
const codecVersion = 1

// Encoded form, version 1: a member's flows are mostly to one or two services (VIP and port),
// so flows are grouped by service and a client costs 6 bytes (IPv4) or 18 (IPv6):
//
//	version            1 byte (1)
//	groups             uvarint
//	per group:
//	  family           1 byte (4 or 6)
//	  service          address (4 or 16 bytes), port (2 bytes, big-endian)
//	  clients          uvarint (at least 1)
//	  per client:      address (4 or 16 bytes), port (2 bytes, big-endian)

// Encode returns the compact, versioned binary form of flows for gossip. Flows are sorted and
// deduplicated first (Decode returns them in List's order); IPv4-mapped addresses are sent as
// IPv4, zones are dropped, and a malformed flow (an invalid address, or ends of two families) is
// left out, as is anything beyond the first MaxFlows.
func Encode(flows []Flow) []byte {
	clean := make([]Flow, 0, len(flows))
	for _, f := range flows {
		if n, ok := normalize(f); ok {
			clean = append(clean, n)
		}
	}
	clean = sortFlows(clean)
	if len(clean) > MaxFlows {
		clean = clean[:MaxFlows]
	}
	groups := 0
	for i := range clean {
		if i == 0 || clean[i].Service != clean[i-1].Service {
			groups++
		}
	}
	out := []byte{codecVersion}
	out = binary.AppendUvarint(out, uint64(groups))
	for i := 0; i < len(clean); {
		svc := clean[i].Service
		j := i
		for j < len(clean) && clean[j].Service == svc {
			j++
		}
		fam := byte(6)
		if svc.Addr().Is4() {
			fam = 4
		}
		out = append(out, fam)
		out = appendAddrPort(out, svc)
		out = binary.AppendUvarint(out, uint64(j-i))
		for _, f := range clean[i:j] {
			out = appendAddrPort(out, f.Client)
		}
		i = j
	}
	return out
}

func appendAddrPort(b []byte, ap netip.AddrPort) []byte {
	b = append(b, ap.Addr().AsSlice()...)
	return binary.BigEndian.AppendUint16(b, ap.Port())
}

// Decode parses what Encode produced. It never panics, and it rejects input that is truncated,
// of another version, over MaxFlows, or followed by trailing bytes, with an error naming the
// fault: a peer's bad list must not become half a list.
func Decode(b []byte) ([]Flow, error) {
	if len(b) == 0 {
		return nil, errors.New("flows: decode: empty input (no version byte)")
	}
	if b[0] != codecVersion {
		return nil, fmt.Errorf("flows: decode: version %d not supported (want %d)", b[0], codecVersion)
	}
	d := decoder{b: b[1:]}
	groups, err := d.uvarint("group count")
	if err != nil {
		return nil, err
	}
	if groups > MaxFlows {
		return nil, fmt.Errorf("flows: decode: %d groups exceed the limit of %d flows", groups, MaxFlows)
	}
	var out []Flow
	for g := range int(groups) {
		fam, err := d.byte(fmt.Sprintf("group %d family", g))
		if err != nil {
			return nil, err
		}
		alen := 0
		switch fam {
		case 4:
			alen = 4
		case 6:
			alen = 16
		default:
			return nil, fmt.Errorf("flows: decode: group %d: address family %d (want 4 or 6)", g, fam)
		}
		svc, err := d.addrPort(alen, fmt.Sprintf("group %d service", g))
		if err != nil {
			return nil, err
		}
		n, err := d.uvarint(fmt.Sprintf("group %d client count", g))
		if err != nil {
			return nil, err
		}
		switch {
		case n == 0:
			return nil, fmt.Errorf("flows: decode: group %d (%s) has no clients", g, svc)
		case n > uint64(MaxFlows-len(out)):
			return nil, fmt.Errorf("flows: decode: group %d (%s): %d more flows exceed the limit of %d", g, svc, n, MaxFlows)
		case n*uint64(alen+2) > uint64(len(d.b)):
			return nil, fmt.Errorf("flows: decode: truncated: group %d (%s) announces %d clients, %d bytes left", g, svc, n, len(d.b))
		}
		for range int(n) {
			c, _ := d.addrPort(alen, "") // length checked above
			out = append(out, Flow{Client: c, Service: svc})
		}
	}
	if len(d.b) > 0 {
		return nil, fmt.Errorf("flows: decode: %d trailing bytes after %d groups", len(d.b), groups)
	}
	return out, nil
}

// decoder consumes b from the front; each read names what it wanted when b runs short.
type decoder struct{ b []byte }

func (d *decoder) uvarint(what string) (uint64, error) {
	v, n := binary.Uvarint(d.b)
	switch {
	case n == 0:
		return 0, fmt.Errorf("flows: decode: truncated: %s missing", what)
	case n < 0:
		return 0, fmt.Errorf("flows: decode: %s overflows 64 bits", what)
	}
	d.b = d.b[n:]
	return v, nil
}

func (d *decoder) byte(what string) (byte, error) {
	if len(d.b) < 1 {
		return 0, fmt.Errorf("flows: decode: truncated: %s missing", what)
	}
	v := d.b[0]
	d.b = d.b[1:]
	return v, nil
}

func (d *decoder) addrPort(alen int, what string) (netip.AddrPort, error) {
	if len(d.b) < alen+2 {
		return netip.AddrPort{}, fmt.Errorf("flows: decode: truncated: %s needs %d bytes, %d left", what, alen+2, len(d.b))
	}
	a, _ := netip.AddrFromSlice(d.b[:alen])
	ap := netip.AddrPortFrom(a, binary.BigEndian.Uint16(d.b[alen:]))
	d.b = d.b[alen+2:]
	return ap, nil
}
