package v1alpha1

import (
	"encoding/json"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Health check types (HealthConfig.Type).
const (
	HealthHTTPS = "https"
	HealthHTTP  = "http"
	HealthTCP   = "tcp"
)

// Modes of the agent.
const (
	ModeARP = "arp"
	ModeBGP = "bgp"
)

// AgentConfiguration is the node agent's configuration file (YAML, kind AgentConfiguration). The
// manager renders it (into the bootstrap Secret of a LoadBalancer with an arp or bgp backend) and
// the agent parses it, both with this type, Default and Validate. Zero values take the defaults
// documented on each field and in config/agent/agent.yaml.
type AgentConfiguration struct {
	metav1.TypeMeta `json:",inline"`

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
	// ExtraPorts are ports the VIPs serve beyond port, where a control plane
	// needs them (RKE2 registers nodes on 9345). The hand-over redirect covers
	// them too.
	ExtraPorts []int `json:"extraPorts,omitempty"`
	// Members are the control-plane nodes in preference order (the first
	// eligible one owns the VIP when nobody holds it). Every agent must list
	// the same members in the same order. With membership.dynamic this is the
	// list as of membership.version, and may be empty (bootstrap).
	Members []MemberConfig `json:"members"`
	// Membership says whether the member list is fixed (standalone, the
	// default) or managed by the caplb manager (dynamic, versioned).
	Membership MembershipConfig `json:"membership,omitempty"`
	// NodeAPI lets the agent read its own Node (membership, quiesce requests,
	// the disabled annotation) and report its state on it, with the kubelet's
	// credential.
	// Optional: without it the agent runs from files and gossip alone.
	NodeAPI NodeAPIConfig `json:"nodeAPI,omitempty"`
	Health  HealthConfig  `json:"health,omitempty"`
	// Election: memberlist timers and addresses (arp and bgp modes; in bgp
	// mode only eligibility is gossiped).
	Election ElectionConfig `json:"election,omitempty"`
	Quiesce  QuiesceConfig  `json:"quiesce,omitempty"`
	Admin    AdminConfig    `json:"admin,omitempty"`
	ARP      ARPConfig      `json:"arp,omitempty"`
	// BGP configures the speaker in bgp mode.
	BGP *BGPConfig `json:"bgp,omitempty"`
	// LoadBalancer names what this agent serves, for its caplb_agent_info metric (a scrape of
	// many clusters' agents can then be grouped per LoadBalancer). The manager renders it;
	// optional, and it changes nothing the agent does.
	LoadBalancer LoadBalancerIdentity `json:"loadBalancer,omitzero"`
}

// LoadBalancerIdentity names a LoadBalancer and the Cluster it fronts.
type LoadBalancerIdentity struct {
	// Namespace and Name of the LoadBalancer.
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name,omitempty"`
	// Cluster is its spec.clusterName ("" standalone).
	Cluster string `json:"cluster,omitempty"`
}

// MemberConfig is one control-plane node.
type MemberConfig struct {
	Name string `json:"name"`
	// Address is the node's own IP on the VIP segment; gossip goes there.
	Address string `json:"address"`
}

// HealthConfig is the local check that makes a member eligible: by default the
// local API server's /readyz; for members that serve something else (an ingress
// controller on worker nodes) a plain HTTP GET or a TCP connect.
type HealthConfig struct {
	// Type of the check: "https" (GET url over TLS, healthy on 200), "http"
	// (plain GET of url, healthy on any 2xx) or "tcp" (healthy when a TCP
	// connection to address opens within timeout). Default "http" when url is
	// an http:// URL (what such a URL always did), otherwise "https".
	Type string `json:"type,omitempty"`
	// URL (https and http) default https://127.0.0.1:<port>/readyz for https,
	// http://127.0.0.1:<port>/healthz for http.
	URL string `json:"url,omitempty"`
	// Address (tcp only) is host:port to connect to. Default 127.0.0.1:<port>.
	Address string `json:"address,omitempty"`
	// CAFile verifies the server certificate (e.g. /etc/kubernetes/pki/ca.crt).
	// https only, as are serverName and insecureSkipVerify.
	CAFile string `json:"caFile,omitempty"`
	// ServerName is the name the server certificate is verified against.
	// Default "kubernetes" when the URL's host is an IP address (kubeadm, k3s
	// and RKE2 serving certificates carry it; none carries 127.0.0.1),
	// otherwise the URL's host.
	ServerName string `json:"serverName,omitempty"`
	// InsecureSkipVerify must be set explicitly when no CAFile is given.
	InsecureSkipVerify bool `json:"insecureSkipVerify,omitempty"`
	// Interval between checks (default 200ms) and Timeout of one (default 1s).
	Interval Duration `json:"interval,omitzero"`
	Timeout  Duration `json:"timeout,omitzero"`
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
	ProbeInterval  Duration `json:"probeInterval,omitzero"`
	ProbeTimeout   Duration `json:"probeTimeout,omitzero"`
	SuspicionMult  int      `json:"suspicionMult,omitempty"`
	GossipInterval Duration `json:"gossipInterval,omitzero"`
	// Settle: after gaining quorum (start, healed partition) a member waits
	// this long for the group's state before it may claim. Default 500ms.
	Settle Duration `json:"settle,omitzero"`
	// RejoinInterval between attempts to join members that are down. Default 1s.
	RejoinInterval Duration `json:"rejoinInterval,omitzero"`
	// ContactTimeout: an owner that has had no direct answer from a majority
	// for this long releases the VIPs, even while gossip still lists the
	// others alive (a link slower than probeTimeout makes that view flap
	// rather than settle). Default 500ms; at least 2 x probeInterval.
	ContactTimeout Duration `json:"contactTimeout,omitzero"`
	// SecretKeyFile holds a 16, 24 or 32 byte key (raw or base64) that
	// encrypts and authenticates gossip; the primary key of the keyring. The
	// file must not be readable by group or others.
	SecretKeyFile string `json:"secretKeyFile,omitempty"`
	// SecondaryKeyFiles are further keys accepted on receive (not used to
	// send), so that a key can be rotated without losing the VIP: add the new
	// key as secondary everywhere, make it primary everywhere, then drop the
	// old one.
	SecondaryKeyFiles []string `json:"secondaryKeyFiles,omitempty"`
	// Insecure runs gossip without a key: anyone who reaches the gossip port
	// can then move the VIP. Only for labs; must be set explicitly.
	Insecure bool `json:"insecure,omitempty"`
	// Label is a memberlist label that keeps the gossip of different
	// LoadBalancers on one segment apart (the manager sets it to the
	// LoadBalancer's namespace/name). Optional, at most 255 bytes.
	Label string `json:"label,omitempty"`
	// FailOpen keeps the VIP on the current owner while no member is
	// eligible (every API server failing at once is etcd losing quorum; the
	// VIP stays so that recovery tools reach an endpoint). A minority
	// partition releases regardless. Default true.
	FailOpen *bool `json:"failOpen,omitempty"`
}

// QuiesceConfig tunes the make-before-break hand-over.
type QuiesceConfig struct {
	// Drain: a quiescing owner keeps the VIP this long after its successor
	// announced it, so that neighbours' caches move before it lets go.
	// Default 500ms; "0s" written in the file releases at once.
	Drain Duration `json:"drain,omitzero"`
	// BusyDrain (ARP mode): after Drain, a quiescing owner keeps the VIP,
	// quiet, for up to this much longer while connections to it still carry
	// requests, and releases as soon as none does. An HTTP/2 API server with
	// --goaway-chance moves a busy client with a GOAWAY, whose unanswered
	// requests client-go resends on a new connection (to the successor); a
	// reset of a busy connection instead fails the write in flight, which
	// client-go does not resend. Default 0: off (release after Drain). Not
	// with arp.loadBalancing spread: its connections are not on the VIP's
	// sockets, so none would count.
	BusyDrain Duration `json:"busyDrain,omitzero"`
	// HandoverTimeout: on exit, stop waiting for a successor after this long
	// and release anyway. Default 5s.
	HandoverTimeout Duration `json:"handoverTimeout,omitzero"`
}

// AdminConfig: the read-only HTTP listener (/metrics, /healthz, /status),
// safe to expose for scraping, and the control socket (POST/DELETE
// /quiesce, and the read-only endpoints), a unix socket only root can use.
type AdminConfig struct {
	// Listen default 127.0.0.1:7473; "0" disables it. The host "node-address"
	// (NodeAddressHost, e.g. node-address:7473) binds this node's own address,
	// found when the agent starts: its entry in members, else
	// election.bindAddress, else the source address of the route to the first
	// VIP (bgp: the first peer). One file then serves every member, as the
	// manager renders it.
	Listen string `json:"listen,omitempty"`
	// ControlSocket is the path of the control socket (mode 0600). Default
	// /run/caplb/agent.sock; "0" disables it.
	ControlSocket string `json:"controlSocket,omitempty"`
}

// NodeAddressHost in admin.listen stands for this node's own address.
const NodeAddressHost = "node-address"

// ARPConfig tunes the announcements.
type ARPConfig struct {
	// BurstCount announcements (default 5; 0 written in the file: none)
	// follow the first, BurstInterval apart (default 200ms); then one every
	// RefreshInterval (default 10s).
	BurstCount      int      `json:"burstCount,omitempty"`
	BurstInterval   Duration `json:"burstInterval,omitzero"`
	RefreshInterval Duration `json:"refreshInterval,omitzero"`
	// ProbeInterval between duplicate-owner probes while holding. Default 1s.
	ProbeInterval Duration `json:"probeInterval,omitzero"`
	// LoadBalancing is "single" (default: the VIP holder serves every connection) or "spread":
	// the holder forwards new TCP connections to port and extraPorts across every eligible
	// member, itself included (nftables DNAT, SNAT to its own address; needs
	// net.ipv4.ip_forward=1, as kubeadm's preflight does). Only VIPs of the members' address
	// family are spread.
	LoadBalancing string `json:"loadBalancing,omitempty"`
	// ClaimWhenSilent: while no member of this membership holds or last held the VIP, a claim
	// first probes it (RFC 5227: ARP requests from 0.0.0.0, 3 × 100 ms, then 200 ms of
	// listening) and is made only if no other host answers; otherwise it waits and probes again.
	// Another speaker (kube-vip, during a takeover) keeps the VIP until it lets go, and two
	// speakers never answer for it at once. The manager sets it with
	// spec.backend.arp.takeOver.kubeVIP.
	ClaimWhenSilent bool `json:"claimWhenSilent,omitempty"`
}

// ARP load-balancing modes (ARPConfig.LoadBalancing).
const (
	LoadBalancingSingle = "single"
	LoadBalancingSpread = "spread"
)

// MembershipConfig says where the member list comes from.
type MembershipConfig struct {
	// Dynamic: the caplb manager manages the member list. members is the list
	// as of Version; a newer version learned from this node's Node object
	// (nodeAPI) or from a member's gossip replaces it, and is kept in
	// StateFile so that a restart never goes back to an older one. A node that
	// is not in the newest list it knows never claims the VIP. Empty members
	// at version 0 is the bootstrap state of a new cluster.
	Dynamic bool `json:"dynamic,omitempty"`
	// Version of members (dynamic only).
	Version int64 `json:"version,omitempty"`
	// StateFile keeps the newest membership learned (dynamic only). Default
	// /var/lib/caplb/membership.json.
	StateFile string `json:"stateFile,omitempty"`
}

// NodeAPIConfig is the agent's access to its own Node object.
type NodeAPIConfig struct {
	// Kubeconfig is the kubelet's kubeconfig (kubeadm:
	// /etc/kubernetes/kubelet.conf, k3s: /var/lib/rancher/k3s/agent/
	// kubelet.kubeconfig, RKE2: /var/lib/rancher/rke2/agent/
	// kubelet.kubeconfig). The file may appear only after bootstrap (kubeadm
	// init writes it late): the agent waits for it and works without it
	// meanwhile. Empty: no Node API.
	Kubeconfig string `json:"kubeconfig,omitempty"`
	// NodeName is the name of this node's Node object. Default: nodeName.
	NodeName string `json:"nodeName,omitempty"`
	// ResyncInterval bounds how stale the agent's view of its Node and its
	// status report may get when a watch event is missed. Default 10s.
	ResyncInterval Duration `json:"resyncInterval,omitzero"`
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

// New returns an empty configuration with apiVersion and kind set, for code that builds one.
func New() AgentConfiguration {
	return AgentConfiguration{TypeMeta: metav1.TypeMeta{APIVersion: APIVersion, Kind: Kind}}
}
