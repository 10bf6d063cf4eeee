package wireguard

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strconv"
	"sync"
	"time"

	wgapi "github.com/caplb/caplb/api/wireguard/v1alpha1"
	"github.com/caplb/caplb/internal/buildinfo"

	"github.com/go-logr/logr"
)

// Gateway is the public end: a TCP pass-through proxy from Listen to healthy members over a
// userspace WireGuard tunnel. It never terminates TLS and holds no cluster key: clients verify the
// cluster CA end to end.
type Gateway struct {
	cfg    *wgapi.GatewayConfig
	log    logr.Logger
	prefix netip.Prefix
	pub    Key
	tun    *Tunnel
	host   *hostTUN // device tun only
	pool   *pool
	health *http.Transport // TLS config for member health checks; dials through the tunnel
	state  *stateStore

	build         buildinfo.Labels // caplb_build_info on /metrics
	metricsListen string           // the read-only metrics listener: cfg.Metrics.Listen unless an option set it

	mu    sync.Mutex // serialises peer changes and state saves
	ctx   context.Context
	ready chan struct{}
}

// GatewayOption tunes NewGateway.
type GatewayOption func(*Gateway)

// WithGatewayBuildInfo exports caplb_build_info with l on the admin /metrics.
func WithGatewayBuildInfo(l buildinfo.Labels) GatewayOption { return func(g *Gateway) { g.build = l } }

// WithMetricsListen serves the read-only metrics listener on addr, whatever the configuration
// says: a gateway run --from-secret gets a configuration the management cluster rendered, which
// cannot know which of the host's addresses Prometheus may reach.
func WithMetricsListen(addr string) GatewayOption {
	return func(g *Gateway) { g.metricsListen = addr }
}

// NewGateway loads (or creates) the gateway key, brings the tunnel up and restores the members
// from the static peers and the state file. Call Run to serve.
func NewGateway(cfg *wgapi.GatewayConfig, log logr.Logger, opts ...GatewayOption) (*Gateway, error) {
	prefix, err := wgapi.ParseTunnelPrefix(cfg.WireGuard.TunnelPrefix)
	if err != nil {
		return nil, fmt.Errorf("wireguard.tunnelPrefix: %w", err)
	}
	priv, err := LoadOrCreateKey(cfg.WireGuard.PrivateKeyFile)
	if err != nil {
		return nil, fmt.Errorf("wireguard.privateKeyFile: %w", err)
	}
	tlsCfg := &tls.Config{ServerName: cfg.Health.ServerName, MinVersion: tls.VersionTLS12}
	if cfg.Health.CAFile != "" {
		pem, err := os.ReadFile(cfg.Health.CAFile)
		if err != nil {
			return nil, fmt.Errorf("health.caFile: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("health.caFile %s: no PEM certificate in it", cfg.Health.CAFile)
		}
		tlsCfg.RootCAs = pool
	} else {
		tlsCfg.InsecureSkipVerify = true // said explicitly in the config (health.insecureSkipVerify)
	}
	pub := priv.PublicKey()
	addr := TunnelAddress(prefix, pub)
	tun, host, err := openGatewayTunnel(cfg, prefix, priv, addr, log.WithName("wireguard"))
	if err != nil {
		return nil, fmt.Errorf("wireguard.device %s: %w", cfg.WireGuard.Device, err)
	}
	g := &Gateway{cfg: cfg, log: log, prefix: prefix, pub: pub, tun: tun, host: host,
		pool: newPool(cfg.Health.Rise, cfg.Health.Fall), state: &stateStore{path: cfg.StateFile},
		ready: make(chan struct{}), metricsListen: cfg.Metrics.Listen}
	for _, o := range opts {
		o(g)
	}
	g.health = &http.Transport{
		DialContext: func(ctx context.Context, _, address string) (net.Conn, error) {
			ap, err := netip.ParseAddrPort(address)
			if err != nil {
				return nil, err
			}
			return tun.DialTCP(ctx, ap)
		},
		TLSClientConfig:   tlsCfg,
		DisableKeepAlives: true, // every check dials afresh: a check that reuses a connection proves less
	}
	return g, nil
}

// openGatewayTunnel brings the gateway's WireGuard device up on netstack, or on a TUN
// interface whose filter lets in only the members' side of connections the gateway opened.
func openGatewayTunnel(cfg *wgapi.GatewayConfig, prefix netip.Prefix, priv Key, addr netip.Addr, log logr.Logger) (*Tunnel, *hostTUN, error) {
	w := cfg.WireGuard
	if w.Device != wgapi.DeviceTUN {
		tun, err := OpenTunnel(priv, addr, w.ListenPort, w.MTU, log)
		return tun, nil, err
	}
	host, err := openHostTUN(w.DeviceName, prefix, w.MTU, log)
	if err != nil {
		return nil, nil, err
	}
	memberPort := uint16(cfg.MemberPort)
	end, err := host.attach(addr, func(b []byte) bool { return gatewayAdmits(parsePacket(b), addr, memberPort) })
	if err != nil {
		host.Close()
		return nil, nil, err
	}
	tun, err := openTUNTunnel(end, priv, addr, w.ListenPort, log)
	if err != nil {
		host.Close()
		return nil, nil, err
	}
	return tun, host, nil
}

func (g *Gateway) closeTunnel() {
	g.tun.Close()
	if g.host != nil {
		g.host.Close()
	}
}

// PublicKey is the gateway's public key.
func (g *Gateway) PublicKey() Key { return g.pub }

// Address is the gateway's tunnel address.
func (g *Gateway) Address() netip.Addr { return g.tun.Addr }

// Ready is closed once Run has bound every listener.
func (g *Gateway) Ready() <-chan struct{} { return g.ready }

// Run serves until ctx ends: the proxy, registration, admin, health checks and drains. Then it
// stops accepting and lets open connections finish until drainTimeout or until force ends.
func (g *Gateway) Run(ctx, force context.Context) error {
	defer g.closeTunnel()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	g.mu.Lock()
	g.ctx = ctx
	g.mu.Unlock()

	st, err := g.state.load()
	if err != nil {
		// A damaged state file must not keep the endpoint down: static peers and re-registering
		// members rebuild it.
		g.log.Error(err, "state file unreadable; starting from static peers, members re-register", "stateFile", g.cfg.StateFile)
	}
	for _, n := range st.QuiescedNodes {
		g.pool.quiescedNodes[n] = true
	}
	for _, p := range g.cfg.Peers {
		k, _ := wgapi.ParseKey(p.PublicKey)
		if err := g.addMember(p.Name, k, "", true); err != nil {
			return err
		}
	}
	for _, m := range st.Members {
		k, err := wgapi.ParseKey(m.PublicKey)
		if err != nil {
			continue
		}
		if err := g.addMember(m.Node, k, m.Endpoint, false); err != nil && !errors.Is(err, ErrConflict) {
			return err
		}
	}

	ln, err := net.Listen("tcp", g.cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen %s: %w", g.cfg.Listen, err)
	}
	var servers []*http.Server
	if g.cfg.Registration.Listen != "0" {
		token, err := LoadToken(g.cfg.Registration.TokenFile)
		if err != nil {
			ln.Close()
			return fmt.Errorf("registration.tokenFile: %w", err)
		}
		srv, err := serveHTTP(g.cfg.Registration.Listen, RegistrationHandler(token, g, time.Now))
		if err != nil {
			ln.Close()
			return fmt.Errorf("registration.listen: %w", err)
		}
		servers = append(servers, srv)
	}
	if g.cfg.Admin.Listen != "0" {
		h, err := g.adminHandler()
		if err != nil {
			ln.Close()
			return err
		}
		srv, err := serveHTTP(g.cfg.Admin.Listen, h)
		if err != nil {
			ln.Close()
			return fmt.Errorf("admin.listen: %w", err)
		}
		servers = append(servers, srv)
	}
	if g.metricsListen != "" {
		h, err := g.metricsOnlyHandler()
		if err != nil {
			ln.Close()
			return err
		}
		srv, err := serveHTTP(g.metricsListen, h)
		if err != nil {
			ln.Close()
			return fmt.Errorf("metrics listener %s: %w", g.metricsListen, err)
		}
		servers = append(servers, srv)
	}
	g.log.Info("gateway up", "name", g.cfg.Name, "listen", ln.Addr().String(), "publicKey", g.pub.String(),
		"tunnelAddress", g.tun.Addr.String(), "wireguardPort", g.cfg.WireGuard.ListenPort, "members", len(g.pool.status()))

	close(g.ready)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); g.maintain(ctx) }()
	go func() { defer wg.Done(); g.serveProxy(ctx, ln) }()
	<-ctx.Done()
	// Graceful: no new connections (clients go to the other gateways); open ones may finish
	// until drainTimeout or force, then they are closed.
	ln.Close()
	for _, s := range servers {
		sctx, c := context.WithTimeout(context.Background(), time.Second)
		_ = s.Shutdown(sctx)
		c()
	}
	deadline := time.Now().Add(g.cfg.DrainTimeout.Duration)
	for g.openConnections() > 0 && time.Now().Before(deadline) && force.Err() == nil {
		time.Sleep(50 * time.Millisecond)
	}
	g.closeAll()
	wg.Wait()
	g.saveState()
	return nil
}

func (g *Gateway) openConnections() int {
	g.pool.mu.Lock()
	defer g.pool.mu.Unlock()
	n := 0
	for _, b := range g.pool.backends {
		n += len(b.conns)
	}
	return n
}

// addMember adds one WireGuard peer and its pool entry (health checks start at once).
func (g *Gateway) addMember(node string, pub Key, endpoint string, static bool) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	addr := TunnelAddress(g.prefix, pub)
	g.pool.mu.Lock()
	if b, ok := g.pool.backends[pub]; ok {
		b.node = node
		b.draining = false
		b.lastSeen = time.Now()
		g.pool.mu.Unlock()
		return nil
	}
	for _, b := range g.pool.backends {
		if b.addr == addr {
			g.pool.mu.Unlock()
			return fmt.Errorf("%w: %s holds %s", ErrConflict, b.pub, addr)
		}
	}
	g.pool.mu.Unlock()
	if addr == g.tun.Addr {
		return fmt.Errorf("%w: the gateway's own", ErrConflict)
	}
	if err := g.tun.SetPeer(PeerSpec{PublicKey: pub, Endpoint: endpoint, AllowedIP: addr}); err != nil {
		return err
	}
	b := &backend{node: node, pub: pub, addr: addr, static: static, conns: map[*proxied]struct{}{}, lastSeen: time.Now()}
	hctx, stop := context.WithCancel(g.ctx)
	b.stopHealth = stop
	g.pool.mu.Lock()
	g.pool.backends[pub] = b
	g.pool.mu.Unlock()
	go g.healthLoop(hctx, b)
	g.log.Info("member added", "node", node, "publicKey", pub.String(), "tunnelAddress", addr.String(), "static", static)
	return nil
}

// Register implements Registrar.
func (g *Gateway) Register(node string, pub Key) (RegisterResponse, error) {
	if err := g.addMember(node, pub, "", false); err != nil {
		return RegisterResponse{}, err
	}
	g.saveState()
	return RegisterResponse{GatewayName: g.cfg.Name, GatewayPublicKey: g.pub.String(), GatewayAddress: g.tun.Addr.String(),
		MemberAddress: TunnelAddress(g.prefix, pub).String(), TunnelPrefix: g.prefix.String(), MemberPort: g.cfg.MemberPort}, nil
}

// Deregister implements Registrar: the key gets no new connection; its open ones close at the
// drain timeout; the peer goes once it has none.
func (g *Gateway) Deregister(node string, pub Key) error {
	g.pool.mu.Lock()
	b, ok := g.pool.backends[pub]
	if ok && !b.draining {
		b.draining = true
		b.drainDeadline = time.Now().Add(g.cfg.DrainTimeout.Duration)
	}
	g.pool.mu.Unlock()
	if !ok {
		return fmt.Errorf("no member with key %s", pub)
	}
	g.log.Info("member draining (deregistered)", "node", node, "publicKey", pub.String(), "drainTimeout", g.cfg.DrainTimeout.Duration)
	g.saveState()
	return nil
}

// Quiesce takes a node out of rotation (or puts it back): no new connections; open ones close at
// the drain timeout.
func (g *Gateway) Quiesce(node string, on bool) bool {
	found := g.pool.quiesce(node, on, g.cfg.DrainTimeout.Duration, time.Now())
	g.log.Info("quiesce", "node", node, "quiesced", on, "known", found)
	g.saveState()
	return found
}

// wgapi.Status reports every member with its connection count and health.
func (g *Gateway) Status() wgapi.Status {
	ms := g.pool.status()
	peers, _ := g.tun.Peers()
	for i := range ms {
		if k, err := wgapi.ParseKey(ms[i].PublicKey); err == nil {
			ms[i].Endpoint = peers[k].Endpoint
			ms[i].Handshake = peers[k].LastHandshake
		}
	}
	return wgapi.Status{Name: g.cfg.Name, PublicKey: g.pub.String(), TunnelAddress: g.tun.Addr.String(), Members: ms}
}

// healthLoop fetches the member's /readyz through the tunnel every interval.
func (g *Gateway) healthLoop(ctx context.Context, b *backend) {
	h := g.cfg.Health
	url := "https://" + net.JoinHostPort(b.addr.String(), strconv.Itoa(g.cfg.MemberPort)) + h.Path
	client := &http.Client{Transport: g.health, Timeout: h.Timeout.Duration}
	t := time.NewTicker(h.Interval.Duration)
	defer t.Stop()
	for {
		err := g.checkOnce(ctx, client, url)
		if ctx.Err() != nil {
			return
		}
		if changed, healthy := g.pool.healthResult(b, err, time.Now()); changed {
			g.log.Info("member health", "node", b.node, "publicKey", b.pub.String(), "healthy", healthy, "error", errString(err))
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (g *Gateway) checkOnce(ctx context.Context, client *http.Client, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	return nil
}

// maintain closes drained connections, removes drained peers (one at a time) and saves the
// members' endpoints so that a restart reaches members behind NAT before they re-register.
func (g *Gateway) maintain(ctx context.Context) {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	var saved map[Key]string
	lastForget := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			if now.Sub(lastForget) >= 5*time.Second {
				lastForget = now
				hs := map[Key]time.Time{}
				if peers, err := g.tun.Peers(); err == nil {
					for k, p := range peers {
						hs[k] = p.LastHandshake
					}
				}
				for _, b := range g.pool.forget(hs, now.Add(-g.cfg.ForgetAfter.Duration), now) {
					g.log.Info("forgetting a member silent for forgetAfter", "node", b.node, "publicKey", b.pub.String(), "forgetAfter", g.cfg.ForgetAfter.Duration)
				}
			}
			conns, remove := g.pool.expired(now)
			for _, c := range conns {
				c.close()
			}
			for _, b := range remove {
				b.stopHealth()
				g.mu.Lock()
				err := g.tun.RemovePeer(b.pub)
				g.mu.Unlock()
				g.log.Info("member removed after drain", "node", b.node, "publicKey", b.pub.String(), "closedConnections", len(conns), "error", errString(err))
			}
			// Save when a member's endpoint changed (first packet, NAT rebinding): a gateway
			// restarted from the state file then reaches members behind NAT at once.
			if eps := g.endpoints(); len(remove) > 0 || !maps.Equal(eps, saved) {
				g.saveState()
				saved = eps
			}
		}
	}
}

// endpoints is each peer's current endpoint.
func (g *Gateway) endpoints() map[Key]string {
	peers, _ := g.tun.Peers()
	out := make(map[Key]string, len(peers))
	for k, p := range peers {
		out[k] = p.Endpoint
	}
	return out
}

func (g *Gateway) closeAll() {
	g.pool.mu.Lock()
	var all []*proxied
	for _, b := range g.pool.backends {
		for c := range b.conns {
			all = append(all, c)
		}
	}
	g.pool.mu.Unlock()
	for _, c := range all {
		c.close()
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// serveHTTP binds addr at once (a port conflict fails the start) and serves h.
func serveHTTP(addr string, h http.Handler) (*http.Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	return srv, nil
}
