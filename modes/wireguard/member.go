package wireguard

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"

	wgapi "github.com/caplb/caplb/api/wireguard/v1alpha1"

	"github.com/go-logr/logr"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"
)

// Member is the node side: a userspace WireGuard device that dials out to every gateway (so it
// works behind NAT), and forwards connections arriving through the tunnel to the local API
// server. It needs no kubeconfig, so it can run before `kubeadm init`.
type Member struct {
	cfg    *wgapi.MemberConfig
	log    logr.Logger
	prefix netip.Prefix
	token  []byte
	http   *http.Client

	mu       sync.Mutex
	host     *hostTUN // device tun: the interface every generation's address sits on
	cur      *generation
	retiring []*generation
	gwState  map[string]*gatewayView // by endpoint
	rotating bool
	// regMu orders periodic registrations against a rotation's swap: a registration of the old
	// key that lands after its deregistration would put it back into rotation.
	regMu sync.Mutex
}

type gatewayView struct {
	cfg        wgapi.MemberGateway
	publicKey  Key
	address    netip.Addr
	registered time.Time
	lastErr    string
}

// NewMember validates the files a member needs: its key (created on first start) and the token.
func NewMember(cfg *wgapi.MemberConfig, log logr.Logger) (*Member, error) {
	prefix, err := wgapi.ParseTunnelPrefix(cfg.TunnelPrefix)
	if err != nil {
		return nil, fmt.Errorf("tunnelPrefix: %w", err)
	}
	m := &Member{cfg: cfg, log: log, prefix: prefix, gwState: map[string]*gatewayView{},
		http: &http.Client{Timeout: 5 * time.Second}}
	if cfg.TokenFile != "" {
		if m.token, err = LoadToken(cfg.TokenFile); err != nil {
			return nil, fmt.Errorf("tokenFile: %w", err)
		}
	}
	for _, g := range cfg.Gateways {
		v := &gatewayView{cfg: g}
		if g.PublicKey != "" {
			v.publicKey, _ = wgapi.ParseKey(g.PublicKey)
			v.address = TunnelAddress(prefix, v.publicKey)
		}
		m.gwState[g.Endpoint] = v
	}
	return m, nil
}

// Run brings the tunnel up, registers with every gateway (retrying until each answers) and
// serves until ctx ends; then it deregisters (the gateways stop sending new connections) and
// keeps the tunnel up until its connections are done or drainTimeout passes, or force ends.
func (m *Member) Run(ctx, force context.Context) error {
	priv, err := LoadOrCreateKey(m.cfg.PrivateKeyFile)
	if err != nil {
		return fmt.Errorf("privateKeyFile: %w", err)
	}
	if m.cfg.Device == wgapi.DeviceTUN {
		host, err := openHostTUN(m.cfg.DeviceName, m.prefix, m.cfg.MTU, m.log.WithName("tun"))
		if err != nil {
			return fmt.Errorf("device tun: %w", err)
		}
		defer host.Close()
		m.mu.Lock()
		m.host = host
		m.mu.Unlock()
	}
	gen, err := m.openGeneration(priv)
	if err != nil {
		return err
	}
	m.mu.Lock()
	m.cur = gen
	m.mu.Unlock()
	m.log.Info("member up", "node", m.cfg.NodeName, "publicKey", gen.pub.String(), "tunnelAddress", gen.tun.Addr.String(),
		"gateways", len(m.cfg.Gateways), "device", m.cfg.Device)
	var admin *http.Server
	if m.cfg.Admin.Listen != "0" {
		if admin, err = serveHTTP(m.cfg.Admin.Listen, m.adminHandler(ctx)); err != nil {
			gen.close()
			return fmt.Errorf("admin.listen: %w", err)
		}
	}
	var wg sync.WaitGroup
	for _, g := range m.cfg.Gateways {
		wg.Add(1)
		go func() { defer wg.Done(); m.registerLoop(ctx, g.Endpoint) }()
	}
	if m.cfg.Device == wgapi.DeviceTUN {
		wg.Add(1)
		go func() { defer wg.Done(); m.watchAPIServerListener(ctx) }()
	}
	<-ctx.Done()
	wg.Wait()

	m.mu.Lock()
	gens := append([]*generation{m.cur}, m.retiring...)
	m.mu.Unlock()
	m.log.Info("shutting down: deregistering, then draining", "drainTimeout", m.cfg.DrainTimeout.Duration)
	dctx, cancel := context.WithTimeout(force, 5*time.Second)
	m.deregisterAll(dctx, gens[0].pub)
	cancel()
	deadline := time.Now().Add(m.cfg.DrainTimeout.Duration)
	for _, g := range gens {
		g.drain(force, deadline)
		g.close()
	}
	if admin != nil {
		_ = admin.Close()
	}
	return nil
}

// setGatewayPeer adds one gateway as a peer of g (endpoint resolved to an IP: WireGuard wants one).
func (m *Member) setGatewayPeer(g *generation, v *gatewayView) error {
	host, port, err := net.SplitHostPort(v.cfg.Endpoint)
	if err != nil {
		return err
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		ips, lerr := net.DefaultResolver.LookupNetIP(context.Background(), "ip", host)
		if lerr != nil || len(ips) == 0 {
			return fmt.Errorf("resolve gateway %s: %w", host, lerr)
		}
		ip = ips[0].Unmap()
	}
	return g.tun.SetPeer(PeerSpec{PublicKey: v.publicKey, Endpoint: net.JoinHostPort(ip.String(), port),
		AllowedIP: v.address, Keepalive: m.cfg.PersistentKeepalive.Duration})
}

// registerLoop registers the current key with one gateway: retrying every second until it
// answers (it may start after the member), then every registerInterval.
func (m *Member) registerLoop(ctx context.Context, endpoint string) {
	for {
		wait := m.cfg.RegisterInterval.Duration
		if err := m.registerOnce(ctx, endpoint); err != nil {
			if ctx.Err() != nil {
				return
			}
			m.log.Info("registration failed; retrying", "gateway", endpoint, "error", err.Error())
			wait = time.Second
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

func (m *Member) registerOnce(ctx context.Context, endpoint string) error {
	m.regMu.Lock()
	defer m.regMu.Unlock()
	m.mu.Lock()
	v, g := m.gwState[endpoint], m.cur
	m.mu.Unlock()
	return m.registerGen(ctx, v, g)
}

// registerGen registers g's key with the gateway v and makes the gateway a peer of g.
func (m *Member) registerGen(ctx context.Context, v *gatewayView, g *generation) error {
	if v.cfg.Registration == "0" {
		return nil // pinned: the gateway lists this member among its peers
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := Register(rctx, m.http, v.cfg.Registration, m.token, m.cfg.NodeName, g.pub, m.prefix, v.cfg.PublicKey)
	m.mu.Lock()
	if err != nil {
		v.lastErr = err.Error()
		m.mu.Unlock()
		return err
	}
	gk, _ := wgapi.ParseKey(resp.GatewayPublicKey)
	first := v.publicKey != gk
	if first && v.address.IsValid() {
		m.log.Info("gateway key changed", "gateway", v.cfg.Endpoint, "old", v.publicKey.String(), "new", gk.String())
	}
	old := v.publicKey
	v.publicKey, v.address, v.registered, v.lastErr = gk, netip.MustParseAddr(resp.GatewayAddress), time.Now(), ""
	m.mu.Unlock()
	// Make before break when a gateway's key changed: the new peer first, then the old one goes.
	if err := m.setGatewayPeer(g, v); err != nil {
		return err
	}
	if first {
		m.log.Info("registered", "gateway", resp.GatewayName, "endpoint", v.cfg.Endpoint, "gatewayKey", gk.String(),
			"tunnelAddress", resp.MemberAddress)
		if old != (Key{}) {
			_ = g.tun.RemovePeer(old)
		}
	}
	return nil
}

// Rotate replaces the member's key make-before-break: a second tunnel with a new key and address
// is registered with every gateway and must have answered each gateway's health checks before
// the old key is deregistered (the gateways drain it) and its tunnel closed.
func (m *Member) Rotate(ctx context.Context) (old, cur Key, err error) {
	m.mu.Lock()
	if m.rotating {
		m.mu.Unlock()
		return Key{}, Key{}, errors.New("a rotation is already running")
	}
	m.rotating = true
	prev := m.cur
	views := make([]*gatewayView, 0, len(m.gwState))
	for _, v := range m.gwState {
		views = append(views, v)
	}
	m.mu.Unlock()
	defer func() { m.mu.Lock(); m.rotating = false; m.mu.Unlock() }()
	for _, v := range views {
		if v.cfg.Registration == "0" {
			return Key{}, Key{}, fmt.Errorf("gateway %s is pinned without registration: rotate by changing its peers list", v.cfg.Endpoint)
		}
	}
	priv, err := wgtypes.GeneratePrivateKey()
	if err != nil {
		return Key{}, Key{}, err
	}
	next, err := m.openGeneration(priv)
	if err != nil {
		return Key{}, Key{}, err
	}
	fail := func(err error) (Key, Key, error) {
		dctx, c := context.WithTimeout(context.Background(), 5*time.Second)
		m.deregisterAll(dctx, next.pub)
		c()
		next.close()
		return Key{}, Key{}, fmt.Errorf("rotation aborted, old key kept: %w", err)
	}
	for _, v := range views {
		if err := m.registerGen(ctx, v, next); err != nil {
			return fail(err)
		}
	}
	// Each gateway's health checks reaching the new tunnel twice (rise) means it is in rotation.
	deadline := time.Now().Add(30 * time.Second)
	for !next.checkedByAll(views, 2) {
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fail(errors.New("the gateways' health checks did not reach the new key within 30s"))
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := WriteKey(m.cfg.PrivateKeyFile, priv); err != nil {
		return fail(err)
	}
	m.regMu.Lock()
	m.mu.Lock()
	m.cur = next
	m.retiring = append(m.retiring, prev)
	m.mu.Unlock()
	m.log.Info("key rotated: draining the old key", "old", prev.pub.String(), "new", next.pub.String(), "tunnelAddress", next.tun.Addr.String())
	dctx, c := context.WithTimeout(context.Background(), 5*time.Second)
	m.deregisterAll(dctx, prev.pub)
	c()
	m.regMu.Unlock()
	go func() {
		prev.drain(context.Background(), time.Now().Add(m.cfg.DrainTimeout.Duration))
		prev.close()
		m.mu.Lock()
		for i, g := range m.retiring {
			if g == prev {
				m.retiring = append(m.retiring[:i], m.retiring[i+1:]...)
				break
			}
		}
		m.mu.Unlock()
		m.log.Info("old key's tunnel closed", "publicKey", prev.pub.String())
	}()
	return prev.pub, next.pub, nil
}

func (m *Member) deregisterAll(ctx context.Context, pub Key) {
	for _, g := range m.cfg.Gateways {
		if g.Registration == "0" {
			continue
		}
		if err := Deregister(ctx, m.http, g.Registration, m.token, m.cfg.NodeName, pub); err != nil {
			m.log.Info("deregistration failed (the gateway drops the key when it stops answering health checks)", "gateway", g.Endpoint, "error", err.Error())
		}
	}
}

// MemberState reports the member's keys and gateways.
type MemberState struct {
	Node          string `json:"node"`
	PublicKey     string `json:"publicKey"`
	TunnelAddress string `json:"tunnelAddress"`
	Open          int    `json:"openConnections"`
	// APIServerListening (device tun): whether a listener on tunnelPort takes connections to the
	// tunnel address (the API server on all addresses). Without one the gateways' dials are
	// refused: expected until kubeadm init starts the API server, a misconfiguration after.
	APIServerListening *bool         `json:"apiServerListening,omitempty"`
	Retiring           []string      `json:"retiringKeys,omitempty"`
	Gateways           []GatewayView `json:"gateways"`
}

// GatewayView is one gateway as the member sees it.
type GatewayView struct {
	Endpoint      string    `json:"endpoint"`
	PublicKey     string    `json:"publicKey,omitempty"`
	Registered    time.Time `json:"registered,omitzero"`
	LastHandshake time.Time `json:"lastHandshake,omitzero"`
	LastError     string    `json:"lastError,omitempty"`
}

// wgapi.Status is the member's current state.
func (m *Member) Status() MemberState {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := MemberState{Node: m.cfg.NodeName}
	if m.cur == nil {
		return s
	}
	s.PublicKey, s.TunnelAddress = m.cur.pub.String(), m.cur.tun.Addr.String()
	s.Open = m.cur.openConnections()
	if m.cfg.Device == wgapi.DeviceTUN {
		ok := m.apiServerListening(m.cur.tun.Addr)
		s.APIServerListening = &ok
	}
	for _, g := range m.retiring {
		s.Retiring = append(s.Retiring, g.pub.String())
	}
	peers, _ := m.cur.tun.Peers()
	for _, g := range m.cfg.Gateways {
		v := m.gwState[g.Endpoint]
		gv := GatewayView{Endpoint: g.Endpoint, Registered: v.registered, LastError: v.lastErr}
		if v.address.IsValid() {
			gv.PublicKey = v.publicKey.String()
			gv.LastHandshake = peers[v.publicKey].LastHandshake
		}
		s.Gateways = append(s.Gateways, gv)
	}
	return s
}

// adminHandler: GET /status, GET /healthz, POST /rotate (loopback only, no authentication).
func (m *Member) adminHandler(ctx context.Context) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, http.StatusOK, m.Status()) })
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	mux.HandleFunc("POST /rotate", func(w http.ResponseWriter, _ *http.Request) {
		old, cur, err := m.Rotate(ctx)
		if err != nil {
			writeJSON(w, http.StatusConflict, map[string]string{"error": err.Error()})
			return
		}
		writeJSON(w, http.StatusOK, map[string]string{"old": old.String(), "new": cur.String()})
	})
	return mux
}
