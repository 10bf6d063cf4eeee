//go:build linux

package bgplab

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/caplb/caplb/e2e/lab"
)

// FRR daemons as the Debian package frr installs them (mk/bgp.mk: `make frr`).
const (
	frrZebra = "/usr/lib/frr/zebra"
	frrBGPD  = "/usr/lib/frr/bgpd"
	frrBFDD  = "/usr/lib/frr/bfdd"
	frrUser  = "frr"
)

// SkipUnlessFRR skips t unless root and FRR's zebra, bgpd and bfdd are installed. Under CI (CI set)
// a missing FRR fails instead: `make test` installs it, so its absence there is a broken setup,
// not a reason to report the BGP lab as passing.
func SkipUnlessFRR(t testing.TB) {
	t.Helper()
	lab.SkipUnlessRoot(t)
	for _, bin := range []string{frrZebra, frrBGPD, frrBFDD} {
		if _, err := os.Stat(bin); err != nil {
			lab.SkipOrFailInCI(t, "needs FRR (%s missing): run `make frr` (apt-get install frr)", bin)
		}
	}
	if _, err := exec.LookPath("vtysh"); err != nil {
		lab.SkipOrFailInCI(t, "needs FRR's vtysh: run `make frr` (apt-get install frr)")
	}
}

// FRRNeighbor is a BGP neighbour of the lab router.
type FRRNeighbor struct {
	Address netip.Addr
	ASN     uint32
	// Password is the TCP-MD5 password; empty for none.
	Password string
}

// FRRConfig is the lab router's BGP configuration.
type FRRConfig struct {
	ASN      uint32
	RouterID netip.Addr
	// Neighbors are the peers; IPv6 neighbours are activated for IPv6 unicast only.
	Neighbors []FRRNeighbor
	// Keepalive and Hold are the router's BGP timers. Default 1s and 3s (the lower hold time of
	// the two sides wins).
	Keepalive, Hold time.Duration
	// MaximumPaths is the ECMP width. Default 16.
	MaximumPaths int
	// ListenRange, when valid, accepts sessions from any address in it (peer group "nodes",
	// AS ListenASN): nodes that come and go, as a rack's top-of-rack router is configured.
	ListenRange netip.Prefix
	ListenASN   uint32
	// ListenPassword is the listen range's TCP-MD5 password; empty for none.
	ListenPassword string
	// BFD, when set, runs FRR's bfdd and asks for a BFD session on every neighbour (profile
	// "caplb"): bgpd drops a neighbour's session, and its routes, when BFD goes down.
	BFD *FRRBFD
}

// FRRBFD is the router's BFD profile.
type FRRBFD struct {
	// Interval is both the transmit and the receive interval.
	Interval time.Duration
	// Multiplier is the detect multiplier. Default 3.
	Multiplier int
}

// FRR is a real router: FRR's zebra and bgpd, started directly as processes in a namespace
// with a generated configuration. Their pid files, vty sockets and zserv socket live in a
// directory of the lab, and each instance has its own path space (-N), so several FRRs (and
// the system's own, if any) never share a socket.
type FRR struct {
	ns    *lab.Netns
	name  string
	dir   string
	cfg   FRRConfig
	zebra *lab.Process
	bgpd  *lab.Process
	bfdd  *lab.Process
}

// StartFRR writes the configuration and starts zebra then bgpd in ns. It returns once bgpd
// answers on its vty. The daemons run as the frr user (FRR refuses to run its vty as root
// outside the frrvty group); the lab directory is made traversable for it.
func StartFRR(ns *lab.Netns, name string, cfg FRRConfig) (*FRR, error) {
	if cfg.Keepalive == 0 {
		cfg.Keepalive = time.Second
	}
	if cfg.Hold == 0 {
		cfg.Hold = 3 * time.Second
	}
	if cfg.MaximumPaths == 0 {
		cfg.MaximumPaths = 16
	}
	l := ns.Lab()
	u, err := user.Lookup(frrUser)
	if err != nil {
		return nil, fmt.Errorf("frr: user %s: %w (is the frr package installed?)", frrUser, err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	// The lab dir is 0700; the frr user only needs to traverse it to reach its own subdir.
	if err := os.Chmod(l.Dir(), 0o711); err != nil {
		return nil, fmt.Errorf("frr: %w", err)
	}
	dir := filepath.Join(l.Dir(), "frr-"+name)
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("frr: %w", err)
	}
	f := &FRR{ns: ns, name: name, dir: dir, cfg: cfg}
	files := map[string]string{"zebra.conf": f.zebraConf(), "bgpd.conf": f.bgpdConf(), "bfdd.conf": f.bfddConf(), "vtysh.conf": ""}
	for file, content := range files {
		p := filepath.Join(dir, file)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			return nil, fmt.Errorf("frr: %w", err)
		}
		if err := os.Chown(p, uid, gid); err != nil {
			return nil, fmt.Errorf("frr: %w", err)
		}
	}
	if err := os.Chown(dir, uid, gid); err != nil {
		return nil, fmt.Errorf("frr: %w", err)
	}
	common := func(daemon string) []string {
		return []string{
			"-N", l.Name() + "-" + name,
			"-f", filepath.Join(dir, daemon+".conf"),
			"-i", filepath.Join(dir, daemon+".pid"),
			"-z", filepath.Join(dir, "zserv.api"),
			"--vty_socket", dir,
			"-u", frrUser, "-g", frrUser,
			"--log", "stdout", "--log-level", "info",
		}
	}
	if f.zebra, err = ns.Start(name+"-zebra", append([]string{frrZebra}, common("zebra")...), nil); err != nil {
		return nil, err
	}
	if err := f.waitVty(f.zebra, "zebra", "show version"); err != nil {
		return nil, err
	}
	if cfg.BFD != nil {
		if f.bfdd, err = ns.Start(name+"-bfdd", append([]string{frrBFDD}, common("bfdd")...), nil); err != nil {
			return nil, err
		}
		if err := f.waitVty(f.bfdd, "bfdd", "show bfd peers json"); err != nil {
			return nil, err
		}
	}
	if err := f.startBGPD(); err != nil {
		return nil, err
	}
	return f, nil
}

func (f *FRR) startBGPD() error {
	l := f.ns.Lab()
	argv := []string{frrBGPD,
		"-N", l.Name() + "-" + f.name,
		"-f", filepath.Join(f.dir, "bgpd.conf"),
		"-i", filepath.Join(f.dir, "bgpd.pid"),
		"-z", filepath.Join(f.dir, "zserv.api"),
		"--vty_socket", f.dir,
		"-u", frrUser, "-g", frrUser,
		"--log", "stdout", "--log-level", "info",
	}
	var err error
	if f.bgpd, err = f.ns.Start(f.name+"-bgpd", argv, nil); err != nil {
		return err
	}
	return f.waitVty(f.bgpd, "bgpd", "show bgp summary json")
}

func (f *FRR) waitVty(p *lab.Process, daemon, cmd string) error {
	deadline := time.Now().Add(15 * time.Second)
	var last error
	for time.Now().Before(deadline) {
		if exited, werr := p.Exited(); exited {
			return fmt.Errorf("frr %s: %s exited: %v (see %s)", f.name, daemon, werr, f.ns.Lab().LogPath(p.Name()))
		}
		if _, last = f.Vtysh(context.Background(), "-d", daemon, "-c", cmd); last == nil {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("frr %s: %s not answering on its vty: %w", f.name, daemon, last)
}

// bfddConf is bfdd's configuration: the "caplb" profile the neighbours use.
func (f *FRR) bfddConf() string {
	b := f.cfg.BFD
	if b == nil {
		return ""
	}
	mult := b.Multiplier
	if mult == 0 {
		mult = 3
	}
	ms := strconv.Itoa(int(b.Interval / time.Millisecond))
	return "hostname " + f.name + "\nlog stdout informational\n!\nbfd\n profile caplb\n  transmit-interval " + ms +
		"\n  receive-interval " + ms + "\n  detect-multiplier " + strconv.Itoa(mult) + "\n exit\n!\nexit\n"
}

func (f *FRR) zebraConf() string {
	return "hostname " + f.name + "\nlog stdout informational\n"
}

func (f *FRR) bgpdConf() string {
	sec := func(d time.Duration) string { return strconv.Itoa(int(d / time.Second)) }
	var b strings.Builder
	fmt.Fprintf(&b, "hostname %s\nlog stdout informational\n!\n", f.name)
	fmt.Fprintf(&b, "router bgp %d\n", f.cfg.ASN)
	fmt.Fprintf(&b, " bgp router-id %s\n", f.cfg.RouterID)
	// Since FRR 7.4 eBGP routes are dropped without an inbound policy (RFC 8212); the lab
	// accepts everything from its nodes.
	b.WriteString(" no bgp ebgp-requires-policy\n")
	// ECMP across nodes even if they use different ASNs.
	b.WriteString(" bgp bestpath as-path multipath-relax\n")
	b.WriteString(" no bgp default ipv4-unicast\n")
	b.WriteString(" bgp log-neighbor-changes\n")
	fmt.Fprintf(&b, " timers bgp %s %s\n", sec(f.cfg.Keepalive), sec(f.cfg.Hold))
	for _, n := range f.cfg.Neighbors {
		fmt.Fprintf(&b, " neighbor %s remote-as %d\n", n.Address, n.ASN)
		fmt.Fprintf(&b, " neighbor %s timers %s %s\n", n.Address, sec(f.cfg.Keepalive), sec(f.cfg.Hold))
		fmt.Fprintf(&b, " neighbor %s timers connect 1\n", n.Address)
		if n.Password != "" {
			fmt.Fprintf(&b, " neighbor %s password %s\n", n.Address, n.Password)
		}
		if f.cfg.BFD != nil && n.Address.Is4() {
			fmt.Fprintf(&b, " neighbor %s bfd profile caplb\n", n.Address)
		}
	}
	if f.cfg.ListenRange.IsValid() {
		b.WriteString(" neighbor nodes peer-group\n")
		fmt.Fprintf(&b, " neighbor nodes remote-as %d\n", f.cfg.ListenASN)
		fmt.Fprintf(&b, " neighbor nodes timers %s %s\n", sec(f.cfg.Keepalive), sec(f.cfg.Hold))
		if f.cfg.ListenPassword != "" {
			fmt.Fprintf(&b, " neighbor nodes password %s\n", f.cfg.ListenPassword)
		}
		if f.cfg.BFD != nil && f.cfg.ListenRange.Addr().Is4() {
			b.WriteString(" neighbor nodes bfd profile caplb\n")
		}
		fmt.Fprintf(&b, " bgp listen range %s peer-group nodes\n", f.cfg.ListenRange)
	}
	for _, fam := range []struct {
		name string
		is4  bool
	}{{"ipv4", true}, {"ipv6", false}} {
		fmt.Fprintf(&b, " address-family %s unicast\n", fam.name)
		fmt.Fprintf(&b, "  maximum-paths %d\n", f.cfg.MaximumPaths)
		fmt.Fprintf(&b, "  maximum-paths ibgp %d\n", f.cfg.MaximumPaths)
		for _, n := range f.cfg.Neighbors {
			if n.Address.Is4() == fam.is4 {
				fmt.Fprintf(&b, "  neighbor %s activate\n", n.Address)
			}
		}
		if f.cfg.ListenRange.IsValid() && f.cfg.ListenRange.Addr().Is4() == fam.is4 {
			b.WriteString("  neighbor nodes activate\n")
		}
		b.WriteString(" exit-address-family\n")
	}
	b.WriteString("!\n")
	return b.String()
}

// BGPDLog is bgpd's log so far (every run of it).
func (f *FRR) BGPDLog() string {
	b, _ := os.ReadFile(f.ns.Lab().LogPath(f.name + "-bgpd"))
	return string(b)
}

// Dir is where the instance keeps its configuration, pid files and sockets.
func (f *FRR) Dir() string { return f.dir }

// Vtysh runs vtysh against this instance with args (e.g. "-c", "show bgp summary").
func (f *FRR) Vtysh(ctx context.Context, args ...string) (string, error) {
	argv := append([]string{"--vty_socket", f.dir, "--config_dir", f.dir}, args...)
	out, err := exec.CommandContext(ctx, "vtysh", argv...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("vtysh %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// Configure runs configuration commands in bgpd's "router bgp" context.
func (f *FRR) Configure(ctx context.Context, lines ...string) error {
	args := []string{"-c", "configure terminal", "-c", fmt.Sprintf("router bgp %d", f.cfg.ASN)}
	for _, l := range lines {
		args = append(args, "-c", l)
	}
	_, err := f.Vtysh(ctx, args...)
	return err
}

// FRRPeer is a neighbour as bgpd sees it.
type FRRPeer struct {
	// State is bgpd's FSM state: Idle, Connect, Active, OpenSent, OpenConfirm, Established.
	State string `json:"bgpState"`
	// LastReset is bgpd's reason for the last session reset, e.g. "BGP Notification send".
	LastReset string `json:"lastResetDueTo"`
	// LastNotification names the last NOTIFICATION sent or received, e.g. "OPEN Message
	// Error/Bad Peer AS" or "Cease/Peer Unconfigured".
	LastNotification string `json:"lastNotificationReason"`
	// UptimeMsec is the time since the state last changed.
	UptimeMsec int64 `json:"bgpTimerUpMsec"`
	// ConnectionsEstablished counts sessions that reached Established.
	ConnectionsEstablished int `json:"connectionsEstablished"`
}

// Peers returns bgpd's view of every neighbour ("show bgp neighbors json").
func (f *FRR) Peers(ctx context.Context) (map[netip.Addr]FRRPeer, error) {
	out, err := f.Vtysh(ctx, "-d", "bgpd", "-c", "show bgp neighbors json")
	if err != nil {
		return nil, err
	}
	raw := map[string]FRRPeer{}
	if err := json.Unmarshal([]byte(out), &raw); err != nil {
		return nil, fmt.Errorf("parse show bgp neighbors json: %w: %s", err, out)
	}
	peers := map[netip.Addr]FRRPeer{}
	for k, v := range raw {
		if a, err := netip.ParseAddr(k); err == nil {
			peers[a] = v
		}
	}
	return peers, nil
}

// BGPRoutes returns, for each prefix in bgpd's table of the family, the next hops of its
// multipath set ("show bgp ipv4|ipv6 unicast json").
func (f *FRR) BGPRoutes(ctx context.Context, ipv6 bool) (map[netip.Prefix][]netip.Addr, error) {
	fam := "ipv4"
	if ipv6 {
		fam = "ipv6"
	}
	out, err := f.Vtysh(ctx, "-d", "bgpd", "-c", "show bgp "+fam+" unicast json")
	if err != nil {
		return nil, err
	}
	var table struct {
		Routes map[string][]struct {
			Valid     bool `json:"valid"`
			Multipath bool `json:"multipath"`
			Bestpath  bool `json:"bestpath"`
			Nexthops  []struct {
				IP    string `json:"ip"`
				Scope string `json:"scope"`
			} `json:"nexthops"`
		} `json:"routes"`
	}
	if err := json.Unmarshal([]byte(out), &table); err != nil {
		return nil, fmt.Errorf("parse show bgp json: %w", err)
	}
	routes := map[netip.Prefix][]netip.Addr{}
	for p, paths := range table.Routes {
		pfx, err := netip.ParsePrefix(p)
		if err != nil {
			continue
		}
		for _, path := range paths {
			if !path.Valid || !(path.Multipath || path.Bestpath) {
				continue
			}
			for _, nh := range path.Nexthops {
				if nh.Scope == "link-local" {
					continue
				}
				if a, err := netip.ParseAddr(nh.IP); err == nil {
					routes[pfx] = append(routes[pfx], a)
				}
			}
		}
	}
	return routes, nil
}

// RestartBGPD kills bgpd (as a crash would: no NOTIFICATION, but the kernel closes its TCP
// sessions) and starts it again with the same configuration: every session is lost and
// re-established.
func (f *FRR) RestartBGPD() error {
	_ = f.bgpd.Signal(syscall.SIGKILL)
	if err := f.bgpd.Wait(5 * time.Second); err != nil && !isSignalExit(err) {
		return fmt.Errorf("frr %s: bgpd: %w", f.name, err)
	}
	_ = os.Remove(filepath.Join(f.dir, "bgpd.vty"))
	_ = os.Remove(filepath.Join(f.dir, "bgpd.pid"))
	return f.startBGPD()
}

// Stop ends bgpd, bfdd and zebra (SIGTERM, then SIGKILL).
func (f *FRR) Stop() error {
	var errs []error
	for _, p := range []*lab.Process{f.bgpd, f.bfdd, f.zebra} {
		if p == nil {
			continue
		}
		if err := p.Stop(5 * time.Second); err != nil && !isSignalExit(err) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func isSignalExit(err error) bool {
	var ee *exec.ExitError
	return errors.As(err, &ee)
}

// BFDPeers returns bfdd's sessions by peer address: their status ("up", "down", "init").
func (f *FRR) BFDPeers(ctx context.Context) (map[netip.Addr]string, error) {
	out, err := f.Vtysh(ctx, "-c", "show bfd peers json")
	if err != nil {
		return nil, err
	}
	var raw []struct {
		Peer   string `json:"peer"`
		Status string `json:"status"`
	}
	if err := json.Unmarshal([]byte(out), &raw); err != nil {
		return nil, fmt.Errorf("frr: show bfd peers json: %w", err)
	}
	peers := map[netip.Addr]string{}
	for _, p := range raw {
		if a, err := netip.ParseAddr(p.Peer); err == nil {
			peers[a] = p.Status
		}
	}
	return peers, nil
}
