package wireguard

import (
	"context"
	"fmt"
	"net"
	"net/netip"

	"github.com/go-logr/logr"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	"golang.zx2c4.com/wireguard/tun"
)

// OpenKernelTunnel brings up a device like OpenTunnel, but on a TUN interface named name with
// address addr in prefix: the host's TCP stack then carries the tunnel's connections, which
// skips netstack's goroutines on every packet. Needs CAP_NET_ADMIN and /dev/net/tun; the
// interface (and its route for prefix) goes away with Close.
func OpenKernelTunnel(priv Key, prefix netip.Prefix, addr netip.Addr, name string, port, mtu int, log logr.Logger) (*Tunnel, error) {
	tdev, err := tun.CreateTUN(name, mtu)
	if err != nil {
		return nil, fmt.Errorf("create TUN device %s (needs CAP_NET_ADMIN and /dev/net/tun): %w", name, err)
	}
	dev, err := startDevice(tdev, priv, port, log)
	if err != nil {
		return nil, err
	}
	if err := linkUp(name, netip.PrefixFrom(addr, prefix.Bits())); err != nil {
		dev.Close()
		return nil, err
	}
	d := &net.Dialer{}
	dial := func(ctx context.Context, ap netip.AddrPort) (net.Conn, error) {
		return d.DialContext(ctx, "tcp", ap.String())
	}
	return &Tunnel{Addr: addr, dev: dev, dial: dial}, nil
}

// linkUp sets the address (with its prefix route) on the TUN interface and brings it up.
func linkUp(name string, a netip.Prefix) error {
	link, err := netlink.LinkByName(name)
	if err != nil {
		return fmt.Errorf("TUN device %s: %w", name, err)
	}
	nl := &netlink.Addr{IPNet: &net.IPNet{IP: a.Addr().AsSlice(), Mask: net.CIDRMask(a.Bits(), a.Addr().BitLen())}}
	if a.Addr().Is6() {
		// No duplicate address detection: the address is ours alone, and a tentative one
		// could not be dialled from for a second or two.
		nl.Flags = unix.IFA_F_NODAD
	}
	if err := netlink.AddrReplace(link, nl); err != nil {
		return fmt.Errorf("address %s on %s: %w", a, name, err)
	}
	if err := netlink.LinkSetUp(link); err != nil {
		return fmt.Errorf("bring %s up: %w", name, err)
	}
	return nil
}
