package v1alpha1

import (
	"time"
)

// WireGuardBackend serves the endpoint on gateways that pass each TCP connection (TLS untouched)
// through userspace WireGuard tunnels to healthy members; members dial out to every gateway, so
// they may sit behind NAT. The controller keeps the join token, the members' bootstrap Secret
// (<clusterName>-caplb-agent) and the gateways' configuration Secret
// (<clusterName>-caplb-gateway); the gateways report back in ConfigMaps. See
// docs/backends/wireguard.md.
// +kubebuilder:validation:XValidation:rule="self.gateways.all(g, self.gateways.exists_one(h, h.address == g.address && h.port == g.port))",message="spec.backend.wireguard.gateways[]: address and port must be unique: each gateway process has its own UDP port"
// +kubebuilder:validation:XValidation:rule="has(self.tunnel) == has(oldSelf.tunnel) && (!has(self.tunnel) || self.tunnel == oldSelf.tunnel)",message="spec.backend.wireguard.tunnel cannot change: running members derive their tunnel addresses from it; create a new LoadBalancer instead"
type WireGuardBackend struct {
	// gateways serve the endpoint; every member dials out to each of them. Two or more for high
	// availability, each its own host (or its own port on a shared host) with its own key.
	// +required
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=8
	Gateways []WireGuardGateway `json:"gateways"`

	// tunnel sets the tunnel's address family. Immutable.
	// +optional
	// +kubebuilder:default={family: IPv6}
	Tunnel WireGuardTunnel `json:"tunnel,omitzero"`

	// health decides which members the gateways send connections to: each member's /readyz,
	// fetched through the tunnel and verified with the Cluster's CA (<clusterName>-ca).
	// +optional
	Health WireGuardHealth `json:"health,omitzero"`

	// persistentKeepalive members send to every gateway: it holds NAT mappings and re-creates a
	// flushed one within this interval. Whole seconds, written like 5s. Default 1s.
	// +optional
	// +kubebuilder:validation:XValidation:rule="self.matches('^[0-9]{1,5}s$') && duration(self) >= duration('1s') && duration(self) <= duration('65535s')",message="spec.backend.wireguard.persistentKeepalive must be whole seconds between 1s and 65535s, written like 5s (WireGuard counts seconds); 1s is the default"
	PersistentKeepalive *Duration `json:"persistentKeepalive,omitempty"`

	// device carries the tunnel's TCP connections on members and gateways. netstack (default):
	// userspace TCP inside the process; no TUN, no host route, no capability. tun: a TUN
	// interface (caplb-wg0 on members, caplb-gw0 on gateways) holding the tunnel address, with
	// a route for the tunnel prefix, so the hosts' own TCP stacks carry the connections and no
	// proxy sits on the member: about 0.6 ms less on every new connection (docs/benchmarks.md).
	// tun needs CAP_NET_ADMIN and /dev/net/tun (the member's static pod gets both), a tunnel
	// prefix no node network overlaps, and an API server listening on all addresses on
	// targetPort (kubeadm's default); only TCP to that port enters a member from the tunnel.
	// It applies to members bootstrapped, and gateways restarted, after a change.
	// +optional
	// +kubebuilder:validation:Enum=netstack;tun
	Device string `json:"device,omitempty"`

	// agent configures the member's static pod in the bootstrap Secret.
	// +optional
	Agent WireGuardAgent `json:"agent,omitzero"`
}

// Tunnel devices (spec.backend.wireguard.device).
const (
	WireGuardDeviceNetstack = "netstack"
	WireGuardDeviceTUN      = "tun"
)

// WireGuardGateway is one gateway process as the members reach it.
type WireGuardGateway struct {
	// name of the gateway: its reports are read from the ConfigMap
	// <clusterName>-caplb-gateway-<name> and its configuration is the key gateway-<name>.yaml of
	// the Secret <clusterName>-caplb-gateway.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')",message="spec.backend.wireguard.gateways[].name must be a DNS label: lower-case letters, digits and '-', e.g. gw-1"
	Name string `json:"name"`

	// address members dial (an IP address or DNS name; after NAT, the gateway's public address).
	// With one gateway and spec.endpoint.host empty it is also the published endpoint's host.
	// +required
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="isIP(self) || self.matches('^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?(\\\\.[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)*$')",message="spec.backend.wireguard.gateways[].address must be an IP address (203.0.113.10) or a lower-case DNS name (gw-1.example.com), without port"
	Address string `json:"address"`

	// port is the gateway's WireGuard UDP port for this cluster; the gateway also takes TCP
	// port+1 for registration and TCP 127.0.0.1:port for its admin listener. Clusters sharing a
	// gateway host need ports at least 2 apart. Default 51820.
	// +optional
	// +kubebuilder:default=51820
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65534
	Port int32 `json:"port,omitempty"`

	// publicKey pins the gateway's WireGuard public key (base64, as `wg pubkey` prints it):
	// members then refuse a gateway answering with another key. Leave it empty to trust the key
	// the gateway proves with the join token at registration.
	// +optional
	// +kubebuilder:validation:MaxLength=44
	// +kubebuilder:validation:XValidation:rule="self.matches('^[A-Za-z0-9+/]{43}=$')",message="spec.backend.wireguard.gateways[].publicKey must be a WireGuard public key: 44 characters of base64 ending in '=' (wg pubkey < private.key)"
	PublicKey string `json:"publicKey,omitempty"`
}

// Tunnel address families.
const (
	FamilyIPv6 = "IPv6"
	FamilyIPv4 = "IPv4"
)

// Default tunnel prefixes per family. The tunnel lives inside each gateway and member process
// (userspace netstack): it never touches a host's routes, so every cluster can use the same one.
const (
	DefaultWireGuardPrefixIPv6 = "fd63:6c62:7767::/64"
	DefaultWireGuardPrefixIPv4 = "10.231.0.0/16"
)

// WireGuardTunnel is the tunnel's address plan. Every address is the prefix with host bits
// derived from a public key: nothing is allocated.
// +kubebuilder:validation:XValidation:rule="!has(self.prefix) || size(self.prefix) == 0 || (isCIDR(self.prefix) && cidr(self.prefix) == cidr(self.prefix).masked())",message="spec.backend.wireguard.tunnel.prefix must be a network prefix without host bits, e.g. fd63:6c62:7767::/64 or 10.231.0.0/16"
// +kubebuilder:validation:XValidation:rule="!has(self.prefix) || size(self.prefix) == 0 || !isCIDR(self.prefix) || (self.family == 'IPv4' ? (cidr(self.prefix).ip().family() == 4 && cidr(self.prefix).prefixLength() >= 8 && cidr(self.prefix).prefixLength() <= 24) : (cidr(self.prefix).ip().family() == 6 && cidr(self.prefix).prefixLength() >= 48 && cidr(self.prefix).prefixLength() <= 112))",message="spec.backend.wireguard.tunnel.prefix must match tunnel.family: an IPv6 prefix of /48 to /112, or an IPv4 prefix of /8 to /24 (room for addresses derived from keys)"
type WireGuardTunnel struct {
	// family of the tunnel addresses: IPv6 (default, fd63:6c62:7767::/64) or IPv4
	// (10.231.0.0/16). Either works over any underlay: the family is the tunnel's inside.
	// +optional
	// +kubebuilder:validation:Enum=IPv6;IPv4
	// +kubebuilder:default=IPv6
	Family string `json:"family,omitempty"`

	// prefix overrides the family's default tunnel network.
	// +optional
	// +kubebuilder:validation:MaxLength=43
	Prefix string `json:"prefix,omitempty"`
}

// WireGuardHealth configures the gateways' checks of each member's /readyz through the tunnel.
// Zero values take the defaults.
type WireGuardHealth struct {
	// serverName the member's API server certificate is verified against. Default "kubernetes"
	// (kubeadm, k3s and RKE2 certificates carry it; none carries a tunnel address).
	// +optional
	// +kubebuilder:validation:MaxLength=253
	ServerName string `json:"serverName,omitempty"`

	// interval between two checks of one member. Default 250ms.
	// +optional
	// +kubebuilder:validation:XValidation:rule="!self.matches('^(0|([0-9]{1,5}([.][0-9]{1,9})?(ns|us|µs|ms|s|m|h)){1,4})$') || (duration(self) >= duration('50ms') && duration(self) <= duration('1m'))",message="spec.backend.wireguard.health.interval must be between 50ms and 1m"
	Interval *Duration `json:"interval,omitempty"`

	// timeout of one check. Default 1s.
	// +optional
	// +kubebuilder:validation:XValidation:rule="!self.matches('^(0|([0-9]{1,5}([.][0-9]{1,9})?(ns|us|µs|ms|s|m|h)){1,4})$') || (duration(self) >= duration('50ms') && duration(self) <= duration('1m'))",message="spec.backend.wireguard.health.timeout must be between 50ms and 1m"
	Timeout *Duration `json:"timeout,omitempty"`

	// rise: consecutive passes that put a member into rotation. Default 2.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10
	Rise int32 `json:"rise,omitempty"`

	// fall: consecutive failures that take it out. Default 3.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10
	Fall int32 `json:"fall,omitempty"`
}

// WireGuardAgent configures the member's static pod. The member reads no node path a flavor
// would change (no kubeconfig, no CA): the bootstrap config names the static pod directory.
type WireGuardAgent struct {
	// image of the member's static pod. Default: the manager's --agent-image.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	Image string `json:"image,omitempty"`
}

// DefaultWireGuardGatewayPort is a gateway's WireGuard UDP port when none is given.
const DefaultWireGuardGatewayPort int32 = 51820

// EffectivePort returns the gateway's WireGuard port or its default.
func (g WireGuardGateway) EffectivePort() int32 {
	if g.Port != 0 {
		return g.Port
	}
	return DefaultWireGuardGatewayPort
}

// EffectiveFamily returns the tunnel family, IPv6 by default.
func (t WireGuardTunnel) EffectiveFamily() string {
	if t.Family == "" {
		return FamilyIPv6
	}
	return t.Family
}

// EffectivePrefix returns the tunnel prefix: the override, else the family's default.
func (t WireGuardTunnel) EffectivePrefix() string {
	switch {
	case t.Prefix != "":
		return t.Prefix
	case t.EffectiveFamily() == FamilyIPv4:
		return DefaultWireGuardPrefixIPv4
	}
	return DefaultWireGuardPrefixIPv6
}

// EffectivePersistentKeepalive returns the members' keepalive, 1s by default.
func (w *WireGuardBackend) EffectivePersistentKeepalive() time.Duration {
	if w.PersistentKeepalive != nil && w.PersistentKeepalive.Duration > 0 {
		return w.PersistentKeepalive.Duration
	}
	return time.Second
}
