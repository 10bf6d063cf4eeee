package bgp

import (
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// dummyAddresses keeps the VIPs on a dummy interface of the node: the router sends VIP traffic
// to this node's address as next hop, and the kernel only accepts it if the VIP is local.
// A dummy interface (rather than lo) can be deleted as a whole on exit, taking every VIP with
// it, and never disturbs the loopback's own addresses.
//
// Kernels built without the dummy driver (some minimal VM kernels, such as this project's CI)
// get an ifb device instead: another address-holding virtual device with the same lifecycle.
// Nothing is ever transmitted on it; local delivery only needs the address to exist.
type dummyAddresses struct {
	name string
	log  func(msg string, kv ...any)
}

// holderTypes are the link types we create and therefore may delete.
var holderTypes = map[string]bool{"dummy": true, "ifb": true}

func (d *dummyAddresses) link() (netlink.Link, error) {
	l, err := netlink.LinkByName(d.name)
	if err == nil {
		if !holderTypes[l.Type()] {
			return nil, fmt.Errorf("interface %s exists and is a %s, not a dummy interface; set bgp.interface to an unused name", d.name, l.Type())
		}
		return l, nil
	}
	var nf netlink.LinkNotFoundError
	if !errors.As(err, &nf) {
		return nil, fmt.Errorf("looking up interface %s: %w", d.name, err)
	}
	la := netlink.NewLinkAttrs()
	la.Name = d.name
	if err := netlink.LinkAdd(&netlink.Dummy{LinkAttrs: la}); err != nil {
		if !errors.Is(err, unix.EOPNOTSUPP) {
			return nil, fmt.Errorf("creating dummy interface %s: %w", d.name, err)
		}
		if err := netlink.LinkAdd(&netlink.Ifb{LinkAttrs: la}); err != nil {
			return nil, fmt.Errorf("creating interface %s: the kernel has no dummy driver, and an ifb device failed too: %w", d.name, err)
		}
		if d.log != nil {
			d.log("the kernel has no dummy interface driver; holding the VIPs on an ifb device instead", "interface", d.name)
		}
	}
	l, err = netlink.LinkByName(d.name)
	if err != nil {
		return nil, fmt.Errorf("looking up interface %s after creating it: %w", d.name, err)
	}
	return l, nil
}

// Set makes the interface hold exactly vips (as /32 or /128), creating it if needed.
func (d *dummyAddresses) Set(vips []netip.Addr) error {
	if len(vips) == 0 {
		// Nothing to hold: do not create the interface just to leave it empty.
		l, err := netlink.LinkByName(d.name)
		if err != nil {
			return nil //nolint:nilerr // no interface, no addresses: already converged
		}
		return d.converge(l, nil)
	}
	l, err := d.link()
	if err != nil {
		return err
	}
	if l.Attrs().Flags&net.FlagUp == 0 {
		if err := netlink.LinkSetUp(l); err != nil {
			return fmt.Errorf("setting %s up: %w", d.name, err)
		}
	}
	return d.converge(l, vips)
}

func (d *dummyAddresses) converge(l netlink.Link, vips []netip.Addr) error {
	have, err := netlink.AddrList(l, netlink.FAMILY_ALL)
	if err != nil {
		return fmt.Errorf("listing addresses of %s: %w", d.name, err)
	}
	want := map[netip.Addr]bool{}
	for _, v := range vips {
		want[v.Unmap()] = true
	}
	present := map[netip.Addr]bool{}
	var errs []error
	for _, a := range have {
		ip, ok := netip.AddrFromSlice(a.IP)
		if !ok {
			continue
		}
		ip = ip.Unmap()
		if ip.IsLinkLocalUnicast() {
			continue // the kernel's own fe80:: address
		}
		if want[ip] {
			present[ip] = true
			continue
		}
		if err := netlink.AddrDel(l, &a); err != nil {
			errs = append(errs, fmt.Errorf("removing %s from %s: %w", ip, d.name, err))
		}
	}
	for ip := range want {
		if present[ip] {
			continue
		}
		bits := 32
		if ip.Is6() {
			bits = 128
		}
		addr := &netlink.Addr{IPNet: &net.IPNet{IP: ip.AsSlice(), Mask: net.CIDRMask(bits, bits)}}
		if ip.Is6() {
			// Usable at once: duplicate address detection would hold it "tentative" for a
			// second, and the VIP is shared by design.
			addr.Flags = unix.IFA_F_NODAD
		}
		if err := netlink.AddrAdd(l, addr); err != nil && !errors.Is(err, unix.EEXIST) {
			errs = append(errs, fmt.Errorf("adding %s to %s: %w", ip, d.name, err))
		}
	}
	return errors.Join(errs...)
}

// Close deletes the interface and with it every VIP. Idempotent.
func (d *dummyAddresses) Close() error {
	l, err := netlink.LinkByName(d.name)
	if err != nil {
		var nf netlink.LinkNotFoundError
		if errors.As(err, &nf) {
			return nil
		}
		return fmt.Errorf("looking up interface %s: %w", d.name, err)
	}
	if !holderTypes[l.Type()] {
		return nil // not ours; Set refused to use it
	}
	if err := netlink.LinkDel(l); err != nil {
		return fmt.Errorf("deleting interface %s: %w", d.name, err)
	}
	return nil
}

// sourceAddressTowards is the address the kernel would use to reach dst.
func sourceAddressTowards(dst netip.Addr) (netip.Addr, error) {
	routes, err := netlink.RouteGet(dst.AsSlice())
	if err != nil {
		return netip.Addr{}, fmt.Errorf("no route to %s: %w", dst, err)
	}
	for _, r := range routes {
		if a, ok := netip.AddrFromSlice(r.Src); ok && a.IsValid() {
			return a.Unmap(), nil
		}
	}
	return netip.Addr{}, fmt.Errorf("route to %s has no source address", dst)
}

// firstGlobalIPv4 is the first global-unicast IPv4 address of an interface other than skip.
func firstGlobalIPv4(skip string) (netip.Addr, error) {
	links, err := netlink.LinkList()
	if err != nil {
		return netip.Addr{}, fmt.Errorf("listing interfaces: %w", err)
	}
	for _, l := range links {
		if l.Attrs().Name == skip || l.Attrs().Flags&net.FlagLoopback != 0 {
			continue
		}
		addrs, err := netlink.AddrList(l, netlink.FAMILY_V4)
		if err != nil {
			continue
		}
		for _, a := range addrs {
			if ip, ok := netip.AddrFromSlice(a.IP); ok && ip.Unmap().IsGlobalUnicast() {
				return ip.Unmap(), nil
			}
		}
	}
	return netip.Addr{}, errors.New("the node has no global IPv4 address")
}
