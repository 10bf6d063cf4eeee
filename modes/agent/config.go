package agent

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/caplb/caplb/modes/bgp"
)

// Modes of the agent.
const (
	ModeARP = "arp"
	ModeBGP = "bgp"
)

// Config is the agent's configuration file (YAML). Zero values take the
// defaults documented on each field and in config/agent/agent.yaml.
type Config struct {
	// NodeName is this node's member name. Default: the hostname.
	NodeName string `json:"nodeName,omitempty"`
	// Mode is "arp" (default: one elected owner holds the VIPs) or "bgp"
	// (every eligible member announces them).
	Mode string `json:"mode,omitempty"`
	// VIPs are the virtual IPs (IPv4 and/or IPv6) of the API endpoint.
	VIPs []string `json:"vips"`
	// Port is the API server port behind the VIPs. Default 6443.
	Port int `json:"port,omitempty"`
	// Interface carries the VIPs. Default: the interface of the route to the
	// first VIP.
	Interface string `json:"interface,omitempty"`
	// Members are the control-plane nodes in preference order (the first
	// eligible one owns the VIP when nobody holds it). Every agent must list
	// the same members in the same order.
	Members []MemberConfig `json:"members"`
	Health  HealthConfig   `json:"health,omitempty"`
	// Election: memberlist timers and addresses (arp and bgp modes; in bgp
	// mode only eligibility is gossiped).
	Election ElectionConfig `json:"election,omitempty"`
	Quiesce  QuiesceConfig  `json:"quiesce,omitempty"`
	Admin    AdminConfig    `json:"admin,omitempty"`
	ARP      ARPConfig      `json:"arp,omitempty"`
	// BGP configures the speaker in bgp mode.
	BGP *bgp.Config `json:"bgp,omitempty"`
}

// MemberConfig is one control-plane node.
type MemberConfig struct {
	Name string `json:"name"`
	// Address is the node's own IP on the VIP segment; gossip goes there.
	Address string `json:"address"`
}

// HealthConfig is the local API server check that makes a member eligible.
type HealthConfig struct {
	// URL default https://127.0.0.1:<port>/readyz.
	URL string `json:"url,omitempty"`
	// CAFile verifies the server certificate (e.g. /etc/kubernetes/pki/ca.crt).
	CAFile string `json:"caFile,omitempty"`
	// InsecureSkipVerify must be set explicitly when no CAFile is given.
	InsecureSkipVerify bool `json:"insecureSkipVerify,omitempty"`
	// Interval between checks (default 200ms) and Timeout of one (default 1s).
	Interval Duration `json:"interval,omitempty"`
	Timeout  Duration `json:"timeout,omitempty"`
	// Rise consecutive successes make the member eligible (default 2);
	// Fall consecutive failures make it ineligible (default 2).
	Rise int `json:"rise,omitempty"`
	Fall int `json:"fall,omitempty"`
}

// ElectionConfig tunes memberlist.
type ElectionConfig struct {
	// BindAddress default: this node's member address.
	BindAddress string `json:"bindAddress,omitempty"`
	// Port for gossip, UDP and TCP. Default 7946.
	Port int `json:"port,omitempty"`
	// ProbeInterval (default 100ms), ProbeTimeout (default 50ms),
	// SuspicionMult (default 2) and GossipInterval (default 20ms) set how
	// fast a dead member is detected: about ProbeInterval + SuspicionMult x
	// ProbeInterval.
	ProbeInterval  Duration `json:"probeInterval,omitempty"`
	ProbeTimeout   Duration `json:"probeTimeout,omitempty"`
	SuspicionMult  int      `json:"suspicionMult,omitempty"`
	GossipInterval Duration `json:"gossipInterval,omitempty"`
	// Settle: after gaining quorum (start, healed partition) a member waits
	// this long for the group's state before it may claim. Default 500ms.
	Settle Duration `json:"settle,omitempty"`
	// RejoinInterval between attempts to join members that are down. Default 1s.
	RejoinInterval Duration `json:"rejoinInterval,omitempty"`
	// ContactTimeout: an owner that has had no direct answer from a majority
	// for this long releases the VIPs, even while gossip still lists the
	// others alive (a link slower than probeTimeout makes that view flap
	// rather than settle). Default 500ms; at least 2 x probeInterval.
	ContactTimeout Duration `json:"contactTimeout,omitempty"`
	// SecretKeyFile holds a 16, 24 or 32 byte key (raw or base64) that
	// encrypts gossip. Optional.
	SecretKeyFile string `json:"secretKeyFile,omitempty"`
}

// QuiesceConfig tunes the make-before-break hand-over.
type QuiesceConfig struct {
	// Drain: a quiescing owner keeps the VIP this long after its successor
	// announced it, so that neighbours' caches move before it lets go.
	// Default 500ms.
	Drain Duration `json:"drain,omitempty"`
	// HandoverTimeout: on exit, stop waiting for a successor after this long
	// and release anyway. Default 5s.
	HandoverTimeout Duration `json:"handoverTimeout,omitempty"`
}

// AdminConfig is the local HTTP listener (/metrics, /healthz, /status,
// /quiesce). It has no authentication: keep it on loopback.
type AdminConfig struct {
	// Listen default 127.0.0.1:7473; "0" disables it.
	Listen string `json:"listen,omitempty"`
}

// ARPConfig tunes the announcements.
type ARPConfig struct {
	// BurstCount announcements (default 5) follow the first, BurstInterval
	// apart (default 200ms); then one every RefreshInterval (default 10s).
	BurstCount      int      `json:"burstCount,omitempty"`
	BurstInterval   Duration `json:"burstInterval,omitempty"`
	RefreshInterval Duration `json:"refreshInterval,omitempty"`
	// ProbeInterval between duplicate-owner probes while holding. Default 1s.
	ProbeInterval Duration `json:"probeInterval,omitempty"`
}

// Duration is a time.Duration written as "200ms" in YAML.
type Duration struct{ time.Duration }

// UnmarshalJSON accepts a Go duration string.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("want a duration such as \"200ms\": %w", err)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("want a duration such as \"200ms\": %w", err)
	}
	d.Duration = v
	return nil
}

// MarshalJSON writes the Go duration string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(d.String()) }

// Load reads, parses and validates the file at path.
func Load(path string) (*Config, error) {
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
func Parse(data []byte) (*Config, error) {
	var c Config
	if err := yaml.UnmarshalStrict(data, &c); err != nil {
		return nil, fmt.Errorf("parse: %w", err)
	}
	c.Default()
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return &c, nil
}

// Default fills in zero values.
func (c *Config) Default() {
	if c.NodeName == "" {
		c.NodeName, _ = os.Hostname()
	}
	if c.Mode == "" {
		c.Mode = ModeARP
	}
	if c.Port == 0 {
		c.Port = 6443
	}
	h := &c.Health
	if h.URL == "" {
		h.URL = "https://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(c.Port)) + "/readyz"
	}
	def(&h.Interval, 200*time.Millisecond)
	def(&h.Timeout, time.Second)
	defInt(&h.Rise, 2)
	defInt(&h.Fall, 2)
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
	if c.Admin.Listen == "" {
		c.Admin.Listen = "127.0.0.1:7473"
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
func (c *Config) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: "+format, append([]any{field}, args...)...))
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
		case a.Zone() != "" || a.IsUnspecified() || a.IsMulticast() || a.IsLoopback() || a.IsLinkLocalUnicast():
			bad(fmt.Sprintf("vips[%d]", i), "%q cannot be a VIP; use a unicast address of the nodes' segment", v)
		case seenVIP[a.Unmap()]:
			bad(fmt.Sprintf("vips[%d]", i), "%q is listed twice", v)
		default:
			seenVIP[a.Unmap()] = true
		}
	}
	if c.Port < 1 || c.Port > 65535 {
		bad("port", "%d is out of range; use 1-65535", c.Port)
	}
	if len(c.Members) == 0 && c.Mode != ModeBGP {
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
	if c.NodeName != "" && len(c.Members) > 0 && !names[c.NodeName] {
		bad("nodeName", "%q is not among members; add it or set nodeName to one of them", c.NodeName)
	}
	h := c.Health
	if u, err := url.Parse(h.URL); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		bad("health.url", "%q is not an http(s) URL", h.URL)
	} else if u.Scheme == "https" && h.CAFile == "" && !h.InsecureSkipVerify {
		bad("health.caFile", "is empty; give the API server's CA (e.g. /etc/kubernetes/pki/ca.crt) or set health.insecureSkipVerify: true")
	}
	if h.CAFile != "" && h.InsecureSkipVerify {
		bad("health.insecureSkipVerify", "is set together with health.caFile; choose one")
	}
	positive(bad, "health.interval", h.Interval)
	positive(bad, "health.timeout", h.Timeout)
	atLeast1(bad, "health.rise", h.Rise)
	atLeast1(bad, "health.fall", h.Fall)
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
	}
	positive(bad, "quiesce.drain", c.Quiesce.Drain)
	positive(bad, "quiesce.handoverTimeout", c.Quiesce.HandoverTimeout)
	if l := c.Admin.Listen; l != "0" {
		if _, _, err := net.SplitHostPort(l); err != nil {
			bad("admin.listen", "%q is not host:port (or \"0\" to disable)", l)
		}
	}
	if c.ARP.BurstCount < 0 {
		bad("arp.burstCount", "%d is negative", c.ARP.BurstCount)
	}
	positive(bad, "arp.burstInterval", c.ARP.BurstInterval)
	positive(bad, "arp.refreshInterval", c.ARP.RefreshInterval)
	positive(bad, "arp.probeInterval", c.ARP.ProbeInterval)
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
func (c *Config) ParsedVIPs() []netip.Addr {
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
func (c *Config) Digest() string {
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
func (c *Config) bgpVIPFamilies() error {
	var vips []netip.Addr
	for _, v := range c.VIPs {
		if a, err := netip.ParseAddr(v); err == nil {
			vips = append(vips, a)
		}
	}
	return c.BGP.ValidateVIPs(vips)
}
