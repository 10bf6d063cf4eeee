//go:build linux

package lifecycle

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"sort"

	"github.com/caplb/caplb/e2e/lab"
	"github.com/vishvananda/netlink"
)

// HoldsVIP reports whether the machine's kernel has vip on an interface: the ground truth,
// whatever the agent believes.
func (n *Node) HoldsVIP(vip netip.Addr) (bool, error) {
	var ok bool
	err := n.NS.WithRouteNetlink(func(h *netlink.Handle) (err error) {
		ok, err = lab.HasAddr(h, vip)
		return err
	})
	if err != nil {
		return false, fmt.Errorf("%s: %w", n.Name, err)
	}
	return ok, nil
}

// Holders lists who serves the VIP now, sorted: for ARP the machines whose kernel holds it
// (exactly one outside a hand-over), for BGP the machines the router's route sends to (the
// ECMP set).
func (l *Lab) Holders() ([]string, error) {
	var out []string
	if l.opts.Backend == BGP {
		hops, err := l.routerNextHops()
		if err != nil {
			return nil, err
		}
		for _, n := range l.Nodes() {
			if hops[n.Addr] {
				out = append(out, n.Name)
			}
		}
	} else {
		for _, n := range l.Nodes() {
			ok, err := n.HoldsVIP(l.vip)
			if err != nil {
				return nil, err
			}
			if ok {
				out = append(out, n.Name)
			}
		}
	}
	sort.Strings(out)
	return out, nil
}

// routerNextHops returns the next hops of the router's route to the VIP.
func (l *Lab) routerNextHops() (map[netip.Addr]bool, error) {
	dst := &net.IPNet{IP: l.vip.AsSlice(), Mask: net.CIDRMask(32, 32)}
	var routes []netlink.Route
	err := l.topo.router.WithRouteNetlink(func(h *netlink.Handle) (err error) {
		routes, err = h.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Dst: dst}, netlink.RT_FILTER_DST)
		return err
	})
	if err != nil {
		return nil, err
	}
	hops := map[netip.Addr]bool{}
	for _, r := range routes {
		if a, ok := netip.AddrFromSlice(r.Gw); ok {
			hops[a.Unmap()] = true
		}
		for _, nh := range r.MultiPath {
			if a, ok := netip.AddrFromSlice(nh.Gw); ok {
				hops[a.Unmap()] = true
			}
		}
	}
	return hops, nil
}

// DialClient dials from the client's namespace (the real client of the VIP).
func (l *Lab) DialClient(ctx context.Context, network, addr string) (net.Conn, error) {
	return l.topo.client.DialContext(ctx, network, addr)
}

// CAPEM is the cluster CA the client verifies the API server with.
func (l *Lab) CAPEM() []byte {
	if l.real != nil {
		return l.real.shared["ca.crt"]
	}
	return l.ca.PEM
}

// APIURL is the endpoint's URL.
func (l *Lab) APIURL() string {
	return fmt.Sprintf("https://%s", net.JoinHostPort(l.vip.String(), "6443"))
}
