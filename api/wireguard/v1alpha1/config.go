package v1alpha1

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	agentv1 "github.com/caplb/caplb/api/agent/v1alpha1"

	"sigs.k8s.io/yaml"
)

// DefaultTunnelPrefix is the tunnel network when none is configured: a ULA /64 ("caplb-wg"),
// the same on gateways and members so that both derive the same addresses from a public key.
const DefaultTunnelPrefix = "fd63:6c62:7767::/64"

// GatewayConfig is `caplb gateway --config` (YAML, strict). Zero values take the defaults
// documented on each field and in config/wireguard/gateway.yaml.
type GatewayConfig struct {
	metav1.TypeMeta `json:",inline"`
	// Name of this gateway (logs, status). Default: the hostname.
	Name string `json:"name,omitempty"`
	// Listen is the published API endpoint, a TCP host:port passed through to the members.
	// Default ":6443".
	Listen string `json:"listen,omitempty"`
	// WireGuard is the gateway's tunnel end.
	WireGuard GatewayWireGuard `json:"wireguard,omitempty"`
	// Registration is where members register their public keys with the join token.
	Registration GatewayRegistration `json:"registration,omitempty"`
	// StateFile keeps the registered members (keys, tunnel addresses, last endpoints) so that a
	// restarted gateway serves at once from its last good state. Default
	// /var/lib/caplb/wireguard/gateway-state.json.
	StateFile string `json:"stateFile,omitempty"`
	// MemberPort is the port members serve the API on inside the tunnel. Default 6443.
	MemberPort int `json:"memberPort,omitempty"`
	// Health decides which members get traffic.
	Health GatewayHealth `json:"health,omitempty"`
	// DialTimeout for one connection attempt to a member through the tunnel; a failed attempt is
	// retried on another member. Default 1s.
	DialTimeout agentv1.Duration `json:"dialTimeout,omitempty"`
	// HedgeDelay: while a connection's dials are unanswered, every hedgeDelay one more member
	// joins the race (the first to connect wins). Default 200ms; at most dialTimeout.
	HedgeDelay agentv1.Duration `json:"hedgeDelay,omitempty"`
	// MaxProcs: how many threads run the gateway's Go code at once (GOMAXPROCS). Default 1: every
	// packet crosses several goroutines (splice, netstack, WireGuard's queues), and on one thread
	// each hand-off is a plain switch instead of a wake-up of another thread; measured, this cuts
	// the latency the gateway adds without lowering its throughput (docs/benchmarks.md). -1: one
	// per CPU (Go's default). The GOMAXPROCS environment variable, when set, wins.
	MaxProcs int `json:"maxProcs,omitempty"`
	// DrainTimeout: a quiesced or deregistered member's open connections are closed after this
	// long. Default 30s.
	DrainTimeout agentv1.Duration `json:"drainTimeout,omitempty"`
	// ForgetAfter: a registered member neither re-registering (members do every 10s) nor
	// handshaking for this long is removed (a node deleted without deregistering). Default 10m.
	ForgetAfter agentv1.Duration `json:"forgetAfter,omitempty"`
	// Peers are members known in advance (pre-shared keys instead of registration).
	Peers []StaticPeer `json:"peers,omitempty"`
	// Admin is the local HTTP listener (/status, /metrics, /healthz, quiesce). No
	// authentication: keep it on loopback. Default 127.0.0.1:7475; "0" disables it.
	Admin AdminConfig `json:"admin,omitempty"`
	// Metrics is a read-only HTTP listener (GET /metrics, /healthz) for Prometheus to reach from
	// off the host, without exposing admin's quiesce. No authentication. Unset: none (the admin
	// listener still serves /metrics on loopback).
	Metrics MetricsConfig `json:"metrics,omitempty"`
}

// MetricsConfig is the gateway's read-only metrics listener: host:port (":7477" for every
// address).
type MetricsConfig struct {
	Listen string `json:"listen,omitempty"`
}

// GatewayWireGuard configures the gateway's userspace WireGuard device.
type GatewayWireGuard struct {
	// ListenPort (UDP) members dial. Default 51820.
	ListenPort int `json:"listenPort,omitempty"`
	// PrivateKeyFile holds the gateway's key (base64); created with mode 0600 when missing.
	// Default /var/lib/caplb/wireguard/gateway.key.
	PrivateKeyFile string `json:"privateKeyFile,omitempty"`
	// TunnelPrefix is the tunnel network; every address in it is derived from a public key.
	// IPv6 (default fd63:6c62:7767::/64) or IPv4 (at least a /24). Same on every gateway and
	// member of a cluster.
	TunnelPrefix string `json:"tunnelPrefix,omitempty"`
	// MTU of the tunnel. Default 1420.
	MTU int `json:"mtu,omitempty"`
	// Device carries the tunnel's TCP connections: "netstack" (default: gVisor's TCP stack in
	// the process; no TUN, no host route) or "tun" (Linux: a TUN interface DeviceName with the
	// gateway's tunnel address and a route for the tunnel prefix, so the host's TCP stack dials
	// the members; about 0.1-0.2 ms less per connection. Needs CAP_NET_ADMIN and /dev/net/tun;
	// only replies to the gateway's own connections enter the host from the tunnel).
	Device string `json:"device,omitempty"`
	// DeviceName of the TUN interface (device tun), at most 15 bytes. Default caplb-gw0.
	DeviceName string `json:"deviceName,omitempty"`
}

// Tunnel devices (device, wireguard.device).
const (
	DeviceNetstack = "netstack"
	DeviceTUN      = "tun"
)

// GatewayRegistration is the members' registration endpoint (HTTP, HMAC-authenticated with the
// join token in both directions; see docs/backends/wireguard.md).
type GatewayRegistration struct {
	// Listen (TCP). Default ":51821"; "0" disables registration (static peers only).
	Listen string `json:"listen,omitempty"`
	// TokenFile holds the cluster's join token; it must not be readable by group or others.
	TokenFile string `json:"tokenFile,omitempty"`
}

// GatewayHealth is each member's /readyz, fetched through the tunnel.
type GatewayHealth struct {
	// Path default /readyz.
	Path string `json:"path,omitempty"`
	// ServerName the certificate is verified against. Default "kubernetes" (kubeadm, k3s and
	// RKE2 certificates carry it; none carries the tunnel address).
	ServerName string `json:"serverName,omitempty"`
	// CAFile is the cluster CA. Required unless InsecureSkipVerify.
	CAFile string `json:"caFile,omitempty"`
	// InsecureSkipVerify must be said explicitly when no CAFile is given.
	InsecureSkipVerify bool `json:"insecureSkipVerify,omitempty"`
	// Interval between checks (default 250ms) and Timeout of one (default 1s).
	Interval agentv1.Duration `json:"interval,omitempty"`
	Timeout  agentv1.Duration `json:"timeout,omitempty"`
	// Rise consecutive successes make a member healthy (default 2); Fall consecutive failures
	// make it unhealthy (default 3). A failed dial of a client connection counts as a fall at once.
	Rise int `json:"rise,omitempty"`
	Fall int `json:"fall,omitempty"`
}

// StaticPeer is a member configured in advance.
type StaticPeer struct {
	Name      string `json:"name"`
	PublicKey string `json:"publicKey"`
}

// AdminConfig is a local HTTP listener.
type AdminConfig struct {
	Listen string `json:"listen,omitempty"`
}

// MemberConfig is `caplb-agent wireguard --config` on a control-plane node (YAML, strict).
type MemberConfig struct {
	metav1.TypeMeta `json:",inline"`
	// NodeName identifies this member at the gateways. Default: the hostname.
	NodeName string `json:"nodeName,omitempty"`
	// PrivateKeyFile holds this node's key; generated on the node with mode 0600 when missing,
	// never sent anywhere. Default /var/lib/caplb/wireguard/member.key.
	PrivateKeyFile string `json:"privateKeyFile,omitempty"`
	// TokenFile holds the cluster's join token (mode 0600). Required unless every gateway has a
	// publicKey (pre-shared).
	TokenFile string `json:"tokenFile,omitempty"`
	// TunnelPrefix must equal the gateways'. Default fd63:6c62:7767::/64.
	TunnelPrefix string `json:"tunnelPrefix,omitempty"`
	// Gateways: this member dials out to every one of them.
	Gateways []MemberGateway `json:"gateways"`
	// PersistentKeepalive towards each gateway: it keeps NAT mappings alive and re-creates a
	// flushed one within this interval. Default 1s.
	PersistentKeepalive agentv1.Duration `json:"persistentKeepalive,omitempty"`
	// TunnelPort the member serves on inside the tunnel. Default 6443.
	TunnelPort int `json:"tunnelPort,omitempty"`
	// Upstream is the local API server tunnel connections are forwarded to. Default
	// 127.0.0.1:6443.
	Upstream string `json:"upstream,omitempty"`
	// RegisterInterval: the member registers again this often, so that a gateway that lost its
	// state learns it back. Default 10s.
	RegisterInterval agentv1.Duration `json:"registerInterval,omitempty"`
	// DrainTimeout: on key rotation or shutdown, how long the old tunnel stays up for the
	// connections the gateways are draining. Default 30s (the gateways' drainTimeout).
	DrainTimeout agentv1.Duration `json:"drainTimeout,omitempty"`
	// MTU of the tunnel. Default 1420.
	MTU int `json:"mtu,omitempty"`
	// Device carries the tunnel's connections: "netstack" (default: gVisor's TCP stack in the
	// process, which forwards each connection to Upstream; no TUN, no host route) or "tun"
	// (Linux: a TUN interface DeviceName holding the tunnel address and a route for the tunnel
	// prefix, so the gateways' connections reach the API server through the node's own TCP
	// stack with no proxy in between: about 0.5 ms less per fresh connection, measured. Then
	// the API server must listen on all addresses (kubeadm's default) on TunnelPort, which must
	// be Upstream's port; only TCP to the tunnel address and that port enters the node from the
	// tunnel. Needs CAP_NET_ADMIN and /dev/net/tun.)
	Device string `json:"device,omitempty"`
	// DeviceName of the TUN interface (device tun), at most 15 bytes. Default caplb-wg0.
	DeviceName string `json:"deviceName,omitempty"`
	// MaxProcs: GOMAXPROCS of the member process, as the gateway's maxProcs. Default 1; -1: one
	// per CPU. The GOMAXPROCS environment variable, when set, wins.
	MaxProcs int `json:"maxProcs,omitempty"`
	// Admin: local HTTP (/status, POST /rotate). Default 127.0.0.1:7476; "0" disables it.
	Admin AdminConfig `json:"admin,omitempty"`
}

// MemberGateway is one gateway as a member sees it.
type MemberGateway struct {
	// Endpoint is the gateway's WireGuard UDP host:port (public address).
	Endpoint string `json:"endpoint"`
	// Registration is the gateway's registration host:port. Default: the endpoint's host, port
	// 51821.
	Registration string `json:"registration,omitempty"`
	// PublicKey pins the gateway's key (base64). With it and no registration the gateway must
	// list this member among its peers; with registration it must match what the gateway says.
	PublicKey string `json:"publicKey,omitempty"`
}

// LoadGateway reads, parses, defaults and validates a gateway config file.
func LoadGateway(path string) (*GatewayConfig, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	c, err := ParseGateway(b)
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	return c, nil
}

// ParseGateway decodes strictly (unknown fields are errors), defaults and validates.
func ParseGateway(data []byte) (*GatewayConfig, error) {
	c, err := DecodeGateway(data)
	if err != nil {
		return nil, err
	}
	c.Default()
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return c, nil
}

// DecodeGateway decodes strictly and reads a file of an older release (no apiVersion, no kind)
// as this version, without defaulting or validating: for a caller that rewrites paths first
// (the gateway's Secret sync) and then calls Default and Validate itself.
func DecodeGateway(data []byte) (*GatewayConfig, error) {
	var c GatewayConfig
	if err := yaml.UnmarshalStrict(data, &c); err != nil {
		return nil, fmt.Errorf("parse: %w", err)
	}
	c.TypeMeta = versioned(c.TypeMeta, GatewayKind)
	return &c, nil
}

// LoadMember reads, parses, defaults and validates a member config file.
func LoadMember(path string) (*MemberConfig, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	c, err := ParseMember(b)
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	return c, nil
}

// ParseMember decodes strictly, defaults and validates.
func ParseMember(data []byte) (*MemberConfig, error) {
	var c MemberConfig
	if err := yaml.UnmarshalStrict(data, &c); err != nil {
		return nil, fmt.Errorf("parse: %w", err)
	}
	c.TypeMeta = versioned(c.TypeMeta, MemberKind)
	c.Default()
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return &c, nil
}

// Default fills in zero values.
func (c *GatewayConfig) Default() {
	if c.Name == "" {
		c.Name, _ = os.Hostname()
	}
	defStr(&c.Listen, ":6443")
	w := &c.WireGuard
	defInt(&w.ListenPort, 51820)
	defStr(&w.PrivateKeyFile, "/var/lib/caplb/wireguard/gateway.key")
	defStr(&w.TunnelPrefix, DefaultTunnelPrefix)
	defInt(&w.MTU, 1420)
	defStr(&w.Device, DeviceNetstack)
	if w.Device == DeviceTUN {
		defStr(&w.DeviceName, "caplb-gw0")
	}
	defStr(&c.Registration.Listen, ":51821")
	defStr(&c.StateFile, "/var/lib/caplb/wireguard/gateway-state.json")
	defInt(&c.MemberPort, 6443)
	h := &c.Health
	defStr(&h.Path, "/readyz")
	defStr(&h.ServerName, "kubernetes")
	def(&h.Interval, 250*time.Millisecond)
	def(&h.Timeout, time.Second)
	defInt(&h.Rise, 2)
	defInt(&h.Fall, 3)
	def(&c.DialTimeout, time.Second)
	def(&c.HedgeDelay, 200*time.Millisecond)
	defInt(&c.MaxProcs, 1)
	def(&c.DrainTimeout, 30*time.Second)
	def(&c.ForgetAfter, 10*time.Minute)
	defStr(&c.Admin.Listen, "127.0.0.1:7475")
}

// Default fills in zero values.
func (c *MemberConfig) Default() {
	if c.NodeName == "" {
		c.NodeName, _ = os.Hostname()
	}
	defStr(&c.PrivateKeyFile, "/var/lib/caplb/wireguard/member.key")
	defStr(&c.TunnelPrefix, DefaultTunnelPrefix)
	def(&c.PersistentKeepalive, time.Second)
	defInt(&c.TunnelPort, 6443)
	defStr(&c.Upstream, "127.0.0.1:6443")
	def(&c.RegisterInterval, 10*time.Second)
	def(&c.DrainTimeout, 30*time.Second)
	defInt(&c.MTU, 1420)
	defStr(&c.Device, DeviceNetstack)
	if c.Device == DeviceTUN {
		defStr(&c.DeviceName, "caplb-wg0")
	}
	defInt(&c.MaxProcs, 1)
	defStr(&c.Admin.Listen, "127.0.0.1:7476")
	for i := range c.Gateways {
		g := &c.Gateways[i]
		if g.Registration == "" && g.Endpoint != "" {
			if host, _, err := net.SplitHostPort(g.Endpoint); err == nil {
				g.Registration = net.JoinHostPort(host, "51821")
			}
		}
	}
}

func defInt(i *int, v int) {
	if *i == 0 {
		*i = v
	}
}

func defStr(s *string, v string) {
	if *s == "" {
		*s = v
	}
}

// ParseTunnelPrefix accepts an IPv6 prefix of /48 to /112 or an IPv4 prefix of /8 to /24: room
// enough that addresses hashed from keys rarely collide (a collision is refused at registration).
func ParseTunnelPrefix(s string) (netip.Prefix, error) {
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return p, fmt.Errorf("%q is not a prefix such as %s", s, DefaultTunnelPrefix)
	}
	if p != p.Masked() {
		return p, fmt.Errorf("%q has host bits set; use %s", s, p.Masked())
	}
	switch {
	case p.Addr().Is4() && (p.Bits() < 8 || p.Bits() > 24):
		return p, fmt.Errorf("%q: an IPv4 tunnel prefix must be /8 to /24", s)
	case p.Addr().Is6() && (p.Bits() < 48 || p.Bits() > 112):
		return p, fmt.Errorf("%q: an IPv6 tunnel prefix must be /48 to /112", s)
	}
	return p, nil
}

// NewGateway returns an empty gateway configuration with apiVersion and kind set, for code that
// builds one.
func NewGateway() GatewayConfig {
	return GatewayConfig{TypeMeta: metav1.TypeMeta{APIVersion: APIVersion, Kind: GatewayKind}}
}

// NewMember returns an empty member configuration with apiVersion and kind set.
func NewMember() MemberConfig {
	return MemberConfig{TypeMeta: metav1.TypeMeta{APIVersion: APIVersion, Kind: MemberKind}}
}

// versioned reads a file with neither apiVersion nor kind (written by caplb v0.1, before the
// schema was versioned) as this version of kind; anything else is left for Validate to check.
func versioned(tm metav1.TypeMeta, kind string) metav1.TypeMeta {
	if tm.APIVersion == "" && tm.Kind == "" {
		return metav1.TypeMeta{APIVersion: APIVersion, Kind: kind}
	}
	return tm
}
