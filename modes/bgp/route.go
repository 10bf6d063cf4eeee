package bgp

import (
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
)

// gatewayTo is the router the kernel sends packets for addr to; invalid when addr is on-link.
func gatewayTo(addr netip.Addr) (netip.Addr, error) {
	routes, err := netlink.RouteGet(net.IP(addr.AsSlice()))
	if err != nil {
		return netip.Addr{}, err
	}
	if len(routes) == 0 {
		return netip.Addr{}, fmt.Errorf("no route")
	}
	if gw, ok := netip.AddrFromSlice(routes[0].Gw); ok && routes[0].Gw != nil {
		return gw.Unmap(), nil
	}
	return netip.Addr{}, nil
}
