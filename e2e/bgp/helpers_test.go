//go:build linux

package bgp_test

import (
	"context"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/caplb/caplb/e2e/lab"
	"github.com/caplb/caplb/e2e/lab/bgplab"
)

const (
	poll = 20 * time.Millisecond
	// converge bounds session establishment: gobgp dials 1-2 s after start (then every
	// connectRetry), plus the OPEN exchange.
	converge = 20 * time.Second
)

// startCluster builds a routed cluster for t and waits until every node announces.
func startCluster(t *testing.T, name string, opts bgplab.BGPClusterOptions) (*bgplab.BGPCluster, *bgplab.FIB) {
	t.Helper()
	bgplab.SkipUnlessFRR(t)
	l := lab.NewT(t, name)
	opts.AgentBinary, opts.StandinBinary = bins.agent, bins.standin
	c, err := bgplab.StartBGPCluster(l, opts)
	if err != nil {
		t.Fatalf("start cluster: %v", err)
	}
	fib, err := c.FIB()
	if err != nil {
		t.Fatalf("router FIB: %v", err)
	}
	t.Cleanup(fib.Close)
	return c, fib
}

// nodeHops are the expected next hops (the nodes' link addresses) of the VIP v.
func nodeHops(c *bgplab.BGPCluster, v netip.Addr, members ...*bgplab.BGPMember) []netip.Addr {
	var out []netip.Addr
	for _, m := range members {
		if v.Is4() {
			out = append(out, m.IPv4)
		} else {
			out = append(out, m.IPv6)
		}
	}
	return sortAddrs(out)
}

func sortAddrs(a []netip.Addr) []netip.Addr {
	slices.SortFunc(a, netip.Addr.Compare)
	return a
}

// eventuallyHops waits until the router's FIB forwards every VIP to exactly members.
func eventuallyHops(t *testing.T, c *bgplab.BGPCluster, fib *bgplab.FIB, timeout time.Duration, members ...*bgplab.BGPMember) {
	t.Helper()
	g := NewWithT(t)
	for _, v := range c.VIPs {
		want := strs(nodeHops(c, v, members...))
		g.Eventually(func() ([]string, error) {
			h, err := fib.NextHops(bgplab.HostPrefix(v))
			return strs(h), err
		}, timeout, poll).Should(Equal(want), "router FIB next hops for %s", v)
	}
}

// spread dials the VIP n times from the client (each from a new source port) and counts the
// answering nodes.
func spread(t *testing.T, c *bgplab.BGPCluster, v netip.Addr, n int) map[string]int {
	t.Helper()
	counts := map[string]int{}
	for i := 0; i < n; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		name, err := c.Dial(ctx, v)
		cancel()
		if err != nil {
			t.Fatalf("dial %s (%d of %d): %v", v, i+1, n, err)
		}
		counts[name]++
	}
	return counts
}

var metricLine = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? ([0-9.eE+-]+|NaN|[+-]Inf)$`)

// metric returns the value of the series name{labels...} (all given label pairs must match),
// summing matches; ok is false when there is none.
func metric(text, name string, labels ...string) (float64, bool) {
	var sum float64
	found := false
	for _, line := range strings.Split(text, "\n") {
		m := metricLine.FindStringSubmatch(line)
		if m == nil || m[1] != name {
			continue
		}
		match := true
		for i := 0; i+1 < len(labels); i += 2 {
			if !strings.Contains(m[2], labels[i]+`="`+labels[i+1]+`"`) {
				match = false
			}
		}
		if !match {
			continue
		}
		v, err := strconv.ParseFloat(m[3], 64)
		if err == nil {
			sum += v
			found = true
		}
	}
	return sum, found
}

// strs makes addresses readable in failure messages ([] for none).
func strs(a []netip.Addr) []string {
	out := []string{}
	for _, x := range a {
		out = append(out, x.String())
	}
	return out
}
