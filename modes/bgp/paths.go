package bgp

import (
	"fmt"
	"net/netip"
	"time"

	agentv1 "github.com/caplb/caplb/api/agent/v1alpha1"

	api "github.com/osrg/gobgp/v3/api"
	"github.com/osrg/gobgp/v3/pkg/apiutil"
	"github.com/osrg/gobgp/v3/pkg/packet/bgp"
)

// pathAttrs builds the gobgp paths for VIPs with the configured communities.
type pathAttrs struct {
	communities []uint32
	large       []*bgp.LargeCommunity
}

func newPathAttrs(cfg agentv1.BGPConfig) (pathAttrs, error) {
	var a pathAttrs
	for i, s := range cfg.Communities {
		c, err := agentv1.ParseCommunity(s)
		if err != nil {
			return a, fmt.Errorf("bgp.communities[%d]: %w", i, err)
		}
		a.communities = append(a.communities, c)
	}
	for i, s := range cfg.LargeCommunities {
		c, err := agentv1.ParseLargeCommunity(s)
		if err != nil {
			return a, fmt.Errorf("bgp.largeCommunities[%d]: %w", i, err)
		}
		a.large = append(a.large, bgp.NewLargeCommunity(c.ASN, c.Local1, c.Local2))
	}
	return a, nil
}

// path is the route for v: a host prefix whose next hop is left unspecified, which gobgp
// replaces with this node's address on each session ("next-hop self", for eBGP and iBGP alike
// since the path is locally originated).
func (a pathAttrs) path(v netip.Addr, withdraw bool) (*api.Path, error) {
	v = v.Unmap()
	attrs := []bgp.PathAttributeInterface{bgp.NewPathAttributeOrigin(bgp.BGP_ORIGIN_ATTR_TYPE_IGP)}
	var nlri bgp.AddrPrefixInterface
	if v.Is4() {
		nlri = bgp.NewIPAddrPrefix(32, v.String())
		attrs = append(attrs, bgp.NewPathAttributeNextHop("0.0.0.0"))
	} else {
		nlri = bgp.NewIPv6AddrPrefix(128, v.String())
		attrs = append(attrs, bgp.NewPathAttributeMpReachNLRI("::", []bgp.AddrPrefixInterface{nlri}))
	}
	if len(a.communities) > 0 {
		attrs = append(attrs, bgp.NewPathAttributeCommunities(a.communities))
	}
	if len(a.large) > 0 {
		attrs = append(attrs, bgp.NewPathAttributeLargeCommunities(a.large))
	}
	p, err := apiutil.NewPath(nlri, withdraw, attrs, time.Now())
	if err != nil {
		return nil, fmt.Errorf("building the route for %s: %w", v, err)
	}
	return p, nil
}
