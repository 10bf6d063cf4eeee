//go:build linux

package arp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/mdlayher/arp"
	"github.com/mdlayher/ethernet"
	"github.com/mdlayher/ndp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/vishvananda/netlink"
	"golang.org/x/net/ipv6"

	"github.com/caplb/caplb/modes/dataplane"

	"github.com/caplb/caplb/modes/flows"
)

// duplicateActive: a duplicate seen this recently is reported as current.
const duplicateActive = 5 * time.Second

// Announcer is the ARP/NDP data plane.
type Announcer struct {
	cfg  Config
	log  logr.Logger
	link netlink.Link
	ifi  *net.Interface
	arp  *arp.Client // nil without IPv4 on the interface
	ndp  *ndp.Conn   // nil unless an IPv6 VIP was asked for
	// nodeIPv4 is the interface's own IPv4 address, the sender of probes.
	nodeIPv4 netip.Addr

	announced  *prometheus.CounterVec
	dupCounter prometheus.Counter
	dupGauge   prometheus.GaugeFunc

	mu     sync.Mutex
	held   map[netip.Addr]context.CancelFunc
	dups   map[netip.Addr]*dataplane.Duplicate
	lastRe map[netip.Addr]time.Time // last re-announcement because of a duplicate
	// quiet: holding but handing over; neither announce nor defend.
	quiet  bool
	closed bool
	wg     sync.WaitGroup

	// handover forwards the previous owner's flows to it during a graceful
	// hand-over (nftables; see handover.go).
	handover *handover
	// tables programs nftables (netlink); quietRules: the quiet tables
	// that silence this kernel's ARP replies / NAs for the VIPs are in.
	tables     tables
	quietRules bool
	// spread deals new connections across members (spread mode; spread.go).
	spread *spreader
	// busy counts the connections that still carry requests (modes/flows/busy.go).
	busy flows.BusyTracker
}

var _ dataplane.Dataplane = &Announcer{}

// New opens the raw sockets on cfg.Interface and registers the data plane's
// metrics. It needs CAP_NET_ADMIN (addresses) and CAP_NET_RAW (sockets).
func New(cfg Config, log logr.Logger, reg prometheus.Registerer) (*Announcer, error) {
	link, err := netlink.LinkByName(cfg.Interface)
	if err != nil {
		return nil, fmt.Errorf("arp: interface %q: %w", cfg.Interface, err)
	}
	ifi, err := net.InterfaceByName(cfg.Interface)
	if err != nil {
		return nil, fmt.Errorf("arp: interface %q: %w", cfg.Interface, err)
	}
	a := &Announcer{
		cfg: cfg, log: log, link: link, ifi: ifi,
		held: map[netip.Addr]context.CancelFunc{}, dups: map[netip.Addr]*dataplane.Duplicate{}, lastRe: map[netip.Addr]time.Time{},
		announced: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "caplb_agent_announcements_sent_total",
			Help: "Gratuitous ARP packets (family ipv4) and unsolicited neighbour advertisements (ipv6) sent.",
		}, []string{"family"}),
		dupCounter: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "caplb_agent_duplicate_owner_detections_total",
			Help: "Times another MAC was seen answering for a VIP this node holds (each episode counted once).",
		}),
	}
	a.dupGauge = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "caplb_agent_duplicate_owners",
		Help: "VIPs held by this node for which another MAC answered in the last 5s.",
	}, func() float64 { return float64(len(a.Status().ARP.Duplicates)) })
	spreadMembers := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "caplb_agent_spread_members",
		Help: "Members this node deals new connections to in spread mode, as its kernel has them (0: not spreading).",
	}, func() float64 {
		if sp := a.Status().ARP.Spread; sp != nil {
			return float64(len(sp.Backends))
		}
		return 0
	})
	spreadDraining := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "caplb_agent_spread_draining_connections",
		Help: "Connections this node forwarded to members that left the spread set and are still open.",
	}, func() float64 {
		n := 0
		if sp := a.Status().ARP.Spread; sp != nil {
			for _, d := range sp.Draining {
				n += d.Connections
			}
		}
		return float64(n)
	})
	if reg != nil {
		for _, c := range []prometheus.Collector{a.announced, a.dupCounter, a.dupGauge, spreadMembers, spreadDraining} {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("arp: register metrics: %w", err)
			}
		}
	}
	a.tables = nftTables{}
	a.handover = newHandover(cfg.Interface, log, a.tables)
	// A redirect left behind by a killed agent would forward to a node that
	// may no longer hold the VIP; its quiet tables would keep this kernel
	// from answering for a VIP it is about to claim.
	a.handover.stop("leftover from an earlier run")
	if err := a.tables.removeQuiet(); err != nil {
		log.Error(err, "removing leftover quiet tables failed")
	}
	// Forwarding left by a killed agent would deal connections for a VIP
	// this node may not hold.
	a.spread = newSpreader(nftSpread{forwardingFile: forwardingSysctl}, log, time.Now)
	if err := (nftSpread{}).remove(); err != nil {
		log.Error(err, "removing a leftover spread table failed")
	}
	a.nodeIPv4 = firstIPv4(link)
	if a.nodeIPv4.IsValid() {
		if err := a.openARP(); err != nil {
			return nil, err
		}
	}
	return a, nil
}

// openARP opens the raw ARP socket (it needs an IPv4 address on the interface) and starts its
// reader; called from New or with a.mu held.
func (a *Announcer) openARP() error {
	c, err := arp.Dial(a.ifi)
	if err != nil {
		return fmt.Errorf("arp: raw ARP socket on %s (needs CAP_NET_RAW and an IPv4 address on the interface): %w", a.cfg.Interface, err)
	}
	a.arp = c
	if !a.nodeIPv4.IsValid() {
		if l, err := netlink.LinkByName(a.cfg.Interface); err == nil {
			a.nodeIPv4 = firstIPv4(l)
		}
	}
	a.wg.Add(1)
	go a.readARP()
	return nil
}

// Sync adds and announces the wanted VIPs, and removes the others.
func (a *Announcer) Sync(ctx context.Context, d dataplane.Desired) error {
	want := map[netip.Addr]bool{}
	if d.Announce {
		for _, v := range d.VIPs {
			want[v] = true
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return errors.New("arp: data plane closed")
	}
	var errs []error
	if d.Quiet {
		a.setQuietLocked(true)
	} else {
		// Out of quiet only once the VIPs are what they should be: a
		// release never announces the VIPs it removes.
		defer a.setQuietLocked(false)
	}
	if len(want) == 0 {
		// A redirect outlives the release until its window ends: a claimant that yields to
		// the holder it claimed from (one that was only slow) still receives that holder's
		// flows until the neighbours' caches flip back, and sends them on rather than resetting
		// them. Removing it first also left the reset's wait below without it.
		a.spread.release()
	} else if d.HandOver != nil && len(a.held) == 0 {
		a.handover.start(d.VIPs, d.HandOver.From, d.HandOver.Window)
	} else if d.HandOver == nil && len(a.held) > 0 {
		// The previous owner let go or died: our RST is now the fastest news for its clients.
		a.handover.release("the previous owner let go")
	}
	for v, cancel := range a.held {
		if !want[v] {
			cancel()
			delete(a.held, v)
			delete(a.dups, v)
			reset := a.resetConnections(v)
			if err := a.delAddr(v); err != nil {
				errs = append(errs, err)
			}
			a.log.Info("VIP released", "vip", v.String(), "interface", a.cfg.Interface, "connectionsReset", reset)
		}
	}
	for v := range want {
		// A VIP is recorded as held only once it can be announced: with its socket open. A socket
		// that cannot be opened fails the Sync (the agent then does not tell the others it holds)
		// and is retried on the next one, instead of leaving a VIP that nobody ever announces.
		if v.Is6() && a.ndp == nil {
			if err := a.openNDP(); err != nil {
				errs = append(errs, err)
				continue
			}
		}
		present, err := a.hasAddr(v)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if !present {
			if err := a.addAddr(v); err != nil {
				errs = append(errs, err)
				continue
			}
		}
		if v.Is4() && a.arp == nil {
			// No IPv4 address on the interface when the agent started: the VIP just added is
			// one, so the ARP socket can be opened now. If it still cannot, take the VIP off
			// again rather than hold it silently.
			if err := a.openARP(); err != nil {
				errs = append(errs, err)
				if !present {
					if derr := a.delAddr(v); derr != nil {
						errs = append(errs, derr)
					}
				}
				continue
			}
		}
		if cancel, ok := a.held[v]; ok && present {
			continue
		} else if ok {
			// Someone removed our address behind our back: announce afresh.
			cancel()
		}
		actx, cancel := context.WithCancel(context.Background())
		a.held[v] = cancel
		a.wg.Add(1)
		go a.announceLoop(actx, v)
		a.log.Info("VIP added", "vip", v.String(), "interface", a.cfg.Interface)
	}
	if len(a.held) > 0 {
		a.spread.set(d.VIPs, d.Spread)
	}
	return errors.Join(errs...)
}

// Close removes every VIP this data plane added and closes its sockets.
func (a *Announcer) Close(context.Context) error {
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return nil
	}
	a.closed = true
	var errs []error
	for v, cancel := range a.held {
		cancel()
		reset := a.resetConnections(v)
		if err := a.delAddr(v); err != nil {
			errs = append(errs, err)
		}
		a.log.Info("VIP released", "vip", v.String(), "interface", a.cfg.Interface, "reason", "data plane closed", "connectionsReset", reset)
	}
	a.held = map[netip.Addr]context.CancelFunc{}
	a.handover.stop("data plane closed")
	a.spread.release()
	a.setQuietRulesLocked(false)
	if a.arp != nil {
		_ = a.arp.Close()
	}
	if a.ndp != nil {
		_ = a.ndp.Close()
	}
	a.mu.Unlock()
	a.wg.Wait()
	return errors.Join(errs...)
}

// Status reports held VIPs and current duplicates.
func (a *Announcer) Status() dataplane.Status {
	a.mu.Lock()
	defer a.mu.Unlock()
	s := &dataplane.ARPStatus{Interface: a.cfg.Interface, MAC: a.ifi.HardwareAddr.String()}
	for v := range a.held {
		s.Held = append(s.Held, v)
	}
	slices.SortFunc(s.Held, func(x, y netip.Addr) int { return x.Compare(y) })
	s.Spread = a.spread.status()
	for _, d := range a.dups {
		if time.Since(d.LastSeen) < duplicateActive {
			s.Duplicates = append(s.Duplicates, *d)
		}
	}
	return dataplane.Status{ARP: s}
}

func (a *Announcer) announceLoop(ctx context.Context, vip netip.Addr) {
	defer a.wg.Done()
	if !a.isQuiet() {
		a.announce(vip)
	}
	burst := a.cfg.BurstCount
	next := a.cfg.BurstInterval
	probe := time.NewTicker(a.cfg.ProbeInterval)
	defer probe.Stop()
	timer := time.NewTimer(next)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-probe.C:
			if !a.isQuiet() {
				a.probe(vip)
			}
		case <-timer.C:
			if !a.isQuiet() {
				a.announce(vip)
			}
			if burst > 0 {
				burst--
			}
			if burst == 0 {
				next = a.cfg.RefreshInterval
			}
			timer.Reset(next)
		}
	}
}

// announce sends one gratuitous ARP (request and reply forms: hosts differ in
// which they honour) or one unsolicited, overriding neighbour advertisement.
func (a *Announcer) announce(vip netip.Addr) {
	mac := a.ifi.HardwareAddr
	if vip.Is4() {
		if a.arp == nil {
			return
		}
		for _, op := range []arp.Operation{arp.OperationRequest, arp.OperationReply} {
			p, err := arp.NewPacket(op, mac, vip, ethernet.Broadcast, vip)
			if err == nil {
				err = a.arp.WriteTo(p, ethernet.Broadcast)
				if errors.Is(err, syscall.ENETDOWN) {
					// A link that went down since the last send leaves
					// ENETDOWN pending on the socket, reported once: the
					// link may be back, so the first announcement after a
					// flap must not be the one lost.
					err = a.arp.WriteTo(p, ethernet.Broadcast)
				}
			}
			if err != nil {
				a.log.Error(err, "gratuitous ARP failed", "vip", vip.String())
				return
			}
			a.announced.WithLabelValues("ipv4").Inc()
		}
		return
	}
	a.mu.Lock()
	c := a.ndp
	a.mu.Unlock()
	if c == nil {
		return
	}
	na := &ndp.NeighborAdvertisement{
		Override:      true,
		TargetAddress: vip,
		Options:       []ndp.Option{&ndp.LinkLayerAddress{Direction: ndp.Target, Addr: mac}},
	}
	if err := c.WriteTo(na, nil, netip.IPv6LinkLocalAllNodes()); err != nil {
		a.log.Error(err, "unsolicited neighbour advertisement failed", "vip", vip.String())
		return
	}
	a.announced.WithLabelValues("ipv6").Inc()
}

// probe asks who has vip; a reply from another MAC is a duplicate owner.
func (a *Announcer) probe(vip netip.Addr) {
	mac := a.ifi.HardwareAddr
	if vip.Is4() {
		if a.arp == nil {
			return
		}
		p, err := arp.NewPacket(arp.OperationRequest, mac, a.nodeIPv4, ethernet.Broadcast, vip)
		if err == nil {
			err = a.arp.WriteTo(p, ethernet.Broadcast)
		}
		if err != nil {
			a.log.V(1).Info("duplicate probe failed", "vip", vip.String(), "error", err.Error())
		}
		return
	}
	a.mu.Lock()
	c := a.ndp
	a.mu.Unlock()
	if c == nil {
		return
	}
	group, err := ndp.SolicitedNodeMulticast(vip)
	if err != nil {
		return
	}
	ns := &ndp.NeighborSolicitation{
		TargetAddress: vip,
		Options:       []ndp.Option{&ndp.LinkLayerAddress{Direction: ndp.Source, Addr: mac}},
	}
	if err := c.WriteTo(ns, nil, group); err != nil {
		a.log.V(1).Info("duplicate probe failed", "vip", vip.String(), "error", err.Error())
	}
}

func (a *Announcer) readARP() {
	defer a.wg.Done()
	for {
		p, _, err := a.arp.Read()
		if err != nil {
			if a.isClosed() {
				return
			}
			// The interface went down: the kernel reports it once on the
			// socket (ENETDOWN), which keeps working once the link is back.
			if errors.Is(err, syscall.ENETDOWN) {
				time.Sleep(10 * time.Millisecond)
				continue
			}
			// Malformed packets are skipped; other socket errors end the loop.
			var se *net.OpError
			if errors.As(err, &se) {
				a.log.Error(err, "ARP socket read failed; duplicate detection stops")
				return
			}
			continue
		}
		if p.SenderIP.IsValid() {
			a.observe(p.SenderIP, p.SenderHardwareAddr)
		}
	}
}

func (a *Announcer) readNDP(c *ndp.Conn) {
	defer a.wg.Done()
	for {
		m, _, _, err := c.ReadFrom()
		if err != nil {
			if a.isClosed() || errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		na, ok := m.(*ndp.NeighborAdvertisement)
		if !ok {
			continue
		}
		for _, o := range na.Options {
			if lla, ok := o.(*ndp.LinkLayerAddress); ok && lla.Direction == ndp.Target {
				a.observe(na.TargetAddress, lla.Addr)
			}
		}
	}
}

// observe records a packet in which mac claims ip.
func (a *Announcer) observe(ip netip.Addr, mac net.HardwareAddr) {
	ip = ip.Unmap()
	if slices.Equal(mac, a.ifi.HardwareAddr) {
		return
	}
	a.mu.Lock()
	if _, held := a.held[ip]; !held || a.quiet {
		// Not ours, or we are handing over: another owner is expected.
		a.mu.Unlock()
		return
	}
	now := time.Now()
	d := a.dups[ip]
	fresh := d == nil || d.MAC != mac.String() || now.Sub(d.LastSeen) > duplicateActive
	if fresh {
		d = &dataplane.Duplicate{VIP: ip, MAC: mac.String(), FirstSeen: now}
		a.dups[ip] = d
		a.dupCounter.Inc()
	}
	d.LastSeen = now
	d.Packets++
	// Answer with a fresh burst, not one packet: the other MAC may be in a
	// burst of its own (a member that claimed from a stale view and yields
	// a moment later), and the neighbours keep whichever MAC they heard
	// last. One packet sent after its first left its later ones the last
	// word: clients went to a node that had released the VIP until their
	// neighbour entries expired, seconds later.
	if now.Sub(a.lastRe[ip]) > time.Second {
		a.lastRe[ip] = now
		if cancel, ok := a.held[ip]; ok && !a.closed {
			cancel()
			actx, c := context.WithCancel(context.Background())
			a.held[ip] = c
			a.wg.Add(1)
			go a.announceLoop(actx, ip)
		}
	}
	a.mu.Unlock()
	if fresh {
		a.log.Info("duplicate owner: another MAC answers for a VIP this node holds", "vip", ip.String(), "mac", mac.String())
	}
}

// setQuietLocked(true) keeps the held VIPs on the interface (connections
// still arriving are served) but stops announcing and defending them: the
// agent's make-before-break hand-over (dataplane.Desired.Quiet), while the
// successor's announcements move the neighbours. setQuietLocked(false)
// announces every held VIP again at once, with a fresh burst. a.mu held.
func (a *Announcer) setQuietLocked(quiet bool) {
	if a.quiet == quiet || a.closed {
		return
	}
	a.quiet = quiet
	a.log.Info("announcements", "quiet", quiet, "held", len(a.held))
	// Quiet: the kernel stops answering ARP / NS for the VIPs, so that a
	// neighbour resolving one for the first time during the drain learns
	// the successor. Not quiet: answer again before announcing.
	a.setQuietRulesLocked(quiet)
	if quiet {
		return
	}
	for v, cancel := range a.held {
		cancel()
		actx, c := context.WithCancel(context.Background())
		a.held[v] = c
		a.wg.Add(1)
		go a.announceLoop(actx, v)
	}
}

// setQuietRulesLocked installs or removes the quiet tables; a.mu held.
func (a *Announcer) setQuietRulesLocked(on bool) {
	if on == a.quietRules {
		return
	}
	if !on {
		if err := a.tables.removeQuiet(); err != nil {
			a.log.Error(err, "removing the quiet tables failed: this node may not answer ARP for a VIP it holds")
			return
		}
		a.quietRules = false
		return
	}
	vips := make([]netip.Addr, 0, len(a.held))
	for v := range a.held {
		vips = append(vips, v)
	}
	if len(vips) == 0 {
		return
	}
	if err := a.tables.installQuiet(vips); err != nil {
		a.log.Error(err, "quiet tables not installed: the draining node still answers ARP / NS for the VIPs")
		// Some tables may be in: make sure leaving quiet removes them.
	}
	a.quietRules = true
}

func (a *Announcer) isQuiet() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.quiet
}

func (a *Announcer) isClosed() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.closed
}

// openNDP opens the ICMPv6 socket; called with a.mu held.
func (a *Announcer) openNDP() error {
	c, _, err := ndp.Listen(a.ifi, ndp.LinkLocal)
	if err != nil {
		// No usable link-local address yet (DAD still running): let the
		// kernel choose the source.
		c, _, err = ndp.Listen(a.ifi, ndp.Unspecified)
	}
	if err != nil {
		return fmt.Errorf("arp: ICMPv6 socket on %s: %w", a.cfg.Interface, err)
	}
	var f ipv6.ICMPFilter
	f.SetAll(true)
	f.Accept(ipv6.ICMPTypeNeighborAdvertisement)
	_ = c.SetICMPFilter(&f)
	a.ndp = c
	a.wg.Add(1)
	go a.readNDP(c)
	return nil
}
