// Package bgp is the BGP data plane of the agent: an embedded gobgp speaker that announces each
// VIP as a /32 (/128) with this node as next hop while the agent wants it announced, and puts
// the VIPs on a local dummy interface so the node accepts the traffic the routers send it.
// Every eligible member announces; the routers spread connections over them by ECMP.
package bgp

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"time"

	agentv1 "github.com/caplb/caplb/api/agent/v1alpha1"

	"github.com/go-logr/logr"
	api "github.com/osrg/gobgp/v3/api"
	"github.com/osrg/gobgp/v3/pkg/server"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/caplb/caplb/modes/bfd"
	"github.com/caplb/caplb/modes/dataplane"
	"github.com/caplb/caplb/modes/flows"
)

// addresses holds the VIPs locally so the node accepts their traffic.
type addresses interface {
	// Set makes the node hold exactly vips.
	Set(vips []netip.Addr) error
	// Close removes every VIP (and whatever was created to hold them).
	Close() error
}

// Speaker announces VIPs over BGP. It implements dataplane.Dataplane.
type Speaker struct {
	log      logr.Logger
	metrics  *metrics
	srv      *server.BgpServer
	addrs    addresses
	tracker  *peerTracker
	routerID netip.Addr
	asn      uint32
	linger   time.Duration
	families map[bool]bool // is4 -> some peer of that family exists
	attrs    pathAttrs
	now      func() time.Time

	stopWatch context.CancelFunc
	// bfd runs the BFD sessions (bfd.go); nil without any.
	bfd     *bfd.Runner
	stopBFD context.CancelFunc

	mu        sync.Mutex
	closed    bool
	announced map[netip.Addr]bool
	// lingering are withdrawn VIPs still held on the interface until the given time.
	lingering   map[netip.Addr]time.Time
	lingerTimer *time.Timer

	// flowKernel lists connections and forwards other members' (flows.go).
	flowKernel flowKernel
	// keepWhileFlows (flow sharing on): a withdrawn VIP stays while connections to it are open.
	keepWhileFlows bool
	fwd            flowTable
	forwarded      uint64
	held           uint64
	holdFull       uint64
	copiesLimited  uint64
	// countedAt is when the kernel's counters were last read (countForwardedLocked).
	countedAt time.Time
	// flowsCut: connections left out of the last list (logged when it changes).
	flowsCut int
	// servedPorts are the ports the VIPs serve: only their segments are held (flows.ForwarderConfig).
	servedPorts   []uint16
	offLinkLogged map[netip.Addr]bool
	// flowVIPErr is the last failure to set up the forwarding, logged once.
	flowVIPErr string
	// busy counts the connections that still carry requests (modes/flows/busy.go).
	busy flows.BusyTracker
	// withdrawnAt is when each lingering VIP was withdrawn; flowLingerCap bounds how long it
	// stays for its connections after that (0: while they are open).
	withdrawnAt   map[netip.Addr]time.Time
	flowLingerCap time.Duration
	// capReset: the connections to a withdrawn VIP were reset at its cap.
	capReset map[netip.Addr]bool
}

var _ dataplane.Dataplane = &Speaker{}

// New starts the speaker: it validates cfg, reads the password files, starts gobgp and begins
// dialling the peers. Nothing is announced until Sync says so. reg may be nil.
func New(cfg agentv1.BGPConfig, log logr.Logger, reg prometheus.Registerer, opts ...Option) (*Speaker, error) {
	name := cfg.Interface
	if name == "" {
		name = agentv1.DefaultInterface
	}
	return newSpeaker(cfg, log, reg, &dummyAddresses{name: name, log: log.Info}, time.Now, opts...)
}

// Option tunes a Speaker.
type Option func(*Speaker)

// WithFlowLingerCap bounds how long, with flow sharing, a withdrawn VIP stays on the node for
// the connections still open to it: the agent passes quiesce.drain + quiesce.busyDrain + 1 s, so
// that an unhealthy or quiescing member's clients are moved (GOAWAY) or reset as behind ARP.
func WithFlowLingerCap(d time.Duration) Option { return func(s *Speaker) { s.flowLingerCap = d } }

// WithServedPorts names the ports the VIPs serve (port and extraPorts): with flow sharing, only
// segments to them of a connection nobody knows are held and copied to the other members.
func WithServedPorts(ports []uint16) Option {
	return func(s *Speaker) { s.servedPorts = append([]uint16(nil), ports...) }
}

func newSpeaker(cfg agentv1.BGPConfig, log logr.Logger, reg prometheus.Registerer, addrs addresses, now func() time.Time, opts ...Option) (*Speaker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	passwords := make([]string, len(cfg.Peers))
	var secrets []string
	for i, p := range cfg.Peers {
		if p.PasswordFile == "" {
			continue
		}
		pw, err := readPassword(fmt.Sprintf("bgp.peers[%d].passwordFile", i), p.PasswordFile)
		if err != nil {
			return nil, err
		}
		passwords[i] = pw
		secrets = append(secrets, pw)
	}
	routerID, err := chooseRouterID(cfg)
	if err != nil {
		return nil, err
	}
	attrs, err := newPathAttrs(cfg)
	if err != nil {
		return nil, err
	}
	m, err := newMetrics(reg)
	if err != nil {
		return nil, fmt.Errorf("registering bgp metrics: %w", err)
	}
	s := &Speaker{
		log:       log,
		metrics:   m,
		addrs:     addrs,
		routerID:  routerID,
		asn:       cfg.ASN,
		linger:    agentv1.DurationOr(cfg.AddressLinger, agentv1.DefaultAddressLinger),
		families:  map[bool]bool{},
		attrs:     attrs,
		now:       now,
		announced: map[netip.Addr]bool{},
		lingering: map[netip.Addr]time.Time{},

		flowKernel:     kernelFlows(),
		keepWhileFlows: cfg.FlowSharingOn(),
		offLinkLogged:  map[netip.Addr]bool{},
		withdrawnAt:    map[netip.Addr]time.Time{},
		capReset:       map[netip.Addr]bool{},
	}
	for _, o := range opts {
		o(s)
	}
	if cfg.AddressLinger != nil && cfg.AddressLinger.Duration == 0 {
		s.linger = 0
	}
	if err := s.flowKernel.removeStale(); err != nil {
		log.Error(err, "removing the flow-sharing tables an earlier run left")
	}
	s.tracker = newPeerTracker(log, m, cfg.Peers, now)
	s.srv = server.NewBgpServer(server.LoggerOption(&gobgpLogger{log: log, onEvent: s.tracker.event, secrets: secrets}))
	go s.srv.Serve()

	ctx := context.Background()
	if err := s.start(ctx, cfg, passwords); err != nil {
		s.srv.Stop()
		if s.stopWatch != nil {
			s.stopWatch()
		}
		if s.stopBFD != nil {
			s.stopBFD()
		}
		return nil, err
	}
	log.Info("BGP speaker started", "asn", cfg.ASN, "routerID", routerID, "peers", len(cfg.Peers), "listenPort", cfg.ListenPort)
	return s, nil
}

func (s *Speaker) start(ctx context.Context, cfg agentv1.BGPConfig, passwords []string) error {
	global := &api.Global{Asn: cfg.ASN, RouterId: s.routerID.String(), ListenPort: -1}
	for _, p := range cfg.Peers {
		s.families[netip.MustParseAddr(p.Address).Unmap().Is4()] = true
	}
	if cfg.ListenPort != 0 {
		global.ListenPort = int32(cfg.ListenPort)
		// Listen only on the families in use: binding "::" fails on a node with IPv6 disabled.
		if s.families[true] {
			global.ListenAddresses = append(global.ListenAddresses, "0.0.0.0")
		}
		if s.families[false] {
			global.ListenAddresses = append(global.ListenAddresses, "::")
		}
	}
	if err := s.srv.StartBgp(ctx, &api.StartBgpRequest{Global: global}); err != nil {
		return fmt.Errorf("starting BGP (bgp.listenPort %d): %w", cfg.ListenPort, err)
	}
	// Before the watch: its callback enables a peer's BFD session.
	if err := s.startBFD(cfg); err != nil {
		return err
	}
	wctx, cancel := context.WithCancel(context.Background())
	s.stopWatch = cancel
	err := s.srv.WatchEvent(wctx, &api.WatchEventRequest{Peer: &api.WatchEventRequest_Peer{}}, func(r *api.WatchEventResponse) {
		pe := r.GetPeer()
		if pe == nil || pe.Type != api.WatchEventResponse_PeerEvent_STATE || pe.Peer == nil || pe.Peer.State == nil || pe.Peer.Conf == nil {
			return
		}
		addr := canonicalAddr(pe.Peer.Conf.NeighborAddress)
		s.tracker.state(addr, pe.Peer.State.SessionState)
		if pe.Peer.State.SessionState == api.PeerState_ESTABLISHED {
			s.bgpEstablished(addr)
		}
	})
	if err != nil {
		return fmt.Errorf("watching BGP peer state: %w", err)
	}
	for i, p := range cfg.Peers {
		if err := s.srv.AddPeer(ctx, &api.AddPeerRequest{Peer: apiPeer(p, cfg.ASN, passwords[i])}); err != nil {
			return fmt.Errorf("bgp.peers[%d]: adding peer %s: %w", i, p.Address, err)
		}
	}
	return nil
}

// apiPeer is the gobgp neighbour for p. The session carries the address family of the peer's
// address only: the next hop of a route is this node's address on the session, so an IPv6 VIP
// needs an IPv6 session.
func apiPeer(p agentv1.BGPPeer, localASN uint32, password string) *api.Peer {
	addr := netip.MustParseAddr(p.Address).Unmap()
	hold := agentv1.DurationOr(p.HoldTime, agentv1.DefaultHoldTime)
	keepalive := hold / 3
	if p.KeepaliveTime != nil && p.KeepaliveTime.Duration != 0 {
		keepalive = p.KeepaliveTime.Duration
	}
	family := &api.Family{Afi: api.Family_AFI_IP, Safi: api.Family_SAFI_UNICAST}
	if addr.Is6() {
		family.Afi = api.Family_AFI_IP6
	}
	peer := &api.Peer{
		Conf: &api.PeerConf{
			NeighborAddress: addr.String(),
			PeerAsn:         p.ASN,
			AuthPassword:    password,
			Description:     "caplb",
		},
		Timers: &api.Timers{Config: &api.TimersConfig{
			HoldTime:          uint64(hold / time.Second),
			KeepaliveInterval: uint64(keepalive / time.Second),
			ConnectRetry:      uint64(agentv1.DurationOr(p.ConnectRetry, agentv1.DefaultConnectRetry) / time.Second),
		}},
		Transport: &api.Transport{RemotePort: uint32(p.Port), LocalAddress: p.SourceAddress},
		AfiSafis:  []*api.AfiSafi{{Config: &api.AfiSafiConfig{Family: family, Enabled: true}}},
	}
	if p.EBGPMultihop != 0 {
		peer.EbgpMultihop = &api.EbgpMultihop{Enabled: true, MultihopTtl: uint32(p.EBGPMultihop)}
	}
	return peer
}

// chooseRouterID is bgp.routerID, else the node's source address towards its first IPv4 peer,
// else its first global IPv4 address.
func chooseRouterID(cfg agentv1.BGPConfig) (netip.Addr, error) {
	if cfg.RouterID != "" {
		return netip.MustParseAddr(cfg.RouterID), nil
	}
	for _, p := range cfg.Peers {
		if p.SourceAddress != "" {
			if a := netip.MustParseAddr(p.SourceAddress).Unmap(); a.Is4() {
				return a, nil
			}
		}
		peer := netip.MustParseAddr(p.Address).Unmap()
		if !peer.Is4() {
			continue
		}
		if a, err := sourceAddressTowards(peer); err == nil && a.Is4() {
			return a, nil
		}
	}
	skip := cfg.Interface
	if skip == "" {
		skip = agentv1.DefaultInterface
	}
	a, err := firstGlobalIPv4(skip)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("bgp.routerID: not set and cannot be derived (%w); set it to a unique IPv4 address, e.g. the node's address", err)
	}
	return a, nil
}

// Sync announces desired.VIPs while desired.Announce and withdraws them otherwise. The
// withdrawal goes out first and without delay: it is the UPDATE that takes traffic away from
// this node, and gobgp applies no advertisement interval to it.
func (s *Speaker) Sync(ctx context.Context, desired dataplane.Desired) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errors.New("bgp speaker is closed")
	}
	var errs []error
	want := map[netip.Addr]bool{}
	if desired.Announce {
		for _, v := range desired.VIPs {
			v = v.Unmap()
			if !s.families[v.Is4()] {
				errs = append(errs, fmt.Errorf("VIP %s: no bgp.peers entry of its address family; IPv4 VIPs are announced to IPv4 peers and IPv6 VIPs to IPv6 peers, add one", v))
				continue
			}
			want[v] = true
		}
	}
	now := s.now()
	for v := range s.announced {
		if want[v] {
			continue
		}
		if err := s.withdraw(ctx, v); err != nil {
			errs = append(errs, err)
			continue
		}
		s.lingering[v] = now.Add(s.linger)
		s.withdrawnAt[v] = now
		delete(s.capReset, v)
	}
	// The VIPs must be local before the routers hear of them: traffic follows at once.
	for v := range want {
		delete(s.lingering, v)
		delete(s.withdrawnAt, v)
	}
	if err := s.syncAddresses(now, want); err != nil {
		errs = append(errs, err)
		return errors.Join(errs...) // announcing a VIP the node cannot accept would blackhole it
	}
	for v := range want {
		if s.announced[v] {
			continue
		}
		if err := s.announce(ctx, v); err != nil {
			errs = append(errs, err)
		}
	}
	s.metrics.announced.Set(float64(len(s.announced)))
	return errors.Join(errs...)
}

func (s *Speaker) announce(ctx context.Context, v netip.Addr) error {
	p, err := s.attrs.path(v, false)
	if err != nil {
		return err
	}
	if _, err := s.srv.AddPath(ctx, &api.AddPathRequest{TableType: api.TableType_GLOBAL, Path: p}); err != nil {
		return fmt.Errorf("announcing %s: %w", prefixOf(v), err)
	}
	s.announced[v] = true
	s.metrics.announcements.Inc()
	s.log.Info("announcing VIP", "prefix", prefixOf(v))
	return nil
}

func (s *Speaker) withdraw(ctx context.Context, v netip.Addr) error {
	p, err := s.attrs.path(v, true)
	if err != nil {
		return err
	}
	if err := s.srv.DeletePath(ctx, &api.DeletePathRequest{TableType: api.TableType_GLOBAL, Path: p}); err != nil {
		return fmt.Errorf("withdrawing %s: %w", prefixOf(v), err)
	}
	delete(s.announced, v)
	s.metrics.withdrawals.Inc()
	s.log.Info("withdrew VIP", "prefix", prefixOf(v))
	return nil
}

// syncAddresses holds announced, extra and still-lingering VIPs on the interface, and arms a
// timer to drop the lingering ones when they expire. Called with s.mu held.
func (s *Speaker) syncAddresses(now time.Time, extra map[netip.Addr]bool) error {
	hold := map[netip.Addr]bool{}
	for v := range s.announced {
		hold[v] = true
	}
	for v := range extra {
		hold[v] = true
	}
	var next time.Time
	for v, until := range s.lingering {
		if !until.After(now) {
			if keep := s.keepForFlowsLocked(v, now); keep.After(now) {
				// Other members send this node's connections back here (flow sharing).
				until = keep
				s.lingering[v] = until
			}
		}
		if !until.After(now) {
			delete(s.lingering, v)
			delete(s.withdrawnAt, v)
			delete(s.capReset, v)
			continue
		}
		hold[v] = true
		if next.IsZero() || until.Before(next) {
			next = until
		}
	}
	list := make([]netip.Addr, 0, len(hold))
	for v := range hold {
		list = append(list, v)
	}
	if s.lingerTimer != nil {
		s.lingerTimer.Stop()
		s.lingerTimer = nil
	}
	if !next.IsZero() {
		s.lingerTimer = time.AfterFunc(next.Sub(now), s.lingerExpired)
	}
	if err := s.addrs.Set(list); err != nil {
		return fmt.Errorf("holding the VIPs on the node: %w", err)
	}
	s.syncFlowVIPsLocked(list)
	return nil
}

func (s *Speaker) lingerExpired() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	if err := s.syncAddresses(s.now(), nil); err != nil {
		s.log.Error(err, "removing withdrawn VIPs from the node")
	}
}

// BusyConnections counts the connections to the VIPs on this node (announced, or withdrawn and
// still held) whose clients still send requests. With flow sharing a withdrawn member keeps
// serving its connections, which the others send back to it; the agent waits for the busy ones
// to move (quiesce.busyDrain) before it reports the member quiesced. Without flow sharing the
// routers take them away at the withdrawal: 0.
func (s *Speaker) BusyConnections() int {
	if !s.keepWhileFlows {
		return 0
	}
	now := s.now()
	if !s.busy.Due(now) {
		return s.busy.Count()
	}
	s.mu.Lock()
	vips := s.heldLocked()
	s.mu.Unlock()
	n, err := s.flowKernel.sampleBusy(&s.busy, now, vips)
	if err != nil {
		s.log.Error(err, "counting busy connections failed; treating them as busy")
	}
	return n
}

// Status reports the sessions and the announced prefixes.
func (s *Speaker) Status() dataplane.Status {
	s.mu.Lock()
	announced := map[string]struct{}{}
	for v := range s.announced {
		announced[prefixOf(v)] = struct{}{}
	}
	s.mu.Unlock()
	peers := s.tracker.snapshot()
	if bfds := s.bfdStatus(); bfds != nil {
		for i := range peers {
			peers[i].BFD = bfds[peers[i].Address]
		}
	}
	return dataplane.Status{BGP: &dataplane.BGPStatus{
		RouterID:  s.routerID.String(),
		ASN:       s.asn,
		Announced: sortedStrings(announced),
		Peers:     peers,
	}}
}

func canonicalAddr(s string) string {
	a, err := netip.ParseAddr(s)
	if err != nil {
		return s
	}
	return a.Unmap().String()
}

func prefixOf(v netip.Addr) string {
	return netip.PrefixFrom(v, v.BitLen()).String()
}
