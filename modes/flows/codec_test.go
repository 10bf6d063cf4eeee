package flows

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"net/netip"
	"testing"

	. "github.com/onsi/gomega"
)

func flow(client, service string) Flow {
	return Flow{Client: netip.MustParseAddrPort(client), Service: netip.MustParseAddrPort(service)}
}

func TestEncodeDecodeRoundTrip(t *testing.T) {
	v4 := []Flow{
		flow("10.0.0.2:40000", "10.9.9.9:6443"),
		flow("10.0.0.3:40001", "10.9.9.9:6443"),
		flow("10.0.0.2:40002", "10.9.9.10:443"),
	}
	v6 := []Flow{
		flow("[fd00::2]:40000", "[fd00:9::9]:6443"),
		flow("[fd00::3]:1", "[fd00:9::9]:6443"),
	}
	for _, tc := range []struct {
		name  string
		flows []Flow
	}{
		{"empty", nil},
		{"ipv4", v4},
		{"ipv6", v6},
		{"mixed", append(append([]Flow{}, v6...), v4...)},
		{"one", v4[:1]},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			b := Encode(tc.flows)
			g.Expect(b[0]).To(BeEquivalentTo(codecVersion))
			got, err := Decode(b)
			g.Expect(err).NotTo(HaveOccurred())
			want := sortFlows(append([]Flow{}, tc.flows...))
			if len(want) == 0 {
				g.Expect(got).To(BeEmpty())
				return
			}
			g.Expect(got).To(Equal(want), "Decode returns List's order")
			g.Expect(Encode(got)).To(Equal(b), "a decoded list encodes the same")
		})
	}
}

// TestEncodeIsCompact: a flow to a service already sent costs its client's address and port.
func TestEncodeIsCompact(t *testing.T) {
	g := NewWithT(t)
	one := Encode([]Flow{flow("10.0.0.2:40000", "10.9.9.9:6443")})
	two := Encode([]Flow{flow("10.0.0.2:40000", "10.9.9.9:6443"), flow("10.0.0.2:40001", "10.9.9.9:6443")})
	g.Expect(len(two) - len(one)).To(Equal(6))
}

// TestEncodeNormalizes: what the wire (and the maps) cannot carry is fixed or left out.
func TestEncodeNormalizes(t *testing.T) {
	g := NewWithT(t)
	got, err := Decode(Encode([]Flow{
		flow("[::ffff:10.0.0.2]:40000", "[::ffff:10.9.9.9]:6443"), // dual-stack socket: IPv4
		flow("10.0.0.2:40000", "10.9.9.9:6443"),                   // the same flow again
		flow("[fe80::1%eth0]:40000", "[fd00:9::9]:6443"),          // zone dropped
		flow("10.0.0.3:40000", "[fd00:9::9]:6443"),                // two families: left out
		{Service: netip.MustParseAddrPort("10.9.9.9:6443")},       // no client: left out
	}))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got).To(Equal([]Flow{
		flow("10.0.0.2:40000", "10.9.9.9:6443"),
		flow("[fe80::1]:40000", "[fd00:9::9]:6443"),
	}))
}

func TestEncodeCapsAtMaxFlows(t *testing.T) {
	g := NewWithT(t)
	many := make([]Flow, 0, MaxFlows+10)
	for i := range MaxFlows + 10 {
		many = append(many, Flow{
			Client:  netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}), 40000),
			Service: netip.MustParseAddrPort("10.9.9.9:6443"),
		})
	}
	got, err := Decode(Encode(many))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got).To(HaveLen(MaxFlows))
}

func TestDecodeRejectsMalformed(t *testing.T) {
	valid := Encode([]Flow{flow("10.0.0.2:40000", "10.9.9.9:6443"), flow("[fd00::2]:1", "[fd00:9::9]:6443")})
	uv := func(v uint64) []byte { return binary.AppendUvarint(nil, v) }
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	svc4 := []byte{4, 10, 9, 9, 9, 0x19, 0x2b}
	for _, tc := range []struct {
		name string
		in   []byte
		want string
	}{
		{"nothing", nil, "empty input"},
		{"bad version", cat([]byte{2}, valid[1:]), "version 2 not supported"},
		{"version only", []byte{codecVersion}, "truncated: group count missing"},
		{"varint overflow", cat([]byte{codecVersion}, bytes.Repeat([]byte{0xff}, 11)), "overflows"},
		{"too many groups", cat([]byte{codecVersion}, uv(MaxFlows+1)), "exceed the limit"},
		{"missing group", cat([]byte{codecVersion}, uv(1)), "truncated: group 0 family missing"},
		{"bad family", cat([]byte{codecVersion}, uv(1), []byte{5}), "address family 5"},
		{"short service", cat([]byte{codecVersion}, uv(1), svc4[:4]), "truncated: group 0 service"},
		{"no client count", cat([]byte{codecVersion}, uv(1), svc4), "truncated: group 0 client count missing"},
		{"empty group", cat([]byte{codecVersion}, uv(1), svc4, uv(0)), "has no clients"},
		{"too many clients", cat([]byte{codecVersion}, uv(1), svc4, uv(MaxFlows+1)), "exceed the limit"},
		{"too many in all", cat([]byte{codecVersion}, uv(2), svc4, uv(MaxFlows), bytes.Repeat([]byte{1}, 6*MaxFlows), svc4, uv(1)), "exceed the limit"},
		{"truncated clients", cat([]byte{codecVersion}, uv(1), svc4, uv(2), make([]byte, 11)), "truncated: group 0 (10.9.9.9:6443) announces 2 clients, 11 bytes left"},
		{"truncated", valid[:len(valid)-1], "truncated"},
		{"trailing", cat(valid, []byte{0}), "1 trailing bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			got, err := Decode(tc.in)
			g.Expect(err).To(MatchError(ContainSubstring(tc.want)))
			g.Expect(err.Error()).To(HavePrefix("flows: decode: "))
			g.Expect(got).To(BeNil())
		})
	}
}

// TestDecodeRandomInput: arbitrary bytes, and valid lists cut or flipped anywhere, never panic;
// what decodes stays within the limit.
func TestDecodeRandomInput(t *testing.T) {
	g := NewWithT(t)
	rng := rand.New(rand.NewPCG(1, 2))
	valid := Encode([]Flow{flow("10.0.0.2:40000", "10.9.9.9:6443"), flow("[fd00::2]:1", "[fd00:9::9]:6443"),
		flow("10.0.0.3:40000", "10.9.9.9:6443")})
	for i := range 20000 {
		var in []byte
		switch i % 3 {
		case 0:
			in = make([]byte, rng.IntN(64))
			for j := range in {
				in[j] = byte(rng.Uint32())
			}
			if len(in) > 0 && rng.IntN(2) == 0 {
				in[0] = codecVersion
			}
		case 1:
			in = valid[:rng.IntN(len(valid)+1)]
		default:
			in = append([]byte{}, valid...)
			in[rng.IntN(len(in))] ^= byte(1 + rng.IntN(255))
		}
		got, err := Decode(in)
		if err == nil {
			g.Expect(len(got)).To(BeNumerically("<=", MaxFlows))
		}
	}
}

func FuzzDecode(f *testing.F) {
	f.Add(Encode([]Flow{flow("10.0.0.2:40000", "10.9.9.9:6443"), flow("[fd00::2]:1", "[fd00:9::9]:6443")}))
	f.Add([]byte{codecVersion, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := Decode(b)
		if err != nil {
			return
		}
		again, err := Decode(Encode(got))
		if err != nil {
			t.Fatalf("re-encoding a decoded list: %v", err)
		}
		if len(again) > len(got) {
			t.Fatalf("re-encoding grew the list: %d -> %d", len(got), len(again))
		}
	})
}
