//go:build linux

package lifecycle

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/caplb/caplb/e2e/lab"
)

// The endpoint-move lab's addresses: an external load balancer on the segment (an HAProxy VM, a
// cloud load balancer: what a static LoadBalancer with spec.endpoint.host fronts), and the
// management side's own address on it.
var (
	extLBAddr = netip.MustParseAddr("10.44.0.4")
	mgmtAddr  = netip.MustParseAddr("10.44.0.254")
	// unsignedAddr is an endpoint no machine's certificate carries (the move to it must wait).
	unsignedAddr = netip.MustParseAddr("10.44.0.5")
)

// extLB is a TCP load balancer in a namespace of its own, in front of the machines' API
// servers as an HAProxy in TCP mode with `option httpchk GET /readyz` (check-ssl, verify none)
// is: each new connection goes to the next machine whose /readyz answered 200 at the last check
// (every 500 ms, one failure marks it down); connections are spliced, never terminated.
type extLB struct {
	ns       *lab.Netns
	ln       net.Listener
	backends func() []netip.Addr
	mu       sync.Mutex
	healthy  []netip.Addr
	next     int
	stop     context.CancelFunc
	wg       sync.WaitGroup
}

// startExtLB starts the load balancer in ns, listening on addr:6443, in front of backends()
// (read at every health round).
func startExtLB(ns *lab.Netns, addr netip.Addr, backends func() []netip.Addr) (*extLB, error) {
	e := &extLB{ns: ns, backends: backends}
	if err := ns.Do(func() error {
		ln, err := net.Listen("tcp", netip.AddrPortFrom(addr, apiPort).String())
		e.ln = ln
		return err
	}); err != nil {
		return nil, fmt.Errorf("external load balancer: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	e.stop = cancel
	e.wg.Add(2)
	go e.check(ctx)
	go e.accept()
	return e, nil
}

func (e *extLB) check(ctx context.Context) {
	defer e.wg.Done()
	hc := &http.Client{Timeout: time.Second, Transport: &http.Transport{DialContext: e.ns.DialContext,
		DisableKeepAlives: true, TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // HAProxy's check-ssl verify none
	t := time.NewTicker(500 * time.Millisecond)
	defer t.Stop()
	for {
		var up []netip.Addr
		for _, b := range e.backends() {
			resp, err := hc.Get("https://" + netip.AddrPortFrom(b, apiPort).String() + "/readyz")
			if err != nil {
				continue
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				up = append(up, b)
			}
		}
		e.mu.Lock()
		e.healthy = up
		e.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (e *extLB) pick() (netip.Addr, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.healthy) == 0 {
		return netip.Addr{}, false
	}
	e.next++
	return e.healthy[e.next%len(e.healthy)], true
}

func (e *extLB) accept() {
	defer e.wg.Done()
	for {
		c, err := e.ln.Accept()
		if err != nil {
			return
		}
		go e.forward(c)
	}
}

func (e *extLB) forward(c net.Conn) {
	b, ok := e.pick()
	if !ok {
		c.Close()
		return
	}
	lab.Forward(c, e.ns.DialContext, netip.AddrPortFrom(b, apiPort).String())
}

// Close stops the load balancer; open connections end with their peers.
func (e *extLB) Close() error {
	e.stop()
	err := e.ln.Close()
	e.wg.Wait()
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return err
}

// routeFromHost gives the test's own namespace (the management cluster: its API server, CAPI's
// controllers, caplb's manager) an address on the segment, as a management cluster reaches its
// workload clusters' networks through a router: the manager then dials the members itself (the
// endpoint move's certificate check, the static backend's probe) and the kubeconfig Secret
// names the real endpoint. The pair goes with the segment's namespace.
func (t *topology) routeFromHost() error {
	host := "cl-" + t.lab.Name()
	if len(host) > 15 {
		host = host[:15]
	}
	port := "p-host"
	if out, err := exec.Command("ip", "link", "add", host, "type", "veth", "peer", "name", port,
		"netns", t.sw.Name()).CombinedOutput(); err != nil {
		return fmt.Errorf("ip link add %s: %w: %s", host, err, strings.TrimSpace(string(out)))
	}
	for _, argv := range [][]string{
		{"ip", "addr", "add", netip.PrefixFrom(mgmtAddr, nodeSubnet.Bits()).String(), "dev", host},
		{"ip", "link", "set", host, "up"},
	} {
		if out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput(); err != nil {
			return fmt.Errorf("%s: %w: %s", strings.Join(argv, " "), err, strings.TrimSpace(string(out)))
		}
	}
	_, err := t.sw.Run(context.Background(), "ip", "link", "set", port, "master", bridge, "up")
	return err
}

// addExtLB attaches the external load balancer's namespace to the segment.
func (t *topology) addExtLB() (*lab.Netns, error) {
	ns, err := t.lab.AddNamespace("elb")
	if err != nil {
		return nil, err
	}
	if err := t.attach(ns, "p-elb"); err != nil {
		return nil, err
	}
	return ns, ns.AddAddr("eth0", netip.PrefixFrom(extLBAddr, nodeSubnet.Bits()))
}

// machineAddrs are the running control-plane machines' addresses: the external load balancer's
// backends (its operator adds and removes them with the Machines).
func (l *Lab) machineAddrs() []netip.Addr {
	var out []netip.Addr
	for _, n := range l.Nodes() {
		if n.cp != nil {
			out = append(out, n.Addr)
		}
	}
	return out
}
