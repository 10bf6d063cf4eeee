//go:build linux

package bgplab

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"time"

	"github.com/caplb/caplb/e2e/lab"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// RoutedOptions shapes a routed (BGP) lab.
type RoutedOptions struct {
	// Nodes is the number of node namespaces. Default 3.
	Nodes int
	// RouterASN and NodeASN default to 64500 and 64512 (eBGP, every node in one AS).
	RouterASN, NodeASN uint32
	// IPv6 also peers every node over IPv6 (dual stack).
	IPv6 bool
	// Neighbor, if set, may change the router's neighbour entry for node i (1-based), e.g.
	// to expect another ASN or a password.
	Neighbor func(i int, n *FRRNeighbor)
	// Keepalive and Hold are the router's timers; default 1s and 3s.
	Keepalive, Hold time.Duration
	// BFD, when set, runs BFD on the router's sessions to the nodes (IPv4).
	BFD *FRRBFD
	// Segment puts the router and every node on one L2 segment (a bridge: 10.10.0.0/24 and
	// fd00:10::/64, the router .1, node i .10+i), as control-plane nodes peering with one ToR
	// usually are, instead of a point-to-point link per node. Flow sharing needs it.
	Segment bool
}

// Routed is a leaf-router lab: a router namespace running FRR (zebra + bgpd, ECMP, L4
// multipath hashing) with one point-to-point link to each node namespace and one to a client
// namespace behind it.
//
//	client (10.20.0.2) --- cli [router, AS 64500] n1 --- eth0 node1 (10.10.1.2)
//	                                              n2 --- eth0 node2 (10.10.2.2) ...
type Routed struct {
	Lab    *lab.Lab
	Router *lab.Netns
	FRR    *FRR
	Client *lab.Netns
	Nodes  []*RoutedNode
	// ClientIPv4/6 are the client's addresses.
	ClientIPv4, ClientIPv6 netip.Addr
	opts                   RoutedOptions
}

// RoutedNode is one node of a routed lab.
type RoutedNode struct {
	// Index is 1-based; Name is "node<Index>".
	Index int
	Name  string
	NS    *lab.Netns
	// IPv4/IPv6 are the node's addresses on its link ("eth0"); RouterIPv4/6 the router's.
	IPv4, RouterIPv4 netip.Addr
	IPv6, RouterIPv6 netip.Addr
	// RouterIf is the router's interface towards the node ("n<Index>").
	RouterIf string
}

// NewRouted builds the topology in l and starts FRR. Nodes have a default route via the
// router; nothing is announced until the nodes' speakers start.
func NewRouted(l *lab.Lab, opts RoutedOptions) (*Routed, error) {
	if opts.Nodes == 0 {
		opts.Nodes = 3
	}
	if opts.RouterASN == 0 {
		opts.RouterASN = 64500
	}
	if opts.NodeASN == 0 {
		opts.NodeASN = 64512
	}
	r := &Routed{Lab: l, opts: opts,
		ClientIPv4: netip.MustParseAddr("10.20.0.2"), ClientIPv6: netip.MustParseAddr("fd00:20::2")}
	var err error
	if r.Router, err = l.AddNamespace("rtr"); err != nil {
		return nil, err
	}
	ctx := context.Background()
	for _, s := range []string{
		"net.ipv4.ip_forward=1",
		"net.ipv6.conf.all.forwarding=1",
		// Hash on the 5-tuple so connections from many client source ports spread over the
		// members (the default hashes on addresses only: one client, one member).
		"net.ipv4.fib_multipath_hash_policy=1",
		"net.ipv6.fib_multipath_hash_policy=1",
		// Replies come back from the VIP over whichever node link; do not drop them.
		"net.ipv4.conf.all.rp_filter=0",
		"net.ipv4.conf.default.rp_filter=0",
	} {
		if _, err := r.Router.Run(ctx, "sysctl", "-qw", s); err != nil {
			return nil, err
		}
	}
	if r.Client, err = l.AddNamespace("cli"); err != nil {
		return nil, err
	}
	if err := l.AddLink(r.Client, "eth0", r.Router, "cli"); err != nil {
		return nil, err
	}
	for _, a := range []struct {
		ns     *lab.Netns
		ifName string
		prefix string
	}{
		{r.Router, "cli", "10.20.0.1/24"}, {r.Router, "cli", "fd00:20::1/64"},
		{r.Client, "eth0", "10.20.0.2/24"}, {r.Client, "eth0", "fd00:20::2/64"},
	} {
		if err := a.ns.AddAddr(a.ifName, netip.MustParsePrefix(a.prefix)); err != nil {
			return nil, err
		}
	}
	if err := addDefaultRoutes(r.Client, "10.20.0.1", "fd00:20::1"); err != nil {
		return nil, err
	}

	var sw *lab.Netns
	if opts.Segment {
		if sw, err = r.segment(); err != nil {
			return nil, err
		}
	}
	var neighbors []FRRNeighbor
	for i := 1; i <= opts.Nodes; i++ {
		n := &RoutedNode{
			Index: i, Name: "node" + strconv.Itoa(i), RouterIf: "n" + strconv.Itoa(i),
			IPv4: netip.AddrFrom4([4]byte{10, 10, byte(i), 2}), RouterIPv4: netip.AddrFrom4([4]byte{10, 10, byte(i), 1}),
			IPv6: netip.MustParseAddr(fmt.Sprintf("fd00:10:%x::2", i)), RouterIPv6: netip.MustParseAddr(fmt.Sprintf("fd00:10:%x::1", i)),
		}
		if n.NS, err = l.AddNamespace(n.Name); err != nil {
			return nil, err
		}
		if opts.Segment {
			n.RouterIf = "seg"
			n.IPv4, n.RouterIPv4 = netip.AddrFrom4([4]byte{10, 10, 0, byte(10 + i)}), netip.AddrFrom4([4]byte{10, 10, 0, 1})
			n.IPv6, n.RouterIPv6 = netip.MustParseAddr(fmt.Sprintf("fd00:10::%x", 10+i)), netip.MustParseAddr("fd00:10::1")
			if err := attachSegment(l, sw, n.NS, "eth0", "p"+n.Name); err != nil {
				return nil, err
			}
			for _, p := range []netip.Prefix{netip.PrefixFrom(n.IPv4, 24), netip.PrefixFrom(n.IPv6, 64)} {
				if err := n.NS.AddAddr("eth0", p); err != nil {
					return nil, err
				}
			}
		} else if err := r.pointToPoint(n); err != nil {
			return nil, err
		}
		if err := addDefaultRoutes(n.NS, n.RouterIPv4.String(), n.RouterIPv6.String()); err != nil {
			return nil, err
		}
		nb := FRRNeighbor{Address: n.IPv4, ASN: opts.NodeASN}
		if opts.Neighbor != nil {
			opts.Neighbor(i, &nb)
		}
		neighbors = append(neighbors, nb)
		if opts.IPv6 {
			nb6 := nb
			nb6.Address = n.IPv6
			neighbors = append(neighbors, nb6)
		}
		r.Nodes = append(r.Nodes, n)
	}
	r.FRR, err = StartFRR(r.Router, "frr", FRRConfig{
		ASN: opts.RouterASN, RouterID: netip.MustParseAddr("10.20.0.1"), Neighbors: neighbors,
		Keepalive: opts.Keepalive, Hold: opts.Hold, BFD: opts.BFD,
	})
	if err != nil {
		return nil, err
	}
	return r, nil
}

// pointToPoint links node n to the router on a /24 (/64) of its own.
func (r *Routed) pointToPoint(n *RoutedNode) error {
	if err := r.Lab.AddLink(n.NS, "eth0", r.Router, n.RouterIf); err != nil {
		return err
	}
	for _, a := range []struct {
		ns     *lab.Netns
		ifName string
		p      netip.Prefix
	}{
		{n.NS, "eth0", netip.PrefixFrom(n.IPv4, 24)}, {r.Router, n.RouterIf, netip.PrefixFrom(n.RouterIPv4, 24)},
		{n.NS, "eth0", netip.PrefixFrom(n.IPv6, 64)}, {r.Router, n.RouterIf, netip.PrefixFrom(n.RouterIPv6, 64)},
	} {
		if err := a.ns.AddAddr(a.ifName, a.p); err != nil {
			return err
		}
	}
	return nil
}

// segment makes the shared segment (a bridge in namespace "sw") with the router on it.
func (r *Routed) segment() (*lab.Netns, error) {
	sw, err := r.Lab.AddNamespace("sw")
	if err != nil {
		return nil, err
	}
	if err := r.Lab.AddBridge(sw, "br0"); err != nil {
		return nil, err
	}
	if err := attachSegment(r.Lab, sw, r.Router, "seg", "prtr"); err != nil {
		return nil, err
	}
	for _, p := range []string{"10.10.0.1/24", "fd00:10::1/64"} {
		if err := r.Router.AddAddr("seg", netip.MustParsePrefix(p)); err != nil {
			return nil, err
		}
	}
	return sw, nil
}

// attachSegment links ns's ifName to a new port of the segment's bridge.
func attachSegment(l *lab.Lab, sw, ns *lab.Netns, ifName, port string) error {
	if err := l.AddLink(ns, ifName, sw, port); err != nil {
		return err
	}
	_, err := sw.Run(context.Background(), "ip", "link", "set", port, "master", "br0", "up")
	return err
}

func addDefaultRoutes(ns *lab.Netns, gw4, gw6 string) error {
	ctx := context.Background()
	if _, err := ns.Run(ctx, "ip", "route", "add", "default", "via", gw4); err != nil {
		return err
	}
	_, err := ns.Run(ctx, "ip", "-6", "route", "add", "default", "via", gw6)
	return err
}

// Node returns the node whose address (IPv4 or IPv6) is a, or nil.
func (r *Routed) Node(a netip.Addr) *RoutedNode {
	for _, n := range r.Nodes {
		if n.IPv4 == a || n.IPv6 == a {
			return n
		}
	}
	return nil
}

// FIB reads the router's kernel routing table through netlink: what forwards the client's
// packets, after bgpd and zebra did their part.
type FIB struct {
	ns *lab.Netns
	h  *netlink.Handle
}

// FIB opens the router's FIB; Close it when done.
func (r *Routed) FIB() (*FIB, error) {
	h, err := r.Router.Netlink()
	if err != nil {
		return nil, err
	}
	return &FIB{ns: r.Router, h: h}, nil
}

// Close releases the netlink handle.
func (f *FIB) Close() { f.h.Close() }

// NextHops returns the gateways of the route for prefix, sorted (empty when there is none).
func (f *FIB) NextHops(prefix netip.Prefix) ([]netip.Addr, error) {
	family := netlink.FAMILY_V4
	if prefix.Addr().Is6() {
		family = netlink.FAMILY_V6
	}
	dst := &net.IPNet{IP: prefix.Addr().AsSlice(), Mask: net.CIDRMask(prefix.Bits(), prefix.Addr().BitLen())}
	routes, err := f.h.RouteListFiltered(family, &netlink.Route{Dst: dst, Table: unix.RT_TABLE_MAIN}, netlink.RT_FILTER_DST|netlink.RT_FILTER_TABLE)
	if err != nil {
		return nil, fmt.Errorf("router FIB: %w", err)
	}
	var hops []netip.Addr
	for _, rt := range routes {
		if rt.Dst == nil || rt.Dst.String() != dst.String() {
			continue
		}
		if a, ok := netip.AddrFromSlice(rt.Gw); ok {
			hops = append(hops, a.Unmap())
		}
		for _, nh := range rt.MultiPath {
			if a, ok := netip.AddrFromSlice(nh.Gw); ok {
				hops = append(hops, a.Unmap())
			}
		}
	}
	slices.SortFunc(hops, netip.Addr.Compare)
	return slices.Compact(hops), nil
}

// WaitNextHops re-reads the next hops of prefix on every route change the router's kernel
// reports, and every 2 ms regardless (zebra may change a nexthop group in place, which raises
// no route notification), until cond holds, and returns when it first did. It is the clock of
// the BGP benchmark: the moment the router's forwarding actually changed.
func (f *FIB) WaitNextHops(ctx context.Context, prefix netip.Prefix, cond func([]netip.Addr) bool) (time.Time, []netip.Addr, error) {
	updates := make(chan netlink.RouteUpdate, 256)
	done := make(chan struct{})
	defer close(done)
	h := f.ns.Handle()
	if err := netlink.RouteSubscribeWithOptions(updates, done, netlink.RouteSubscribeOptions{Namespace: &h}); err != nil {
		return time.Time{}, nil, fmt.Errorf("watching the router FIB: %w", err)
	}
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for {
		hops, err := f.NextHops(prefix)
		now := time.Now()
		if err == nil && cond(hops) {
			return now, hops, nil
		}
		select {
		case <-ctx.Done():
			return time.Time{}, hops, errors.Join(ctx.Err(), err)
		case <-tick.C:
		case <-updates:
		}
	}
}
