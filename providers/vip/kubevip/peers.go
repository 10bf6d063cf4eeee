package kubevip

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	lbv1 "github.com/caplb/caplb/api/v1alpha1"
)

// kube-vip's BGP peer settings (pkg/kubevip/config_envvar.go). Its manager reads its routers from
// the env only: bgp_peers, then bgp_peeraddress appended with bgp_peeras (else the --peerAS
// flag, else 65000). The --bgppeers and --peerAddress flags feed only its manifest generator.
const (
	envBGPPeers       = "bgp_peers"
	envBGPPeerAddress = "bgp_peeraddress"
	envBGPPeerAS      = "bgp_peeras"
	// envAnnotations names a Node annotation prefix kube-vip reads its BGP peers from instead
	// (Equinix Metal's format); they replace the env's.
	envAnnotations = "annotation"

	defaultPeerAS = 65000
)

// peer is one router a BGP kube-vip announces to. It never carries the password (the third field
// of bgp_peers): peers end up in condition messages.
type peer struct {
	// address as kube-vip has it; "" for an unnumbered peer (kube-vip v1.x), then iface is set.
	address, iface string
	asn            uint32
	// source is the env variable it came from, for messages.
	source string
}

func (p peer) String() string {
	if p.address == "" {
		return fmt.Sprintf("unnumbered on %s (AS %d)", p.iface, p.asn)
	}
	return fmt.Sprintf("%s (AS %d)", p.address, p.asn)
}

func peersString(ps []peer) string {
	out := make([]string, 0, len(ps))
	for _, p := range ps {
		out = append(out, p.String())
	}
	return strings.Join(out, ", ")
}

// parsePeers reads bgp_peers as kube-vip's bgp.ParseBGPPeerConfig does, for the fields the check
// needs: comma-separated <address>:<AS>[:<password>[:<multihop>[:<port>...]]], an IPv6 address
// in brackets, kube-vip v0.9's "/mpbgp_..." suffix and v1.x's "unnumbered:<iface>[:<AS>]". Errors
// never quote the value: it holds passwords.
func parsePeers(v string) ([]peer, error) {
	var out []peer
	for i, s := range strings.Split(v, ",") {
		s, _, _ = strings.Cut(s, "/")
		if s == "" {
			continue
		}
		var p peer
		switch {
		case strings.HasPrefix(s, "["):
			end := strings.IndexByte(s, ']')
			if end < 0 {
				return nil, fmt.Errorf("peer %d: no ']' after its IPv6 address", i+1)
			}
			p.address, s = s[1:end], s[end+1:]
		case strings.HasPrefix(s, "unnumbered:"):
			s = strings.TrimPrefix(s, "unnumbered:")
			p.iface, s, _ = strings.Cut(s, ":")
			s = ":" + s
		default:
			p.address, s, _ = strings.Cut(s, ":")
			s = ":" + s
		}
		fields := strings.Split(s, ":")
		if len(fields) < 2 || fields[1] == "" {
			if p.iface != "" {
				out = append(out, peer{iface: p.iface, source: envBGPPeers})
				continue
			}
			return nil, fmt.Errorf("peer %d: no AS (the format is <address>:<AS>[:...])", i+1)
		}
		n, err := strconv.ParseUint(fields[1], 10, 32)
		if err != nil {
			return nil, fmt.Errorf("peer %d: its AS is not a number", i+1)
		}
		p.asn, p.source = uint32(n), envBGPPeers
		out = append(out, p)
	}
	return out, nil
}

// matchPeers says why kube-vip's routers (got) are not all among spec.backend.bgp.peers (want),
// "" when they are. A router kube-vip announces to and caplb does not would lose the VIP when
// kube-vip withdraws: the clients behind it have no other path. caplb's extra routers are fine.
func matchPeers(want []lbv1.BGPPeer, got []peer) string {
	if len(got) == 0 {
		return fmt.Sprintf("%s is true but kube-vip names no BGP peer (env %s or %s; its manager ignores the --bgppeers and "+
			"--peerAddress flags), so which routers hold its route is not known; set kube-vip's routers in %s first",
			envBGP, envBGPPeers, envBGPPeerAddress, envBGPPeers)
	}
	var missing []string
	for _, p := range got {
		if p.address == "" {
			return fmt.Sprintf("kube-vip peers %s (%s): spec.backend.bgp.peers names routers by address, so caplb cannot announce "+
				"where kube-vip does; not supported: peer kube-vip with the router's address first", p, p.source)
		}
		i := findPeer(want, p.address)
		if i < 0 {
			missing = append(missing, fmt.Sprintf("%s from %s", p, p.source))
			continue
		}
		if uint32(want[i].ASN) != p.asn {
			return fmt.Sprintf("kube-vip peers with the router %s as AS %d (%s), spec.backend.bgp.peers[%d] names it with asn %d: "+
				"one of the two sessions cannot come up; set spec.backend.bgp.peers[%d].asn to the router's AS",
				p.address, p.asn, p.source, i, want[i].ASN, i)
		}
	}
	if len(missing) > 0 {
		return fmt.Sprintf("kube-vip announces the VIP to %s, which spec.backend.bgp.peers does not list: clients that reach the VIP "+
			"through that router would lose it when kube-vip withdraws, as no caplb member announces it there; add it to "+
			"spec.backend.bgp.peers (and let the router accept sessions from the new Machines' addresses)", strings.Join(missing, "; "))
	}
	return ""
}

// findPeer is the index of the router at address in want, -1 if none; addresses compare as IPs.
func findPeer(want []lbv1.BGPPeer, address string) int {
	a, err := netip.ParseAddr(address)
	for i, w := range want {
		if w.Address == address {
			return i
		}
		if b, berr := netip.ParseAddr(w.Address); err == nil && berr == nil && a.Unmap() == b.Unmap() {
			return i
		}
	}
	return -1
}
