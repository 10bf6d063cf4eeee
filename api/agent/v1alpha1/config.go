package v1alpha1

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"time"

	"sigs.k8s.io/yaml"
)

// DefaultHealthServerName is the name every kubeadm, k3s and RKE2 API server certificate carries.
const DefaultHealthServerName = "kubernetes"

// DefaultControlSocket is the agent's control socket (quiesce), root only.
const DefaultControlSocket = "/run/caplb/agent.sock"

// Load reads, parses and validates the file at path.
func Load(path string) (*AgentConfiguration, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	c, err := Parse(b)
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	return c, nil
}

// Parse decodes YAML strictly (unknown fields are errors), applies defaults
// and validates. It does no I/O beyond os.Hostname for the default node name.
func Parse(data []byte) (*AgentConfiguration, error) {
	if errs := checkDurations(data); len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	var c AgentConfiguration
	if err := yaml.UnmarshalStrict(data, &c); err != nil {
		return nil, fmt.Errorf("parse: %w", err)
	}
	c.Default()
	keepExplicitZeros(data, &c)
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return &c, nil
}

// Default fills in zero values.
func (c *AgentConfiguration) Default() {
	if c.NodeName == "" {
		c.NodeName, _ = os.Hostname()
	}
	if c.Mode == "" {
		c.Mode = ModeARP
	}
	if c.Port == 0 {
		c.Port = 6443
	}
	c.Health.defaults(c.Port)
	e := &c.Election
	defInt(&e.Port, 7946)
	def(&e.ProbeInterval, 100*time.Millisecond)
	def(&e.ProbeTimeout, 50*time.Millisecond)
	defInt(&e.SuspicionMult, 2)
	def(&e.GossipInterval, 20*time.Millisecond)
	def(&e.Settle, 500*time.Millisecond)
	def(&e.RejoinInterval, time.Second)
	def(&e.ContactTimeout, 500*time.Millisecond)
	def(&c.Quiesce.Drain, 500*time.Millisecond)
	def(&c.Quiesce.HandoverTimeout, 5*time.Second)
	if c.Membership.Dynamic && c.Membership.StateFile == "" {
		c.Membership.StateFile = DefaultStateFile
	}
	if c.NodeAPI.Kubeconfig != "" {
		if c.NodeAPI.NodeName == "" {
			c.NodeAPI.NodeName = c.NodeName
		}
		def(&c.NodeAPI.ResyncInterval, 10*time.Second)
	}
	if c.Admin.Listen == "" {
		c.Admin.Listen = "127.0.0.1:7473"
	}
	if c.Admin.ControlSocket == "" {
		c.Admin.ControlSocket = DefaultControlSocket
	}
	a := &c.ARP
	defInt(&a.BurstCount, 5)
	def(&a.BurstInterval, 200*time.Millisecond)
	def(&a.RefreshInterval, 10*time.Second)
	def(&a.ProbeInterval, time.Second)
}

func def(d *Duration, v time.Duration) {
	if d.Duration == 0 {
		d.Duration = v
	}
}

func defInt(i *int, v int) {
	if *i == 0 {
		*i = v
	}
}

// Validate checks the configuration with no I/O; every error names the field
// and says what would be accepted.
func (c *AgentConfiguration) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: "+format, append([]any{field}, args...)...))
	}
	if c.APIVersion != APIVersion || c.Kind != Kind {
		bad("apiVersion", "%q kind %q is not an agent configuration; start the file with apiVersion: %s and kind: %s", c.APIVersion, c.Kind, APIVersion, Kind)
	}
	if c.NodeName == "" {
		bad("nodeName", "is empty and the hostname is unknown; set nodeName to this node's member name")
	}
	if c.Mode != ModeARP && c.Mode != ModeBGP {
		bad("mode", "%q is not a mode; use %q or %q", c.Mode, ModeARP, ModeBGP)
	}
	if len(c.VIPs) == 0 {
		bad("vips", "is empty; give at least one virtual IP, e.g. [\"192.0.2.10\"]")
	}
	seenVIP := map[netip.Addr]bool{}
	for i, v := range c.VIPs {
		a, err := netip.ParseAddr(v)
		switch {
		case err != nil:
			bad(fmt.Sprintf("vips[%d]", i), "%q is not an IP address", v)
		case a.Zone() != "" || a.Is4In6() || !a.IsGlobalUnicast():
			// IsGlobalUnicast is false for loopback, link-local, multicast, broadcast and
			// unspecified addresses (private ranges are "global" to it): the CRD's CEL rule
			// ip(host).isGlobalUnicast() is the same test.
			bad(fmt.Sprintf("vips[%d]", i), "%q cannot be a VIP: not loopback, link-local, multicast, broadcast, unspecified or IPv4-mapped; use a unicast address of the nodes' segment", v)
		case seenVIP[a.Unmap()]:
			bad(fmt.Sprintf("vips[%d]", i), "%q is listed twice", v)
		default:
			seenVIP[a.Unmap()] = true
		}
	}
	if c.Port < 1 || c.Port > 65535 {
		bad("port", "%d is out of range; use 1-65535", c.Port)
	}
	seenPort := map[int]bool{c.Port: true}
	for i, p := range c.ExtraPorts {
		f := fmt.Sprintf("extraPorts[%d]", i)
		switch {
		case p < 1 || p > 65535:
			bad(f, "%d is out of range; use 1-65535", p)
		case seenPort[p]:
			bad(f, "%d is listed twice (or equals port)", p)
		}
		seenPort[p] = true
	}
	if len(c.Members) == 0 && c.Mode != ModeBGP && !c.Membership.Dynamic {
		bad("members", "is empty; list every control-plane node (name and address), this one included")
	}
	names := map[string]bool{}
	addrs := map[netip.Addr]bool{}
	for i, m := range c.Members {
		f := fmt.Sprintf("members[%d]", i)
		if m.Name == "" {
			bad(f+".name", "is empty; use the node's name")
		} else if names[m.Name] {
			bad(f+".name", "%q is listed twice", m.Name)
		}
		names[m.Name] = true
		a, err := netip.ParseAddr(m.Address)
		if err != nil {
			bad(f+".address", "%q is not an IP address", m.Address)
			continue
		}
		if addrs[a.Unmap()] {
			bad(f+".address", "%q is listed twice", m.Address)
		}
		addrs[a.Unmap()] = true
		if seenVIP[a.Unmap()] {
			bad(f+".address", "%q is also a VIP; a member needs an address of its own", m.Address)
		}
	}
	if c.Membership.Version < 0 {
		bad("membership.version", "%d is negative", c.Membership.Version)
	}
	if !c.Membership.Dynamic && (c.Membership.Version != 0 || c.Membership.StateFile != "") {
		bad("membership", "version and stateFile apply only with membership.dynamic: true")
	}
	if c.NodeName != "" && len(c.Members) > 0 && !names[c.NodeName] && !c.Membership.Dynamic {
		bad("nodeName", "%q is not among members; add it or set nodeName to one of them", c.NodeName)
	}
	c.Health.validate(bad)
	e := c.Election
	if e.BindAddress != "" {
		if _, err := netip.ParseAddr(e.BindAddress); err != nil {
			bad("election.bindAddress", "%q is not an IP address", e.BindAddress)
		}
	}
	if e.Port < 1 || e.Port > 65535 {
		bad("election.port", "%d is out of range; use 1-65535", e.Port)
	}
	positive(bad, "election.probeInterval", e.ProbeInterval)
	positive(bad, "election.probeTimeout", e.ProbeTimeout)
	if e.ProbeTimeout.Duration >= e.ProbeInterval.Duration && e.ProbeInterval.Duration > 0 {
		bad("election.probeTimeout", "%v must be shorter than election.probeInterval (%v)", e.ProbeTimeout.Duration, e.ProbeInterval.Duration)
	}
	atLeast1(bad, "election.suspicionMult", e.SuspicionMult)
	positive(bad, "election.gossipInterval", e.GossipInterval)
	positive(bad, "election.settle", e.Settle)
	positive(bad, "election.rejoinInterval", e.RejoinInterval)
	if e.ContactTimeout.Duration < 2*e.ProbeInterval.Duration {
		bad("election.contactTimeout", "%v is shorter than 2 x election.probeInterval (%v); one late ping round would release the VIPs", e.ContactTimeout.Duration, 2*e.ProbeInterval.Duration)
	} else if min := e.ProbeInterval.Duration + 3*e.ProbeTimeout.Duration; e.ContactTimeout.Duration < min {
		bad("election.contactTimeout", "%v is shorter than election.probeInterval + 3 x election.probeTimeout (%v): a direct ping is tried three times before it counts as lost", e.ContactTimeout.Duration, min)
	}
	if c.Mode == ModeARP && !e.Insecure && e.SecretKeyFile == "" {
		bad("election.secretKeyFile", "is empty; gossip decides who holds the VIP and must be authenticated: give a key file (16, 24 or 32 bytes, mode 0600), or set election.insecure: true for a lab")
	}
	if c.Mode == ModeBGP && c.BGP != nil && c.BGP.FlowSharingOn() && e.Insecure {
		// Anyone who reaches the gossip port could then name itself the owner of any connection.
		bad("election.insecure", "cannot carry bgp.flowSharing: the flow lists steer packets and must be authenticated; give election.secretKeyFile, or set bgp.flowSharing: false")
	}
	if e.Insecure && (e.SecretKeyFile != "" || len(e.SecondaryKeyFiles) > 0) {
		bad("election.insecure", "is set together with a key file; choose one")
	}
	if e.SecretKeyFile == "" && len(e.SecondaryKeyFiles) > 0 {
		bad("election.secondaryKeyFiles", "needs election.secretKeyFile (the primary key) too")
	}
	if len(e.Label) > 255 {
		bad("election.label", "is %d bytes; memberlist allows at most 255", len(e.Label))
	}
	if c.Quiesce.Drain.Duration < 0 {
		bad("quiesce.drain", "%v is negative (0s: release as soon as the successor announces)", c.Quiesce.Drain.Duration)
	}
	if c.Quiesce.BusyDrain.Duration < 0 {
		bad("quiesce.busyDrain", "%v is negative (0s, the default, releases after quiesce.drain whatever the connections do)", c.Quiesce.BusyDrain.Duration)
	}
	positive(bad, "quiesce.handoverTimeout", c.Quiesce.HandoverTimeout)
	if s := c.Admin.ControlSocket; s != "0" && !strings.HasPrefix(s, "/") {
		bad("admin.controlSocket", "%q is not an absolute path (or \"0\" to disable)", s)
	}
	if l := c.Admin.Listen; l != "0" {
		if _, _, err := net.SplitHostPort(l); err != nil {
			bad("admin.listen", "%q is not host:port (or \"0\" to disable)", l)
		}
	}
	if c.NodeAPI.Kubeconfig != "" {
		positive(bad, "nodeAPI.resyncInterval", c.NodeAPI.ResyncInterval)
	}
	if c.ARP.BurstCount < 0 {
		bad("arp.burstCount", "%d is negative", c.ARP.BurstCount)
	}
	positive(bad, "arp.burstInterval", c.ARP.BurstInterval)
	positive(bad, "arp.refreshInterval", c.ARP.RefreshInterval)
	positive(bad, "arp.probeInterval", c.ARP.ProbeInterval)
	switch c.ARP.LoadBalancing {
	case "", LoadBalancingSingle:
	case LoadBalancingSpread:
		if c.Mode == ModeBGP {
			bad("arp.loadBalancing", "spread is an arp mode; in bgp mode the routers spread connections (ECMP)")
		}
	default:
		bad("arp.loadBalancing", "%q is not a mode; use %q or %q", c.ARP.LoadBalancing, LoadBalancingSingle, LoadBalancingSpread)
	}
	if c.ARP.ClaimWhenSilent && c.Mode != ModeARP {
		bad("arp.claimWhenSilent", "only the arp mode claims a VIP by ARP; remove it in %s mode", c.Mode)
	}
	if c.ARP.LoadBalancing == LoadBalancingSpread && c.Mode != ModeBGP && c.Quiesce.BusyDrain.Duration > 0 {
		// The busy count reads the sockets bound to the VIPs; spread connections reach the API
		// servers at node addresses, so the holder would count none and release mid-request.
		bad("quiesce.busyDrain", "%v cannot be used with arp.loadBalancing spread: spread connections reach the API servers at node addresses, not the VIP, so none counts as busy; set quiesce.busyDrain to 0s or arp.loadBalancing to single", c.Quiesce.BusyDrain.Duration)
	}
	if c.Mode == ModeBGP {
		if c.BGP == nil {
			bad("bgp", "is required in bgp mode")
		} else if err := c.BGP.Validate(); err != nil {
			bad("bgp", "%v", err)
		} else if verr := c.bgpVIPFamilies(); verr != nil {
			bad("vips", "%v", verr)
		}
	}
	return errors.Join(errs...)
}

func positive(bad func(string, string, ...any), field string, d Duration) {
	if d.Duration <= 0 {
		bad(field, "%v must be positive", d.Duration)
	}
}

func atLeast1(bad func(string, string, ...any), field string, i int) {
	if i < 1 {
		bad(field, "%d must be at least 1", i)
	}
}

// ParsedVIPs returns the VIPs as addresses (after Validate).
func (c *AgentConfiguration) ParsedVIPs() []netip.Addr {
	out := make([]netip.Addr, 0, len(c.VIPs))
	for _, v := range c.VIPs {
		if a, err := netip.ParseAddr(v); err == nil {
			out = append(out, a.Unmap())
		}
	}
	return out
}

// Digest summarises what every member must agree on (members in order,
// VIPs, mode); members gossip it and report a mismatch.
func (c *AgentConfiguration) Digest() string {
	var b strings.Builder
	b.WriteString(c.Mode)
	for _, m := range c.Members {
		b.WriteString("|" + m.Name + "=" + m.Address)
	}
	for _, v := range c.VIPs {
		b.WriteString("|" + v)
	}
	sum := sha256.Sum256([]byte(b.String()))
	return hex.EncodeToString(sum[:4])
}

// bgpVIPFamilies checks that every VIP that parses has a BGP peer of its address family, so
// that an IPv6 VIP with only IPv4 peers is refused at start rather than failing every sync.
func (c *AgentConfiguration) bgpVIPFamilies() error {
	var vips []netip.Addr
	for _, v := range c.VIPs {
		if a, err := netip.ParseAddr(v); err == nil {
			vips = append(vips, a)
		}
	}
	return c.BGP.ValidateVIPs(vips)
}
