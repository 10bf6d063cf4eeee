//go:build linux

package lab

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/vishvananda/netlink"
)

// AddAddr adds prefix to ifName in the namespace. IPv6 addresses skip
// duplicate address detection so that they are usable at once.
func (n *Netns) AddAddr(ifName string, prefix netip.Prefix) error {
	argv := []string{"ip", "addr", "add", prefix.String(), "dev", ifName}
	if prefix.Addr().Is6() {
		argv = append(argv, "nodad")
	}
	_, err := n.Run(context.Background(), argv...)
	return err
}

// SetLinkUp sets ifName in the namespace up or down. Setting one end of a
// veth pair down takes the carrier away from the other end: the cable is cut.
func (n *Netns) SetLinkUp(ifName string, up bool) error {
	state := "down"
	if up {
		state = "up"
	}
	_, err := n.Run(context.Background(), "ip", "link", "set", ifName, state)
	return err
}

// CutLink sets ifName down: a pulled cable. RestoreLink plugs it back.
func (n *Netns) CutLink(ifName string) error { return n.SetLinkUp(ifName, false) }

// RestoreLink sets ifName up again.
func (n *Netns) RestoreLink(ifName string) error { return n.SetLinkUp(ifName, true) }

// Netem describes a tc netem impairment on egress of one interface.
type Netem struct {
	Delay  time.Duration
	Jitter time.Duration
	// LossPercent drops that share of packets (0-100).
	LossPercent float64
}

// SetNetem replaces the root qdisc of ifName with netem. Apply it on both
// ends of a link (or on a bridge port, which is the egress towards a node)
// to impair both directions.
func (n *Netns) SetNetem(ifName string, e Netem) error {
	argv := []string{"tc", "qdisc", "replace", "dev", ifName, "root", "netem"}
	if e.Delay > 0 {
		argv = append(argv, "delay", usec(e.Delay))
		if e.Jitter > 0 {
			argv = append(argv, usec(e.Jitter))
		}
	}
	if e.LossPercent > 0 {
		argv = append(argv, "loss", strconv.FormatFloat(e.LossPercent, 'f', -1, 64)+"%")
	}
	if _, err := n.Run(context.Background(), argv...); err != nil {
		if strings.Contains(err.Error(), "qdisc kind is unknown") {
			return fmt.Errorf("%w: %w", ErrNoNetem, err)
		}
		return err
	}
	return nil
}

// ErrNoNetem is returned by SetNetem when the kernel has no sch_netem; use
// Lab.Impair (a userspace relay) instead.
var ErrNoNetem = errors.New("kernel has no netem qdisc")

// ClearNetem removes the root qdisc that SetNetem installed.
func (n *Netns) ClearNetem(ifName string) error {
	_, err := n.Run(context.Background(), "tc", "qdisc", "del", "dev", ifName, "root")
	return err
}

func usec(d time.Duration) string { return strconv.FormatInt(d.Microseconds(), 10) + "us" }

// Partition splits the bridge br in the switch namespace into isolated
// segments: the ports of each group move to a bridge of their own
// ("<br>p0", "<br>p1", ...), so ports in different groups no longer reach each
// other while every link stays up (hosts see no carrier change). Ports named
// in no group stay on br. Heal undoes it. (Moving ports needs nothing but
// iproute2; this kernel has no bridge VLAN filtering to do it in place.)
func (n *Netns) Partition(br string, groups ...[]string) error {
	ctx := context.Background()
	for i, g := range groups {
		part := br + "p" + strconv.Itoa(i)
		if _, err := n.Run(ctx, "ip", "link", "add", part, "type", "bridge", "stp_state", "0", "forward_delay", "0"); err != nil {
			return err
		}
		if _, err := n.Run(ctx, "ip", "link", "set", part, "up"); err != nil {
			return err
		}
		for _, port := range g {
			if _, err := n.Run(ctx, "ip", "link", "set", port, "master", part); err != nil {
				return err
			}
		}
	}
	return nil
}

// Heal moves every port of br's partition bridges back to br and deletes them.
func (n *Netns) Heal(br string) error {
	ctx := context.Background()
	out, err := n.Run(ctx, "ip", "-o", "link", "show", "type", "bridge")
	if err != nil {
		return err
	}
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		part := strings.TrimSuffix(f[1], ":")
		if !strings.HasPrefix(part, br+"p") {
			continue
		}
		ports, err := n.Run(ctx, "ip", "-o", "link", "show", "master", part)
		if err != nil {
			return err
		}
		for _, pl := range strings.Split(ports, "\n") {
			pf := strings.Fields(pl)
			if len(pf) < 2 {
				continue
			}
			port, _, _ := strings.Cut(strings.TrimSuffix(pf[1], ":"), "@")
			if _, err := n.Run(ctx, "ip", "link", "set", port, "master", br); err != nil {
				return err
			}
		}
		if _, err := n.Run(ctx, "ip", "link", "del", part); err != nil {
			return err
		}
	}
	return nil
}

// DialContext dials from inside the namespace (the socket is created there).
func (n *Netns) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	var conn net.Conn
	err := n.Do(func() error {
		var d net.Dialer
		c, err := d.DialContext(ctx, network, address)
		conn = c
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("dial %s from %s: %w", address, n.name, err)
	}
	return conn, nil
}

// HTTPClient returns a client whose connections are made inside the namespace
// (no keep-alive, so every request dials afresh).
func (n *Netns) HTTPClient(timeout time.Duration) *http.Client {
	return &http.Client{
		Timeout: timeout,
		Transport: &http.Transport{
			DialContext:       n.DialContext,
			DisableKeepAlives: true,
		},
	}
}

// HasAddr reports whether the kernel behind h (a namespace's netlink handle) has a on any
// interface: the ground truth of who holds a VIP, whatever a daemon believes.
func HasAddr(h *netlink.Handle, a netip.Addr) (bool, error) {
	addrs, err := h.AddrList(nil, netlink.FAMILY_ALL)
	if err != nil {
		return false, fmt.Errorf("list addresses: %w", err)
	}
	for _, x := range addrs {
		if ip, ok := netip.AddrFromSlice(x.IP); ok && ip.Unmap() == a {
			return true, nil
		}
	}
	return false, nil
}
