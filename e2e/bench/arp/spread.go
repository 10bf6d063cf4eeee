//go:build linux

package main

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/vishvananda/netlink"

	agentv1 "github.com/caplb/caplb/api/agent/v1alpha1"
	"github.com/caplb/caplb/e2e/lab/arplab"
)

// The spread pass: caplb with spec.backend.arp.loadBalancing: spread, in a
// lab whose nodes forward as kubeadm nodes do. Before the fault scenarios it
// measures the shares of new connections each member answers, the latency a
// connection through the VIP holder adds over one to the member directly,
// and the connects that fail while a member is quiesced and restored.

// spreadConnections is how many new connections the shares are measured on.
const spreadConnections = 900

// spreadLabOptions: the spread mode on the lab's API port, forwarding on.
func spreadLabOptions(agentBin, standinBin string) arplab.ClusterOptions {
	return arplab.ClusterOptions{AgentBinary: agentBin, StandinBinary: standinBin, Forwarding: true,
		Tune: func(_ int, c *agentv1.AgentConfiguration) { c.ARP.LoadBalancing = agentv1.LoadBalancingSpread }}
}

// spreadFigures is the "spread" object of the JSON.
type spreadFigures struct {
	Connections int `json:"connections"`
	// Shares: the fraction of the new connections each member answered.
	Shares map[string]float64 `json:"shares"`
	// MaxShareDeviationPct: the largest |share - 1/N| as a percentage of 1/N (goal: within 10).
	MaxShareDeviationPct float64 `json:"max_share_deviation_pct"`
	FailedShareConnects  int     `json:"failed_share_connects"`
	// Connect + first line, p50, through the VIP (dealt by the holder) and to a member directly.
	ViaVIPUsP50       float64 `json:"via_vip_us_p50"`
	DirectUsP50       float64 `json:"direct_us_p50"`
	AddedLatencyUsP50 float64 `json:"added_latency_us_p50"`
	// QuiesceFailed: connects that failed while a member other than the holder was quiesced
	// and restored (QuiesceRounds times); GracefulFailed: those of the graceful scenario.
	QuiesceRounds  int `json:"quiesce_rounds"`
	QuiesceFailed  int `json:"quiesce_failed_connects"`
	GracefulFailed int `json:"graceful_failed_connects"`
	// Scenarios: the failover figures in spread mode, keepalived's beside them.
	Scenarios map[string]scenarioResult `json:"scenarios,omitempty"`
}

// measureSpread runs the pre-scenario measurements on a settled spread lab.
func measureSpread(b *bench, rounds int) (*spreadFigures, error) {
	c := b.c
	owner, err := b.waitStable(30 * time.Second)
	if err != nil {
		return nil, err
	}
	if err := waitSpreadSet(owner, len(c.Nodes), 10*time.Second); err != nil {
		return nil, err
	}
	f := &spreadFigures{Connections: spreadConnections, Shares: map[string]float64{}}
	who := map[string]int{}
	var via, direct []float64
	for range spreadConnections {
		start := time.Now()
		name, err := connectLine(c, arplab.VIPv4)
		if err != nil {
			f.FailedShareConnects++
			continue
		}
		via = append(via, float64(time.Since(start).Microseconds()))
		who[name]++
	}
	for i := range spreadConnections {
		n := c.Nodes[i%len(c.Nodes)]
		start := time.Now()
		if _, err := connectLine(c, n.Addr4); err != nil {
			return nil, fmt.Errorf("direct connect to %s: %w", n.Name, err)
		}
		direct = append(direct, float64(time.Since(start).Microseconds()))
	}
	equal := 1 / float64(len(c.Nodes))
	for _, n := range c.Nodes {
		share := float64(who[n.Name]) / float64(spreadConnections)
		f.Shares[n.Name] = round1(share*1000) / 1000
		if dev := round1(abs(share-equal) / equal * 100); dev > f.MaxShareDeviationPct {
			f.MaxShareDeviationPct = dev
		}
	}
	sort.Float64s(via)
	sort.Float64s(direct)
	f.ViaVIPUsP50, f.DirectUsP50 = percentile(via, 0.5), percentile(direct, 0.5)
	f.AddedLatencyUsP50 = f.ViaVIPUsP50 - f.DirectUsP50
	fmt.Printf("caplb-spread shares of %d new connections %v (largest deviation %.1f%%), p50 connect via VIP %.0f us, direct %.0f us\n",
		spreadConnections, f.Shares, f.MaxShareDeviationPct, f.ViaVIPUsP50, f.DirectUsP50)

	f.QuiesceRounds = rounds
	for i := range rounds {
		failed, err := quiesceRound(b, owner, c.Nodes[(slices.Index(c.Nodes, owner)+1+i%2)%len(c.Nodes)])
		if err != nil {
			return nil, err
		}
		f.QuiesceFailed += failed
	}
	fmt.Printf("caplb-spread quiesce and restore of a member, %d rounds: failed connects %d\n", rounds, f.QuiesceFailed)
	return f, nil
}

// quiesceRound quiesces member (not the holder), waits until the holder
// deals to the others only, restores it, waits until it is dealt to again,
// and returns the client's failed connects meanwhile.
func quiesceRound(b *bench, owner, member *arplab.Node) (int, error) {
	b.rec.reset()
	t0 := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if code, err := member.Admin(ctx, http.MethodPost, "/quiesce"); err != nil || code != http.StatusAccepted {
		return 0, fmt.Errorf("quiesce %s: %d %v", member.Name, code, err)
	}
	if err := waitSpreadSet(owner, len(b.c.Nodes)-1, 5*time.Second); err != nil {
		return 0, err
	}
	if code, err := member.Admin(ctx, http.MethodDelete, "/quiesce"); err != nil || code != http.StatusAccepted {
		return 0, fmt.Errorf("restore %s: %d %v", member.Name, code, err)
	}
	if err := waitSpreadSet(owner, len(b.c.Nodes), 5*time.Second); err != nil {
		return 0, err
	}
	time.Sleep(b.rec.timeout) // the last attempts land
	as, _ := b.rec.window(t0, time.Now())
	failed := 0
	for _, a := range as {
		if a.Err != "" {
			failed++
		}
	}
	return failed, nil
}

// waitSpreadSet waits until n's kernel deals new connections to want members.
func waitSpreadSet(n *arplab.Node, want int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	got := -1
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		s, err := n.Status(ctx)
		cancel()
		if err == nil && s.Dataplane != nil && s.Dataplane.Spread != nil {
			if got = len(s.Dataplane.Spread.Backends); got == want {
				return nil
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("%s deals to %d members, want %d, after %v", n.Name, got, want, timeout)
}

// connectLine opens a connection to addr's API port and reads the server's name.
func connectLine(c *arplab.Cluster, addr netip.Addr) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	conn, err := c.Client.DialContext(ctx, "tcp", net.JoinHostPort(addr.String(), strconv.Itoa(arplab.APIPort)))
	if err != nil {
		return "", err
	}
	defer conn.Close()
	_ = conn.SetReadDeadline(time.Now().Add(time.Second))
	line, err := bufio.NewReader(conn).ReadString('\n')
	return strings.TrimSpace(line), err
}

func abs(f float64) float64 {
	if f < 0 {
		return -f
	}
	return f
}

// clientView reads which node the client's neighbour table sends the VIP to
// (by MAC): in spread mode every member answers connections, so the holder
// the client uses is told by its ARP entry, not by who answers.
type clientView struct {
	nl    *netlink.Handle
	macs  map[string]string
	ifidx int
}

func newClientView(c *arplab.Cluster) (*clientView, error) {
	h, err := c.Client.Netlink()
	if err != nil {
		return nil, err
	}
	l, err := h.LinkByName("eth0")
	if err != nil {
		return nil, err
	}
	v := &clientView{nl: h, macs: map[string]string{}, ifidx: l.Attrs().Index}
	for _, n := range c.Nodes {
		nh, err := n.NS.Netlink()
		if err != nil {
			return nil, err
		}
		nl, err := nh.LinkByName("eth0")
		nh.Close()
		if err != nil {
			return nil, err
		}
		v.macs[nl.Attrs().HardwareAddr.String()] = n.Name
	}
	return v, nil
}

// sees returns the node the client's neighbour entry for vip points to ("" if none).
func (v *clientView) sees(vip netip.Addr) string {
	ns, err := v.nl.NeighList(v.ifidx, netlink.FAMILY_V4)
	if err != nil {
		return ""
	}
	for _, n := range ns {
		if a, ok := netip.AddrFromSlice(n.IP); ok && a.Unmap() == vip && n.HardwareAddr != nil {
			return v.macs[n.HardwareAddr.String()]
		}
	}
	return ""
}
