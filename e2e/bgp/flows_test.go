//go:build linux

package bgp_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/caplb/caplb/e2e/lab/bgplab"
)

const echoPort = 7000

// TestFlowSharing: three members on one segment with FRR spreading 24 long-lived connections
// over them by ECMP. A member withdrawing and coming back rehashes the router's flows twice
// (Linux's hash-threshold moves flows between the remaining members too). With flow sharing
// every connection keeps its member throughout, answered by the node it started on, and so do
// 12 connections opened the instant before another member withdraws (known by the next list,
// or held until it names them: modes/flows TestForwarderEndToEnd shows the hold itself); without
// it (the control) the rehash resets connections.
func TestFlowSharing(t *testing.T) {
	for _, sharing := range []bool{true, false} {
		t.Run(fmt.Sprintf("flowSharing=%v", sharing), func(t *testing.T) {
			g := NewWithT(t)
			c, fib := startCluster(t, "flows", bgplab.BGPClusterOptions{
				Routed: bgplab.RoutedOptions{Nodes: 3, Segment: true}, FlowSharing: sharing, EchoPort: echoPort,
			})
			n1, n2, n3 := c.Members[0], c.Members[1], c.Members[2]
			eventuallyHops(t, c, fib, converge, n1, n2, n3)
			ctx := context.Background()

			conns := openEchoConns(t, c, 24)
			owned := map[string]int{}
			for _, ec := range conns {
				owned[ec.owner]++
			}
			t.Logf("connections by member: %v", owned)
			if sharing {
				// Each member knows the others' connections before the router rehashes (a
				// connection started within the sharing interval of a rehash is not covered).
				for _, m := range c.Members {
					want := float64(len(conns) - owned[m.Name])
					g.Eventually(func() (float64, error) {
						text, err := m.Metrics(ctx)
						v, _ := metric(text, "caplb_bgp_foreign_flows")
						return v, err
					}, 5*time.Second, poll).Should(Equal(want), "%s knows the others' connections", m.Name)
				}
			}
			load := runEcho(conns, 50*time.Millisecond)
			defer load.stop()
			load.waitRounds(t, 3)

			g.Expect(n3.Quiesce(ctx, true)).To(Succeed())
			eventuallyHops(t, c, fib, converge, n1, n2)
			load.waitRounds(t, 5)
			g.Expect(n3.Quiesce(ctx, false)).To(Succeed())
			eventuallyHops(t, c, fib, converge, n1, n2, n3)
			load.waitRounds(t, 5)
			failed := load.stop()

			if !sharing {
				g.Expect(failed).NotTo(BeEmpty(), "the control: without flow sharing the rehash resets connections")
				return
			}
			g.Expect(failed).To(BeEmpty(), "every connection answered by its own member through both rehashes")

			// Connections opened the instant before a rehash: known by the next list, or held by the
			// member they land on until it names them.
			young := openEchoConns(t, c, 12)
			load = runEcho(young, 50*time.Millisecond)
			g.Expect(n1.Quiesce(ctx, true)).To(Succeed())
			eventuallyHops(t, c, fib, converge, n2, n3)
			load.waitRounds(t, 5)
			g.Expect(load.stop()).To(BeEmpty(), "connections opened just before the rehash kept their member too")

			var forwarded, held float64
			for _, m := range c.Members {
				text, err := m.Metrics(ctx)
				g.Expect(err).NotTo(HaveOccurred())
				v, _ := metric(text, "caplb_bgp_flow_packets_forwarded_total")
				forwarded += v
				h, _ := metric(text, "caplb_bgp_flow_packets_held_total")
				held += h
			}
			g.Expect(forwarded).To(BeNumerically(">", 0), "the rehash moved connections and members sent their packets on")
			t.Logf("packets sent on to their owner: %.0f; held for a list: %.0f", forwarded, held)
		})
	}
}

// echoConn is one long-lived connection to the stand-ins' echo service.
type echoConn struct {
	conn  net.Conn
	r     *bufio.Reader
	owner string
}

func openEchoConns(t *testing.T, c *bgplab.BGPCluster, n int) []*echoConn {
	t.Helper()
	var out []*echoConn
	for i := 0; i < n; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		conn, err := c.Client.DialContext(ctx, "tcp", netip.AddrPortFrom(c.VIPs[0], echoPort).String())
		cancel()
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		t.Cleanup(func() { _ = conn.Close() })
		_ = conn.SetReadDeadline(time.Now().Add(2 * time.Second))
		r := bufio.NewReader(conn)
		greeting, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("connection %d greeting: %v", i, err)
		}
		out = append(out, &echoConn{conn: conn, r: r, owner: strings.TrimSpace(greeting)})
	}
	return out
}

// echoLoad exchanges a line on every connection each interval; a connection whose exchange fails
// or is answered by another node counts as failed and stops.
type echoLoad struct {
	mu     sync.Mutex
	rounds []int
	failed map[int]string
	done   chan struct{}
	wg     sync.WaitGroup
	once   sync.Once
}

func runEcho(conns []*echoConn, interval time.Duration) *echoLoad {
	l := &echoLoad{rounds: make([]int, len(conns)), failed: map[int]string{}, done: make(chan struct{})}
	for i, ec := range conns {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for n := 0; ; n++ {
				select {
				case <-l.done:
					return
				case <-time.After(interval):
				}
				line := fmt.Sprintf("r%d", n)
				_ = ec.conn.SetDeadline(time.Now().Add(2 * time.Second))
				_, err := fmt.Fprintf(ec.conn, "%s\n", line)
				var got string
				if err == nil {
					got, err = ec.r.ReadString('\n')
				}
				want := ec.owner + ": " + line
				if err != nil || strings.TrimSpace(got) != want {
					l.mu.Lock()
					l.failed[i] = fmt.Sprintf("owner %s, round %d: got %q, error %v", ec.owner, n, strings.TrimSpace(got), err)
					l.mu.Unlock()
					return
				}
				l.mu.Lock()
				l.rounds[i]++
				l.mu.Unlock()
			}
		}()
	}
	return l
}

// waitRounds waits until every connection still alive made n more exchanges.
func (l *echoLoad) waitRounds(t *testing.T, n int) {
	t.Helper()
	l.mu.Lock()
	base := append([]int(nil), l.rounds...)
	l.mu.Unlock()
	NewWithT(t).Eventually(func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		for i, r := range l.rounds {
			if _, dead := l.failed[i]; !dead && r < base[i]+n {
				return false
			}
		}
		return true
	}, 20*time.Second, poll).Should(BeTrue(), "every live connection made %d more exchanges", n)
}

// stop ends the load and returns the failed connections.
func (l *echoLoad) stop() map[int]string {
	l.once.Do(func() { close(l.done) })
	l.wg.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[int]string{}
	for k, v := range l.failed {
		out[k] = v
	}
	return out
}
