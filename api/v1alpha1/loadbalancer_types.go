package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// LoadBalancerFinalizer is held by every LoadBalancer until it has released the hooks and
// annotations it placed on its members and freed its backend's resources.
const LoadBalancerFinalizer = "loadbalancer.cluster.x-k8s.io/finalizer"

// LoadBalancerSpec selects the members of a control-plane load balancer and picks its backend.
// Immutability is checked at this level, not on the optional fields themselves: the API server
// skips a field's transition rule when the update removes the field, so a rule there would let
// "remove spec.endpoint" move a published endpoint.
// +kubebuilder:validation:XValidation:rule="has(oldSelf.clusterName) == has(self.clusterName) && (!has(self.clusterName) || self.clusterName == oldSelf.clusterName)",message="spec.clusterName is immutable (removing it is a change too): create a new LoadBalancer for another Cluster"
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.endpoint) || !has(oldSelf.endpoint.host) || size(oldSelf.endpoint.host) == 0 || (has(self.endpoint) && has(self.endpoint.host) && self.endpoint.host == oldSelf.endpoint.host)",message="spec.endpoint.host cannot change once set (removing it is a change too): it is baked into certificates and kubeconfigs; create a new LoadBalancer instead"
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.endpoint) || !has(oldSelf.endpoint.port) || oldSelf.endpoint.port == 0 || (has(self.endpoint) && has(self.endpoint.port) && self.endpoint.port == oldSelf.endpoint.port)",message="spec.endpoint.port cannot change once set (removing it is a change too): it is baked into kubeconfigs; create a new LoadBalancer instead"
// +kubebuilder:validation:XValidation:rule="self.targetKind.kind != 'Machine' || (has(self.clusterName) && size(self.clusterName) > 0)",message="spec.clusterName is required when spec.targetKind.kind is Machine: set it to the name of the Cluster whose control plane this LoadBalancer fronts"
// +kubebuilder:validation:XValidation:rule="!has(self.backend.arp) || (has(self.backend.arp.addressFrom) != (has(self.endpoint) && has(self.endpoint.host) && size(self.endpoint.host) > 0))",message="spec.backend.arp needs exactly one VIP source: set spec.endpoint.host to an IP address, or spec.backend.arp.addressFrom.poolRef to an IPAM pool (not both)"
// +kubebuilder:validation:XValidation:rule="!has(self.backend.bgp) || (has(self.backend.bgp.addressFrom) != (has(self.endpoint) && has(self.endpoint.host) && size(self.endpoint.host) > 0))",message="spec.backend.bgp needs exactly one VIP source: set spec.endpoint.host to an IP address, or spec.backend.bgp.addressFrom.poolRef to an IPAM pool (not both)"
// +kubebuilder:validation:XValidation:rule="!(has(self.backend.arp) || has(self.backend.bgp)) || !has(self.endpoint) || !has(self.endpoint.host) || size(self.endpoint.host) == 0 || isIP(self.endpoint.host)",message="spec.endpoint.host must be an IP address for the arp and bgp backends (it is the VIP); use spec.backend.static for a DNS name"
// +kubebuilder:validation:XValidation:rule="!has(self.backend.arp) || !has(self.backend.arp.takeOver) || (has(self.endpoint) && has(self.endpoint.host) && isIP(self.endpoint.host))",message="spec.endpoint.host must be set to the VIP with spec.backend.arp.takeOver: the address taken over is the Cluster's existing endpoint; set spec.endpoint.host to that IP address (the host of the Cluster's spec.controlPlaneEndpoint)"
// +kubebuilder:validation:XValidation:rule="!has(self.backend.arp) || !has(self.backend.arp.takeOver) || (has(self.clusterName) && size(self.clusterName) > 0)",message="spec.clusterName is required with spec.backend.arp.takeOver: the VIP manager's Pods are read in that Cluster's workload cluster; set it to the Cluster whose endpoint is taken over"
// +kubebuilder:validation:XValidation:rule="!has(self.backend.bgp) || !has(self.backend.bgp.takeOver) || (has(self.endpoint) && has(self.endpoint.host) && isIP(self.endpoint.host))",message="spec.endpoint.host must be set to the VIP with spec.backend.bgp.takeOver: the address taken over is the Cluster's existing endpoint; set spec.endpoint.host to that IP address (the host of the Cluster's spec.controlPlaneEndpoint)"
// +kubebuilder:validation:XValidation:rule="!has(self.backend.bgp) || !has(self.backend.bgp.takeOver) || (has(self.clusterName) && size(self.clusterName) > 0)",message="spec.clusterName is required with spec.backend.bgp.takeOver: the VIP manager's Pods are read in that Cluster's workload cluster; set it to the Cluster whose endpoint is taken over"
// +kubebuilder:validation:XValidation:rule="!has(self.quiesce) || !has(self.quiesce.whenCordoned) || !self.quiesce.whenCordoned || self.targetKind.kind == 'Node'",message="spec.quiesce.whenCordoned applies to Node targets only (spec.targetKind.kind Node): Machines leave through CAPI's deletion hooks"
// +kubebuilder:validation:XValidation:rule="!has(self.backend.wireguard) || (has(self.clusterName) && size(self.clusterName) > 0)",message="spec.clusterName is required with spec.backend.wireguard: the join token, bootstrap and gateway Secrets and the health checks' CA belong to a Cluster"
// +kubebuilder:validation:XValidation:rule="!has(self.backend.wireguard) || size(self.backend.wireguard.gateways) < 2 || (has(self.endpoint) && has(self.endpoint.host) && size(self.endpoint.host) > 0)",message="spec.endpoint.host is required with more than one gateway: a DNS name with one record per gateway (or an address held across the gateway hosts), so that clients fail over between them"
// +kubebuilder:validation:XValidation:rule="(has(self.quiesce.drainPeriod) && !self.quiesce.drainPeriod.matches('^(0|([0-9]{1,5}([.][0-9]{1,9})?(ns|us|µs|ms|s|m|h)){1,4})$')) || (!has(self.backend.wireguard) || !has(self.quiesce) || !has(self.quiesce.drainPeriod) || duration(self.quiesce.drainPeriod) > duration('0s'))",message="spec.quiesce.drainPeriod must be positive with spec.backend.wireguard: the gateways close a quiesced member's open connections when it ends; leave it out for the default 10s"
// +kubebuilder:validation:XValidation:rule="!(has(self.backend.arp) || has(self.backend.bgp)) || !has(self.endpoint) || !has(self.endpoint.host) || size(self.endpoint.host) == 0 || !isIP(self.endpoint.host) || ip(self.endpoint.host).isGlobalUnicast()",message="spec.endpoint.host is the VIP of the arp and bgp backends and must be a unicast address of the members' segment: not loopback (127.0.0.0/8, ::1), link-local (169.254.0.0/16, fe80::/10), multicast (224.0.0.0/4, ff00::/8), broadcast or unspecified (0.0.0.0, ::)"
// +kubebuilder:validation:XValidation:rule="self.targetKind.kind != 'Machine' || (has(self.publishClusterEndpoint) && !self.publishClusterEndpoint) || !has(self.selector) || !((has(self.selector.matchLabels) && ['cluster.x-k8s.io/deployment-name', 'cluster.x-k8s.io/set-name', 'cluster.x-k8s.io/pool-name', 'topology.cluster.x-k8s.io/deployment-name', 'topology.cluster.x-k8s.io/pool-name'].exists(k, k in self.selector.matchLabels)) || (has(self.selector.matchExpressions) && self.selector.matchExpressions.exists(e, (e.key in ['cluster.x-k8s.io/deployment-name', 'cluster.x-k8s.io/set-name', 'cluster.x-k8s.io/pool-name', 'topology.cluster.x-k8s.io/deployment-name', 'topology.cluster.x-k8s.io/pool-name'] && e.operator in ['In', 'Exists']) || (e.key == 'cluster.x-k8s.io/control-plane' && e.operator == 'DoesNotExist'))))",message="spec.selector picks worker Machines (it requires a cluster.x-k8s.io/deployment-name, set-name or pool-name label, their topology.cluster.x-k8s.io/ counterparts, or the absence of cluster.x-k8s.io/control-plane): their service is not the Cluster's API endpoint, so set spec.publishClusterEndpoint: false"
// +kubebuilder:validation:XValidation:rule="!has(self.takeOverEndpointFrom) || (has(self.publishClusterEndpoint) && !self.publishClusterEndpoint)",message="spec.publishClusterEndpoint must be false while spec.takeOverEndpointFrom is set: the old LoadBalancer publishes until the move switches the Cluster (caplb then sets it true)"
// +kubebuilder:validation:XValidation:rule="!has(self.takeOverEndpointFrom) || (has(self.clusterName) && size(self.clusterName) > 0)",message="spec.clusterName is required with spec.takeOverEndpointFrom: an endpoint moves between two LoadBalancers of the same Cluster"
type LoadBalancerSpec struct {
	// clusterName is the CAPI Cluster (in this namespace) whose control plane this LoadBalancer
	// fronts. Required for Machine targets. When set, the endpoint is published to the Cluster's
	// spec.controlPlaneEndpoint if that is empty. With Node targets it makes them remote: the
	// members are that workload cluster's Nodes, read and annotated through the Cluster's
	// <clusterName>-kubeconfig Secret (an externally managed cluster with no Machines works);
	// without it they are the Nodes of the cluster the manager runs in.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$')",message="spec.clusterName must be a Cluster name: lower-case letters, digits, '-' and '.', starting and ending with a letter or digit, at most 63 characters"
	ClusterName string `json:"clusterName,omitempty"`

	// publishClusterEndpoint says whether this LoadBalancer writes its endpoint to the Cluster's
	// (and the control plane's) spec.controlPlaneEndpoint. A cluster may have several
	// LoadBalancers (an internal ARP VIP and an external static or WireGuard endpoint): exactly
	// one of them publishes; set false on the others. Each still holds its own deletion hook on
	// the members, and a Machine's deletion waits for every one of them. Default true.
	// +optional
	PublishClusterEndpoint *bool `json:"publishClusterEndpoint,omitempty"`

	// takeOverEndpointFrom moves the Cluster's endpoint to this LoadBalancer from the one that
	// publishes it now (docs/endpoint-move.md): both are served while caplb rewrites, in order,
	// the places a kubeadm cluster keeps its endpoint, then the Cluster. Requires
	// publishClusterEndpoint false; caplb removes this field and sets publishClusterEndpoint
	// true in one patch when the move is done. Removing it before the switch aborts the move.
	// +optional
	TakeOverEndpointFrom *EndpointTakeOver `json:"takeOverEndpointFrom,omitempty"`

	// targetKind is the kind of member object: CAPI Machines (the default) or Nodes: the Nodes of
	// spec.clusterName's workload cluster when clusterName is set (clusters CAPI does not
	// provision, reached through their kubeconfig Secret), else the Nodes of the cluster the
	// manager runs in (standalone use inside the cluster being balanced).
	// +optional
	// +kubebuilder:default={apiGroup: "cluster.x-k8s.io", kind: "Machine"}
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.targetKind is immutable: create a new LoadBalancer for the other kind of member"
	TargetKind TargetKind `json:"targetKind,omitzero"`

	// selector picks the members among objects of targetKind in this namespace (Machines) or
	// cluster-wide (Nodes). Defaults to the Cluster's control-plane Machines
	// (cluster.x-k8s.io/cluster-name=<clusterName>, cluster.x-k8s.io/control-plane), which is what
	// an unmodified KubeadmControlPlane creates; for Nodes, to node-role.kubernetes.io/control-plane.
	// Machine members are always Machines of spec.clusterName: the selector narrows them further.
	// +optional
	// +kubebuilder:validation:XValidation:rule="!has(self.matchExpressions) || self.matchExpressions.all(e, e.operator in ['In', 'NotIn', 'Exists', 'DoesNotExist'])",message="spec.selector.matchExpressions[].operator must be one of In, NotIn, Exists, DoesNotExist"
	// +kubebuilder:validation:XValidation:rule="!has(self.matchExpressions) || self.matchExpressions.all(e, (e.operator in ['In', 'NotIn']) == (has(e.values) && size(e.values) > 0))",message="spec.selector.matchExpressions[]: operators In and NotIn need at least one value, Exists and DoesNotExist take none"
	Selector *metav1.LabelSelector `json:"selector,omitempty"`

	// endpoint is the API endpoint clients use. Leave host empty to let the backend choose it
	// (static: the address of one ready member). port defaults to targetPort.
	// +optional
	Endpoint APIEndpoint `json:"endpoint,omitzero"`

	// targetPort is the port the members' API servers listen on.
	// +optional
	// +kubebuilder:default=6443
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	TargetPort int32 `json:"targetPort,omitempty"`

	// backend gives the endpoint its data plane. Exactly one member must be set; the kind cannot
	// change after creation.
	// +required
	Backend Backend `json:"backend"`

	// healthCheck configures how the backend probes the endpoint and members.
	// +optional
	// +kubebuilder:default={interval: "10s", timeout: "2s"}
	HealthCheck HealthCheck `json:"healthCheck,omitzero"`

	// quiesce configures how a member leaves rotation before it is disabled or deleted.
	// +optional
	// +kubebuilder:default={drainPeriod: "10s", timeout: "2m"}
	Quiesce Quiesce `json:"quiesce,omitzero"`
}

// TargetKind names the kind of the member objects.
// +kubebuilder:validation:XValidation:rule="(has(self.apiGroup) && self.apiGroup == 'cluster.x-k8s.io' && self.kind == 'Machine') || ((!has(self.apiGroup) || size(self.apiGroup) == 0) && self.kind == 'Node')",message="spec.targetKind must be {apiGroup: cluster.x-k8s.io, kind: Machine} or {apiGroup: \"\", kind: Node}"
type TargetKind struct {
	// apiGroup of the member kind: cluster.x-k8s.io for Machine, empty for Node.
	// +optional
	APIGroup string `json:"apiGroup"`

	// kind of the member objects: Machine or Node.
	// +required
	Kind string `json:"kind"`
}

// APIEndpoint is a host and port where an API server can be reached.
type APIEndpoint struct {
	// host is an IP address or DNS name. Empty means: let the backend choose.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self == '' || isIP(self) || self.matches('^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?(\\\\.[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)*$')",message="endpoint host must be an IP address (10.0.0.10, fd00::10) or a lower-case DNS name (api.example.com), without scheme or port"
	Host string `json:"host,omitempty"`

	// port is the TCP port, 1-65535.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	Port int32 `json:"port,omitempty"`
}

// IsZero reports whether neither host nor port is set.
func (e APIEndpoint) IsZero() bool { return e.Host == "" && e.Port == 0 }

// IsValid reports whether both host and port are set, CAPI's rule for an endpoint.
func (e APIEndpoint) IsValid() bool { return e.Host != "" && e.Port != 0 }

// Backend selects the data plane. Exactly one field is set.
// +kubebuilder:validation:MinProperties=1
// +kubebuilder:validation:MaxProperties=1
// +kubebuilder:validation:XValidation:rule="has(self.static) == has(oldSelf.static) && has(self.arp) == has(oldSelf.arp) && has(self.bgp) == has(oldSelf.bgp) && has(self.wireguard) == has(oldSelf.wireguard)",message="spec.backend kind cannot change after creation: create a new LoadBalancer with the other backend"
type Backend struct {
	// static publishes a fixed endpoint (an external load balancer or DNS name, in
	// spec.endpoint.host) or, with spec.endpoint.host empty, the address of one ready member.
	// +optional
	Static *StaticBackend `json:"static,omitempty"`

	// arp serves the endpoint on a virtual IP held by one elected member on the members' L2
	// segment.
	// +optional
	ARP *ARPBackend `json:"arp,omitempty"`

	// bgp serves the endpoint on a virtual IP that every healthy member announces to its routers.
	// +optional
	BGP *BGPBackend `json:"bgp,omitempty"`

	// wireguard serves the endpoint on gateways that pass connections through WireGuard tunnels
	// the members dial out to, for members behind NAT with no shared segment or routers.
	// +optional
	WireGuard *WireGuardBackend `json:"wireguard,omitempty"`
}

// Backend kinds, the names of the fields under spec.backend.
const (
	BackendStatic    = "static"
	BackendARP       = "arp"
	BackendBGP       = "bgp"
	BackendWireGuard = "wireguard"
)

// Kind returns the name of the backend that is set ("static", "arp", "bgp", "wireguard"), or "" when none is.
func (b Backend) Kind() string {
	switch {
	case b.Static != nil:
		return BackendStatic
	case b.ARP != nil:
		return BackendARP
	case b.BGP != nil:
		return BackendBGP
	case b.WireGuard != nil:
		return BackendWireGuard
	default:
		return ""
	}
}

// VIP returns the shared VIP settings of an arp or bgp backend, nil for other kinds.
func (b Backend) VIP() *VIPBackend {
	switch {
	case b.ARP != nil:
		return &b.ARP.VIPBackend
	case b.BGP != nil:
		return &b.BGP.VIPBackend
	}
	return nil
}

// StaticBackend has no data plane of its own.
type StaticBackend struct {
	// addressTypes lists, in order of preference, which member address to publish when the
	// endpoint host is left empty. Defaults to InternalIP, ExternalIP.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=5
	// +kubebuilder:validation:items:Enum=InternalIP;ExternalIP;InternalDNS;ExternalDNS;Hostname
	AddressTypes []string `json:"addressTypes,omitempty"`

	// onPublishedMemberLeave says what happens, with spec.endpoint.host empty, when the member
	// whose address is the Cluster's endpoint leaves (its Machine deleted, disabled or unready)
	// and this LoadBalancer publishes another member's. Keep (the default): the Cluster keeps the
	// old address (ClusterEndpointMismatch); kubeadm baked it into certificates and kubeconfigs.
	// MoveEndpoint: caplb moves the Cluster to the new member's address with the endpoint move's
	// steps (docs/endpoint-move.md): cluster-info, kubeadm-config, kube-proxy, the kubeconfig
	// Secret, then the Cluster; the leaving member's deletion is held (pre-drain hook, at most
	// spec.quiesce.timeout) until the Cluster no longer names it.
	// +optional
	// +kubebuilder:validation:Enum=Keep;MoveEndpoint
	OnPublishedMemberLeave MemberLeavePolicy `json:"onPublishedMemberLeave,omitempty"`
}

// MemberLeavePolicy is spec.backend.static.onPublishedMemberLeave.
type MemberLeavePolicy string

const (
	// MemberLeaveKeep: the Cluster keeps the leaving member's address.
	MemberLeaveKeep MemberLeavePolicy = "Keep"
	// MemberLeaveMoveEndpoint: caplb moves the Cluster to another member's address.
	MemberLeaveMoveEndpoint MemberLeavePolicy = "MoveEndpoint"
)

// MovesEndpointOnMemberLeave: a static LoadBalancer publishing a member's address that moves
// the Cluster when that member leaves (spec.backend.static.onPublishedMemberLeave MoveEndpoint,
// spec.endpoint.host empty, publishing the Cluster's endpoint).
func (s *LoadBalancerSpec) MovesEndpointOnMemberLeave() bool {
	return s.Backend.Static != nil && s.Backend.Static.OnPublishedMemberLeave == MemberLeaveMoveEndpoint &&
		s.Endpoint.Host == "" && s.PublishesClusterEndpoint()
}

// HealthCheck configures probes. Zero values take the documented defaults.
type HealthCheck struct {
	// interval between probes.
	// +optional
	// +kubebuilder:default="10s"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^(0|([0-9]{1,5}([.][0-9]{1,9})?(ns|us|µs|ms|s|m|h)){1,4})$') || (duration(self) == duration('0s') || (duration(self) >= duration('100ms') && duration(self) <= duration('1h')))",message="spec.healthCheck.interval must be between 100ms and 1h (0s means the default, 10s)"
	Interval Duration `json:"interval,omitzero"`

	// timeout of one probe.
	// +optional
	// +kubebuilder:default="2s"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^(0|([0-9]{1,5}([.][0-9]{1,9})?(ns|us|µs|ms|s|m|h)){1,4})$') || (duration(self) == duration('0s') || (duration(self) >= duration('10ms') && duration(self) <= duration('5m')))",message="spec.healthCheck.timeout must be between 10ms and 5m (0s means the default, 2s)"
	Timeout Duration `json:"timeout,omitzero"`

	// disabled turns endpoint probing off (e.g. when the manager cannot reach the endpoint);
	// the endpoint is then reported available as soon as it is set.
	// +optional
	Disabled bool `json:"disabled,omitempty"`
}

// Quiesce configures how a member leaves rotation.
// +kubebuilder:validation:XValidation:rule="(has(self.drainPeriod) && !self.drainPeriod.matches('^(0|([0-9]{1,5}([.][0-9]{1,9})?(ns|us|µs|ms|s|m|h)){1,4})$')) || (has(self.timeout) && !self.timeout.matches('^(0|([0-9]{1,5}([.][0-9]{1,9})?(ns|us|µs|ms|s|m|h)){1,4})$')) || (!has(self.drainPeriod) || !has(self.timeout) || duration(self.drainPeriod) <= duration(self.timeout))",message="spec.quiesce.drainPeriod must not exceed spec.quiesce.timeout: raise the timeout or shorten the drain period"
// +kubebuilder:validation:XValidation:rule="(has(self.timeout) && !self.timeout.matches('^(0|([0-9]{1,5}([.][0-9]{1,9})?(ns|us|µs|ms|s|m|h)){1,4})$')) || (!has(self.timeout) || duration(self.timeout) <= duration('1h'))",message="spec.quiesce.timeout must be at most 1h: caplb never holds a Machine's deletion longer"
// +kubebuilder:validation:XValidation:rule="(has(self.drainPeriod) && !self.drainPeriod.matches('^(0|([0-9]{1,5}([.][0-9]{1,9})?(ns|us|µs|ms|s|m|h)){1,4})$')) || (!has(self.drainPeriod) || duration(self.drainPeriod) <= duration('30m'))",message="spec.quiesce.drainPeriod must be at most 30m"
type Quiesce struct {
	// drainPeriod is how long in-flight connections may finish after a member left rotation
	// before the backend reports it quiesced. "0s" means no drain; unset means the default.
	// +optional
	// +kubebuilder:default="10s"
	DrainPeriod *Duration `json:"drainPeriod,omitempty"`

	// timeout bounds the wait for the backend to confirm a quiesce. When it expires the member is
	// released anyway (its deletion goes on) and a Warning event says so: caplb never blocks a
	// Machine's deletion for ever.
	// +optional
	// +kubebuilder:default="2m"
	Timeout Duration `json:"timeout,omitzero"`

	// preTerminateHook also places a CAPI pre-terminate hook on member Machines, released with
	// the pre-drain hook once the member has left the data plane. CAPI skips pre-drain hooks for
	// a Machine without a nodeRef and for the last control-plane Machine; this one still holds
	// such a Machine's infrastructure until the member is out. It never waits on
	// KubeadmControlPlane's own pre-terminate hook, and is never held while the Cluster is being
	// deleted. Default: on for the arp, bgp and wireguard backends (they have a data plane), off
	// for static.
	// +optional
	PreTerminateHook *bool `json:"preTerminateHook,omitempty"`

	// whenCordoned, for Node targets, takes a cordoned Node (spec.unschedulable, set by
	// `kubectl cordon` and `kubectl drain`) out of rotation as the disabled annotation does:
	// disabling, then disabled once the backend confirms; uncordoning puts it back. Nodes have no
	// CAPI deletion hook, and the tools that remove a node (kubectl drain, Rancher, k0smotron, an
	// externally managed cluster's own lifecycle tool) cordon it first: with this on, the node
	// leaves the load balancer before it goes, without the tool knowing caplb. The tool should
	// wait for the Node's loadbalancer.cluster.x-k8s.io/status annotation to read "disabled"
	// before it deletes the Node. Opt-in (default false), because a cordon also means "no new
	// pods" for reasons that have nothing to do with the API server.
	// +optional
	WhenCordoned bool `json:"whenCordoned,omitempty"`
}

// EffectivePreTerminateHook reports whether member Machines carry caplb's pre-terminate hook.
func (s *LoadBalancerSpec) EffectivePreTerminateHook() bool {
	if s.Quiesce.PreTerminateHook != nil {
		return *s.Quiesce.PreTerminateHook
	}
	return s.Backend.ARP != nil || s.Backend.BGP != nil || s.Backend.WireGuard != nil
}

// Target is one member as the LoadBalancer sees it.
type Target struct {
	// name of the member object.
	Name string `json:"name"`

	// address the backend uses for this member, if known.
	// +optional
	Address string `json:"address,omitempty"`

	// state in the load balancer's life cycle.
	State TargetState `json:"state"`

	// ready is the member's own readiness (Machine Ready / Node Ready condition).
	Ready bool `json:"ready"`

	// since is when the member entered its current state.
	// +optional
	Since metav1.Time `json:"since,omitzero"`
}

// LoadBalancerStatus is the observed state of a LoadBalancer.
type LoadBalancerStatus struct {
	// endpoint is the endpoint the backend serves; empty until one is known.
	// +optional
	Endpoint APIEndpoint `json:"endpoint,omitzero"`

	// certSANs are the names and addresses the members' API server certificates must carry for
	// clients to verify this endpoint. kubeadm adds the Cluster's controlPlaneEndpoint by itself;
	// a LoadBalancer that does not publish it needs its host in
	// KubeadmControlPlane.spec.kubeadmConfigSpec.clusterConfiguration.apiServer.certSANs.
	// +optional
	// +listType=atomic
	CertSANs []string `json:"certSANs,omitempty"`

	// backend is the kind of backend in use, for display.
	// +optional
	Backend string `json:"backend,omitempty"`

	// bootstrapSecretName is the Secret the members' bootstrap writes the node agent's files from
	// (files[].contentFrom.secret), with the arp, bgp and wireguard backends:
	// <clusterName>-caplb-agent for a control plane, <name>-caplb-agent for a LoadBalancer whose
	// selector picks worker Machines. Known from the first reconcile on, before the Secret is
	// rendered, so that templates can name it.
	// +optional
	BootstrapSecretName string `json:"bootstrapSecretName,omitempty"`

	// vipOwner is the member (its Node name) whose agent reports holding the VIP, with the arp
	// backend; empty with the others (bgp: every active member announces it) and while no
	// agent's report says so.
	// +optional
	VIPOwner string `json:"vipOwner,omitempty"`

	// targets lists every selected member, sorted by name.
	// +optional
	// +listType=map
	// +listMapKey=name
	Targets []Target `json:"targets,omitempty"`

	// activeTargets counts targets in state active.
	// +optional
	ActiveTargets int32 `json:"activeTargets"`

	// totalTargets counts all targets.
	// +optional
	TotalTargets int32 `json:"totalTargets"`

	// endpointMove records a move of the Cluster's endpoint to this LoadBalancer
	// (spec.takeOverEndpointFrom): its step, both endpoints and, after the switch, the Machines
	// still bound to the old endpoint. Kept after the move as its record.
	// +optional
	EndpointMove *EndpointMoveStatus `json:"endpointMove,omitempty"`

	// observedGeneration is the generation last reconciled.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// conditions: Ready, EndpointAvailable, TargetsAvailable, ClusterEndpoint, Paused; with the
	// arp and bgp backends also AddressAllocated and AgentsReady; with wireguard GatewaysReady.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// LoadBalancer gives a cluster's control plane a stable API endpoint and keeps the members
// behind it current.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:path=loadbalancers,scope=Namespaced,shortName=lb;lbs,categories=cluster-api
// +kubebuilder:metadata:labels="cluster.x-k8s.io/v1beta2=v1alpha1"
// +kubebuilder:printcolumn:name="Cluster",type=string,JSONPath=".spec.clusterName"
// +kubebuilder:printcolumn:name="Host",type=string,JSONPath=".status.endpoint.host"
// +kubebuilder:printcolumn:name="Port",type=integer,JSONPath=".status.endpoint.port"
// +kubebuilder:printcolumn:name="Backend",type=string,JSONPath=".status.backend"
// +kubebuilder:printcolumn:name="Active",type=integer,JSONPath=".status.activeTargets"
// +kubebuilder:printcolumn:name="Total",type=integer,JSONPath=".status.totalTargets"
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=".status.conditions[?(@.type==\"Ready\")].status"
// +kubebuilder:printcolumn:name="Owner",type=string,JSONPath=".status.vipOwner",priority=1,description="Node holding the ARP VIP"
// +kubebuilder:printcolumn:name="Active Members",type=string,JSONPath=".status.targets[?(@.state==\"active\")].name",priority=1,description="Members in rotation"
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=".metadata.creationTimestamp"
type LoadBalancer struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   LoadBalancerSpec   `json:"spec,omitempty"`
	Status LoadBalancerStatus `json:"status,omitempty"`
}

// GetConditions returns the status conditions (CAPI's conditions Getter).
func (lb *LoadBalancer) GetConditions() []metav1.Condition { return lb.Status.Conditions }

// SetConditions replaces the status conditions (CAPI's conditions Setter).
func (lb *LoadBalancer) SetConditions(c []metav1.Condition) { lb.Status.Conditions = c }

// LoadBalancerList is a list of LoadBalancers.
// +kubebuilder:object:root=true
type LoadBalancerList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []LoadBalancer `json:"items"`
}

func init() {
	SchemeBuilder.Register(&LoadBalancer{}, &LoadBalancerList{})
}
