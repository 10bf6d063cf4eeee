//go:build linux

package arp

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/caplb/caplb/modes/flows"
)

func (a *Announcer) addAddr(v netip.Addr) error {
	addr := vipAddr(v, a.cfg.Interface)
	if err := netlink.AddrAdd(a.link, addr); err != nil && !errors.Is(err, syscall.EEXIST) {
		return fmt.Errorf("arp: add %s to %s: %w", v, a.cfg.Interface, err)
	}
	return nil
}

func (a *Announcer) delAddr(v netip.Addr) error {
	if err := netlink.AddrDel(a.link, vipAddr(v, a.cfg.Interface)); err != nil && !errors.Is(err, syscall.EADDRNOTAVAIL) {
		return fmt.Errorf("arp: remove %s from %s: %w", v, a.cfg.Interface, err)
	}
	return nil
}

func (a *Announcer) hasAddr(v netip.Addr) (bool, error) {
	fam := netlink.FAMILY_V4
	if v.Is6() {
		fam = netlink.FAMILY_V6
	}
	addrs, err := netlink.AddrList(a.link, fam)
	if err != nil {
		return false, fmt.Errorf("arp: list addresses of %s: %w", a.cfg.Interface, err)
	}
	for _, x := range addrs {
		if ip, ok := netip.AddrFromSlice(x.IP); ok && ip.Unmap() == v {
			return true, nil
		}
	}
	return false, nil
}

// vipAddr is the host-prefix address for v, labelled for IPv4 (labels must
// start with the interface name and fit in 15 bytes).
func vipAddr(v netip.Addr, ifName string) *netlink.Addr {
	bits := 32
	if v.Is6() {
		bits = 128
	}
	a := &netlink.Addr{IPNet: &net.IPNet{IP: v.AsSlice(), Mask: net.CIDRMask(bits, bits)}}
	if v.Is4() {
		if l := ifName + ":" + AddressLabel; len(l) <= 15 {
			a.Label = l
		}
	} else {
		// Usable at once: duplicate address detection would hold the
		// address back for a second, and the election already decided.
		a.Flags = unix.IFA_F_NODAD
	}
	return a
}

func firstIPv4(link netlink.Link) netip.Addr {
	addrs, err := netlink.AddrList(link, netlink.FAMILY_V4)
	if err != nil {
		return netip.Addr{}
	}
	for _, x := range addrs {
		if x.Label != "" && len(x.Label) > len(AddressLabel) && x.Label[len(x.Label)-len(AddressLabel):] == AddressLabel {
			continue // one of our VIPs
		}
		if ip, ok := netip.AddrFromSlice(x.IP); ok {
			return ip.Unmap()
		}
	}
	return netip.Addr{}
}

// RemoveStale deletes the given VIPs from every interface. The agent calls it
// at start: a previous run that was SIGKILLed (or a crash) could not remove
// them, and a node must never hold a VIP the election did not give it.
func RemoveStale(vips []netip.Addr) ([]string, error) {
	links, err := netlink.LinkList()
	if err != nil {
		return nil, fmt.Errorf("arp: list links: %w", err)
	}
	var removed []string
	var errs []error
	for _, l := range links {
		addrs, err := netlink.AddrList(l, netlink.FAMILY_ALL)
		if err != nil {
			continue
		}
		for _, x := range addrs {
			ip, ok := netip.AddrFromSlice(x.IP)
			if !ok || !slices.Contains(vips, ip.Unmap()) {
				continue
			}
			if err := netlink.AddrDel(l, &x); err != nil {
				errs = append(errs, fmt.Errorf("arp: remove stale %s from %s: %w", ip, l.Attrs().Name, err))
				continue
			}
			removed = append(removed, ip.Unmap().String()+"@"+l.Attrs().Name)
		}
	}
	return removed, errors.Join(errs...)
}

// InterfaceFor finds the interface that the kernel routes vip through: the
// VIP belongs on the segment the node reaches it on. Call it before the VIP
// is added locally (then the route would be the local one).
func InterfaceFor(vip netip.Addr) (string, error) {
	routes, err := netlink.RouteGet(vip.AsSlice())
	if err != nil {
		return "", fmt.Errorf("no route to %s: %w", vip, err)
	}
	for _, r := range routes {
		if r.LinkIndex == 0 {
			continue
		}
		l, err := netlink.LinkByIndex(r.LinkIndex)
		if err != nil {
			return "", fmt.Errorf("route to %s: link %d: %w", vip, r.LinkIndex, err)
		}
		if l.Attrs().Flags&net.FlagLoopback != 0 {
			return "", fmt.Errorf("the route to %s is local (is the VIP already on this node?)", vip)
		}
		return l.Attrs().Name, nil
	}
	return "", fmt.Errorf("no route to %s", vip)
}

// resetPatience bounds how long a release waits for busy connections to answer their request
// in flight before it resets them anyway (see flows.ResetConnections).
const resetPatience = 300 * time.Millisecond

// resetConnections resets the connections still open to v before v goes (see the function of
// the same name); a failure is logged, never fatal: the address must go regardless.
func (a *Announcer) resetConnections(v netip.Addr) int {
	n, err := flows.ResetConnections(v, resetPatience)
	if err != nil {
		a.log.Info("could not reset every connection to the VIP; their clients wait for a timeout", "vip", v.String(), "error", err.Error())
	}
	return n
}
