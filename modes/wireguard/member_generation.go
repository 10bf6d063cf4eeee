package wireguard

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"

	wgapi "github.com/caplb/caplb/api/wireguard/v1alpha1"
)

// generation is one key with its tunnel: a rotation runs two side by side (make-before-break).
type generation struct {
	priv Key
	pub  Key
	tun  *Tunnel
	ln   net.Listener // netstack only: the member's proxy listener
	// countOpen (device tun) reads how many connections the API server holds on this
	// generation's address; nil on netstack, where the proxy counts them in open.
	countOpen func() int

	mu       sync.Mutex
	open     int
	accepted map[netip.Addr]int // connections per remote tunnel address (each gateway's checks)
	// lastActive: when a tunnel connection last arrived or ended (drain waits for quiet).
	lastActive time.Time
	wg         sync.WaitGroup
}

// openGeneration brings up a tunnel for key priv. On netstack the member listens inside it
// and forwards each connection to the upstream; on a TUN device the tunnel address sits on the
// node's interface and the kernel hands the gateways' connections to the API server itself.
func (m *Member) openGeneration(priv Key) (*generation, error) {
	pub := priv.PublicKey()
	addr := TunnelAddress(m.prefix, pub)
	g := &generation{priv: priv, pub: pub, accepted: map[netip.Addr]int{}}
	var err error
	if m.cfg.Device == wgapi.DeviceTUN {
		err = m.openTUNGeneration(g, addr)
	} else {
		err = m.openNetstackGeneration(g, addr)
	}
	if err != nil {
		return nil, err
	}
	// Gateways whose keys are known already (pinned, or from an earlier registration) become
	// peers at once.
	m.mu.Lock()
	views := make([]*gatewayView, 0, len(m.gwState))
	for _, v := range m.gwState {
		views = append(views, v)
	}
	m.mu.Unlock()
	for _, v := range views {
		if v.address.IsValid() {
			if err := m.setGatewayPeer(g, v); err != nil {
				m.log.Error(err, "gateway peer", "endpoint", v.cfg.Endpoint)
			}
		}
	}
	if g.ln != nil {
		g.wg.Add(1)
		go func() { defer g.wg.Done(); m.serve(g) }()
	}
	return g, nil
}

func (m *Member) openNetstackGeneration(g *generation, addr netip.Addr) error {
	tun, err := OpenTunnel(g.priv, addr, 0, m.cfg.MTU, m.log.WithName("wireguard"))
	if err != nil {
		return err
	}
	ln, err := tun.Net.ListenTCPAddrPort(netip.AddrPortFrom(addr, uint16(m.cfg.TunnelPort)))
	if err != nil {
		tun.Close()
		return fmt.Errorf("listen in tunnel on port %d: %w", m.cfg.TunnelPort, err)
	}
	g.tun, g.ln = tun, ln
	return nil
}

// openTUNGeneration puts addr on the member's TUN interface. Its filter lets in only TCP to
// addr and the API server's port, and sees what the proxy would have counted: each gateway's
// new connections (rotation waits for their health checks) and when one arrived or ended
// (drain waits for quiet). The open connections are the kernel's own count.
func (m *Member) openTUNGeneration(g *generation, addr netip.Addr) error {
	m.mu.Lock()
	host := m.host
	m.mu.Unlock()
	if host == nil {
		return fmt.Errorf("device tun: no TUN interface (the member is not running)")
	}
	port := uint16(m.cfg.TunnelPort)
	admit := func(b []byte) bool {
		p := parsePacket(b)
		if !memberAdmits(p, addr, port) {
			return false
		}
		if opens, ends := p.opensConnection(), p.endsConnection(); opens || ends {
			g.mu.Lock()
			if opens {
				g.accepted[p.src]++
			}
			g.lastActive = time.Now()
			g.mu.Unlock()
		}
		return true
	}
	end, err := host.attach(addr, admit)
	if err != nil {
		return err
	}
	tun, err := openTUNTunnel(end, g.priv, addr, 0, m.log.WithName("wireguard"))
	if err != nil {
		_ = end.Close()
		return err
	}
	ap := netip.AddrPortFrom(addr, port)
	g.tun = tun
	g.countOpen = func() int {
		n, err := openTCPConnections(ap)
		if err != nil {
			// Unknown is not zero: a drain then runs to its timeout rather than cut a connection.
			m.log.Error(err, "count the API server's tunnel connections", "address", ap.String())
			return 1
		}
		return n
	}
	return nil
}

// apiServerListening (device tun) reports whether something listens on tunnelPort for
// connections to addr; an unreadable /proc counts as yes (nothing to warn about then).
func (m *Member) apiServerListening(addr netip.Addr) bool {
	n, err := listenersFor(netip.AddrPortFrom(addr, uint16(m.cfg.TunnelPort)))
	return err != nil || n > 0
}

// watchAPIServerListener (device tun) logs when the API server starts or stops taking the
// tunnel's connections: the kernel hands them to whatever listens on tunnelPort on all
// addresses, and an API server bound to one address refuses every one of them.
func (m *Member) watchAPIServerListener(ctx context.Context) {
	var last *bool
	for {
		m.mu.Lock()
		addr := m.cur.tun.Addr
		m.mu.Unlock()
		ok := m.apiServerListening(addr)
		if last == nil || *last != ok {
			if ok {
				m.log.Info("the API server takes the tunnel's connections", "port", m.cfg.TunnelPort)
			} else {
				m.log.Info("nothing listens on all addresses on tunnelPort: the gateways' connections are refused until the API server does (expected before kubeadm init; else check its --bind-address)",
					"port", m.cfg.TunnelPort, "tunnelAddress", addr.String())
			}
			last = &ok
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(5 * time.Second):
		}
	}
}

// serve forwards every tunnel connection to the local API server (netstack).
func (m *Member) serve(g *generation) {
	for {
		c, err := g.ln.Accept()
		if err != nil {
			return
		}
		remote, _ := netip.ParseAddrPort(c.RemoteAddr().String())
		g.mu.Lock()
		g.open++
		g.accepted[remote.Addr()]++
		g.lastActive = time.Now()
		g.mu.Unlock()
		g.wg.Add(1)
		go func() {
			defer g.wg.Done()
			defer func() { g.mu.Lock(); g.open--; g.lastActive = time.Now(); g.mu.Unlock() }()
			up, err := net.DialTimeout("tcp", m.cfg.Upstream, 2*time.Second)
			if err != nil {
				m.log.V(1).Info("upstream dial failed", "upstream", m.cfg.Upstream, "error", err.Error())
				_ = c.Close()
				return
			}
			splice(&proxied{client: c, upstream: up})
		}()
	}
}

// openConnections is how many tunnel connections this generation carries now.
func (g *generation) openConnections() int {
	if g.countOpen != nil {
		return g.countOpen()
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.open
}

// checkedByAll reports whether every gateway's tunnel address has connected n times.
func (g *generation) checkedByAll(views []*gatewayView, n int) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, v := range views {
		if g.accepted[v.address] < n {
			return false
		}
	}
	return true
}

// drainQuiet: a drain ends only once no connection has arrived or ended for this long (and
// none is open). A gateway may have dialled this key just before its deregistration: that
// connection can still sit in the listener's backlog, not yet counted, when the count first
// reads zero. And a connection counts as ended when its last bytes are queued in netstack, not
// delivered. Closing the tunnel at that moment would leave the gateway's side hanging until
// its drain timeout: a failed request. The gateways' default dialTimeout is 1s.
const drainQuiet = time.Second

// drain waits until no tunnel connection is open and none arrived or ended for drainQuiet
// since the drain began, or deadline passes, or ctx ends.
func (g *generation) drain(ctx context.Context, deadline time.Time) {
	began := time.Now()
	for time.Now().Before(deadline) && ctx.Err() == nil {
		g.mu.Lock()
		last := g.lastActive
		g.mu.Unlock()
		if time.Since(began) >= drainQuiet && time.Since(last) >= drainQuiet && g.openConnections() == 0 {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (g *generation) close() {
	if g.ln != nil {
		_ = g.ln.Close()
	}
	g.tun.Close()
}
