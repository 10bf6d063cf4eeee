//go:build linux

package lifecycle

import (
	"context"
	"fmt"
	"net/netip"
	"strconv"
	"time"

	"github.com/caplb/caplb/e2e/lab"
	"github.com/caplb/caplb/e2e/lab/bgplab"
)

// Backend is the LoadBalancer backend a lifecycle runs behind.
type Backend string

// The backends the lifecycle lab runs.
const (
	ARP Backend = "arp"
	BGP Backend = "bgp"
)

// The lab's address plan (inside its namespaces only). Machines sit on one L2 segment (a
// bridge in the "sw" namespace); the ARP client sits on it too; for BGP a router (FRR) sits on
// it as the machines' gateway and peer, with the client behind it on a segment of its own.
var (
	nodeSubnet = netip.MustParsePrefix("10.44.0.0/24")
	routerAddr = netip.MustParseAddr("10.44.0.1")
	arpClient  = netip.MustParseAddr("10.44.0.2")
	// arpWatcher is the ARP lab's observer station on the segment (arpwatch.go): apart from the
	// client, so that its ARP requests never touch the client's neighbour entry for the VIP.
	arpWatcher   = netip.MustParseAddr("10.44.0.3")
	bgpClient    = netip.MustParseAddr("10.20.0.2")
	bgpClientGW  = netip.MustParseAddr("10.20.0.1")
	arpPoolFirst = netip.MustParseAddr("10.44.0.100")
	bgpPoolFirst = netip.MustParseAddr("10.0.0.100")
)

const (
	bridge    = "br0"
	routerASN = 64500
	// bgpPassword is the TCP-MD5 password of the lab router and of the sample's Secret "tor-bgp".
	bgpPassword = "change-me"
	nodeASN     = 64512
)

// topology is the lab's network: the segment, the client and (BGP) the router.
type topology struct {
	lab     *lab.Lab
	backend Backend
	sw      *lab.Netns
	client  *lab.Netns
	watcher *lab.Netns // ARP only
	router  *lab.Netns
	frr     *bgplab.FRR
}

func newTopology(l *lab.Lab, b Backend) (*topology, error) {
	t := &topology{lab: l, backend: b}
	var err error
	if t.sw, err = l.AddNamespace("sw"); err != nil {
		return nil, err
	}
	if err := l.AddBridge(t.sw, bridge); err != nil {
		return nil, err
	}
	if t.client, err = l.AddNamespace("client"); err != nil {
		return nil, err
	}
	if b == ARP {
		if err := t.attach(t.client, "p-client"); err != nil {
			return nil, err
		}
		if err := t.client.AddAddr("eth0", netip.PrefixFrom(arpClient, nodeSubnet.Bits())); err != nil {
			return nil, err
		}
		if t.watcher, err = l.AddNamespace("arpw"); err != nil {
			return nil, err
		}
		if err := t.attach(t.watcher, "p-arpw"); err != nil {
			return nil, err
		}
		return t, t.watcher.AddAddr("eth0", netip.PrefixFrom(arpWatcher, nodeSubnet.Bits()))
	}
	if t.router, err = l.AddNamespace("rtr"); err != nil {
		return nil, err
	}
	ctx := context.Background()
	for _, s := range []string{"net.ipv4.ip_forward=1", "net.ipv4.fib_multipath_hash_policy=1",
		"net.ipv4.conf.all.rp_filter=0", "net.ipv4.conf.default.rp_filter=0"} {
		if _, err := t.router.Run(ctx, "sysctl", "-qw", s); err != nil {
			return nil, err
		}
	}
	if err := t.attach(t.router, "p-rtr"); err != nil {
		return nil, err
	}
	if err := t.router.AddAddr("eth0", netip.PrefixFrom(routerAddr, nodeSubnet.Bits())); err != nil {
		return nil, err
	}
	if err := l.AddLink(t.client, "eth0", t.router, "cli"); err != nil {
		return nil, err
	}
	if err := t.client.AddAddr("eth0", netip.MustParsePrefix("10.20.0.2/24")); err != nil {
		return nil, err
	}
	if err := t.router.AddAddr("cli", netip.MustParsePrefix("10.20.0.1/24")); err != nil {
		return nil, err
	}
	if _, err := t.client.Run(ctx, "ip", "route", "add", "default", "via", bgpClientGW.String()); err != nil {
		return nil, err
	}
	t.frr, err = bgplab.StartFRR(t.router, "frr", bgplab.FRRConfig{
		ASN: routerASN, RouterID: routerAddr, ListenRange: nodeSubnet, ListenASN: nodeASN, ListenPassword: bgpPassword,
		// The BGP sample asks for BFD (300ms x 3) on its first router: so does this one.
		BFD: &bgplab.FRRBFD{Interval: 300 * time.Millisecond, Multiplier: 3},
	})
	return t, err
}

// attach links ns's eth0 to a new port on the segment's bridge.
func (t *topology) attach(ns *lab.Netns, port string) error {
	if err := t.lab.AddLink(ns, "eth0", t.sw, port); err != nil {
		return err
	}
	_, err := t.sw.Run(context.Background(), "ip", "link", "set", port, "master", bridge, "up")
	return err
}

// addNode gives ns the index-th machine address on the segment (and, for BGP, a default route
// through the router).
func (t *topology) addNode(ns *lab.Netns, index int) (netip.Addr, error) {
	if index < 1 || index > 80 {
		return netip.Addr{}, fmt.Errorf("machine index %d out of the lab's range 1-80", index)
	}
	addr := nodeAddr(index)
	if err := t.attach(ns, "p-m"+strconv.Itoa(index)); err != nil {
		return addr, err
	}
	if err := ns.AddAddr("eth0", netip.PrefixFrom(addr, nodeSubnet.Bits())); err != nil {
		return addr, err
	}
	if t.backend == BGP {
		if _, err := ns.Run(context.Background(), "ip", "route", "add", "default", "via", routerAddr.String()); err != nil {
			return addr, err
		}
	}
	return addr, nil
}

// nodeAddr is the index-th machine's address: known before the machine exists, as a
// pre-addressed cluster's are.
func nodeAddr(index int) netip.Addr { return netip.AddrFrom4([4]byte{10, 44, 0, byte(10 + index)}) }

// poolFirst is the first address of the VIP pool the lab's IPAM serves.
func (t *topology) poolFirst() netip.Addr {
	if t.backend == BGP {
		return bgpPoolFirst
	}
	return arpPoolFirst
}
