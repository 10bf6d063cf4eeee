package v1alpha1

// ARPBackend serves the endpoint on a virtual IP that one elected member holds on the members'
// L2 segment (gratuitous ARP / unsolicited NA). The node agents run from the bootstrap Secret the
// controller renders (<clusterName>-caplb-agent); see docs/backends/arp.md.
// busyDrain counts the connections on sockets bound to the VIP; spread connections reach the API
// servers at node addresses, so with spread it would hold for none of them: refused.
// +kubebuilder:validation:XValidation:rule="!has(self.loadBalancing) || self.loadBalancing != 'spread' || !has(self.agent) || !has(self.agent.timers) || !has(self.agent.timers.busyDrain) || !self.agent.timers.busyDrain.matches('^(0|([0-9]{1,5}([.][0-9]{1,9})?(ns|us|µs|ms|s|m|h)){1,4})$') || self.agent.timers.busyDrain == '0' || duration(self.agent.timers.busyDrain) == duration('0s')",message="spec.backend.arp.agent.timers.busyDrain cannot be used with spec.backend.arp.loadBalancing spread: spread connections reach the API servers at node addresses, not the VIP, so the holder counts none of them as busy; remove busyDrain (or set it to 0s), or use loadBalancing single",fieldPath=".agent.timers.busyDrain"
// +kubebuilder:validation:XValidation:rule="!has(self.takeOver) || !has(self.addressFrom)",message="spec.backend.arp.takeOver cannot be used with spec.backend.arp.addressFrom: the VIP taken over is the Cluster's existing endpoint, which no pool allocates; remove addressFrom and set spec.endpoint.host to that address",fieldPath=".takeOver"
type ARPBackend struct {
	VIPBackend `json:",inline"`

	// loadBalancing says who serves the VIP's connections. single (default): the VIP holder
	// serves them all, the others stand by. spread: the holder forwards new connections to the
	// API port and extraPorts across every healthy member, itself included, in turn (nftables
	// DNAT, SNAT to the holder's address: the API servers see the holder as the client). A
	// member that turns unhealthy, is disabled or quiesced gets no new connection; the ones it
	// serves drain. The nodes need IP forwarding (kubeadm's preflight requires it). See
	// docs/backends/arp.md.
	// +optional
	// +kubebuilder:validation:Enum=single;spread
	LoadBalancing string `json:"loadBalancing,omitempty"`

	// takeOver says that another VIP manager serves this LoadBalancer's VIP today and caplb is to
	// take the address over from it, rather than claim a new one. A cluster that runs kube-vip
	// can only move to caplb by keeping its VIP (its certificates and every kubeconfig name it),
	// and two speakers on one address must be ordered. The manager first checks that the running
	// manager's configuration allows a hand-over and reports why not in the KubeVIPTakeOverReady
	// condition; the agents claim the VIP only once nobody answers ARP for it. Requires
	// spec.endpoint.host set to the VIP and spec.clusterName. See docs/migrate-from-kube-vip.md.
	// +optional
	TakeOver *TakeOver `json:"takeOver,omitempty"`
}

// TakeOver names the VIP manager caplb takes the VIP over from (spec.backend.arp.takeOver,
// spec.backend.bgp.takeOver). Exactly one member is set.
// +kubebuilder:validation:MinProperties=1
// +kubebuilder:validation:MaxProperties=1
type TakeOver struct {
	// kubeVIP: kube-vip runs as a static pod on the control-plane nodes (KubeadmControlPlane
	// files, as CAPV's templates inject it), in the backend's mode: ARP with Kubernetes Lease
	// election under spec.backend.arp, BGP (with or without Lease election) under
	// spec.backend.bgp. The manager reads its mirror Pods (kube-system/kube-vip-<node>) in the
	// workload cluster.
	// +optional
	KubeVIP *KubeVIPTakeOver `json:"kubeVIP,omitempty"`
}

// TakeOver returns spec.backend.<arp|bgp>.takeOver, nil for other backends and when unset.
func (b Backend) TakeOver() *TakeOver {
	switch {
	case b.ARP != nil:
		return b.ARP.TakeOver
	case b.BGP != nil:
		return b.BGP.TakeOver
	}
	return nil
}

// KubeVIPTakeOver describes the kube-vip deployment caplb takes the VIP over from.
type KubeVIPTakeOver struct {
	// leaseNamespace of kube-vip's control-plane election Lease (kube-vip's cp_namespace). The
	// manager refuses when kube-vip's mirror Pods elect on another Lease: a fence on the wrong
	// Lease would not stop kube-vip. Default kube-system. Not judged for a BGP kube-vip without
	// Lease election (vip_leaderelection false), which has no Lease.
	// +optional
	// +kubebuilder:default=kube-system
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')",message="spec.backend.<arp|bgp>.takeOver.kubeVIP.leaseNamespace must be a namespace name: lower-case letters, digits and '-', like kube-system"
	LeaseNamespace string `json:"leaseNamespace,omitempty"`

	// leaseName of kube-vip's control-plane election Lease (kube-vip's vip_leasename), for the
	// same reason. Default plndr-cp-lock, kube-vip's own default.
	// +optional
	// +kubebuilder:default=plndr-cp-lock
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')",message="spec.backend.<arp|bgp>.takeOver.kubeVIP.leaseName must be a Lease name: lower-case letters, digits, '-' and '.', like plndr-cp-lock"
	LeaseName string `json:"leaseName,omitempty"`

	// acknowledgeServiceVIPs accepts that kube-vip's Service VIPs (svc_enable "true", which
	// CAPV's template sets) stop being served once kube-vip leaves the control-plane nodes:
	// caplb serves the control-plane VIP only. Without it the manager refuses a kube-vip that
	// serves Services. Either move the Service VIPs to a services-only kube-vip (or another
	// Service load balancer) first, or set this when no Service of type LoadBalancer uses them.
	// +optional
	AcknowledgeServiceVIPs bool `json:"acknowledgeServiceVIPs,omitempty"`
}

// kube-vip's defaults for its control-plane election Lease.
const (
	DefaultKubeVIPLeaseNamespace = "kube-system"
	DefaultKubeVIPLeaseName      = "plndr-cp-lock"
)

// KubeVIPFenceHolderPrefix starts the holderIdentity of every fence the manager writes on
// kube-vip's election Lease during a takeover: "caplb:<LoadBalancer namespace>/<name>". kube-vip
// elects under its node name, which never contains ':', so the prefix tells a fence from a
// kube-vip leader; `caplb cleanup --workload-kubeconfig` looks for it to find the fences an
// aborted takeover left.
const KubeVIPFenceHolderPrefix = "caplb:"

// EffectiveLeaseNamespace returns leaseNamespace or its default.
func (k *KubeVIPTakeOver) EffectiveLeaseNamespace() string {
	if k.LeaseNamespace == "" {
		return DefaultKubeVIPLeaseNamespace
	}
	return k.LeaseNamespace
}

// EffectiveLeaseName returns leaseName or its default.
func (k *KubeVIPTakeOver) EffectiveLeaseName() string {
	if k.LeaseName == "" {
		return DefaultKubeVIPLeaseName
	}
	return k.LeaseName
}

// ARP load-balancing modes (ARPBackend.LoadBalancing).
const (
	ARPLoadBalancingSingle = "single"
	ARPLoadBalancingSpread = "spread"
)

// BGPBackend serves the endpoint on a virtual IP that every healthy member announces to its
// routers as a /32 (/128); the routers spread connections by ECMP. See docs/backends/bgp.md.
// +kubebuilder:validation:XValidation:rule="!has(self.peers) || self.peers.all(p, self.peers.exists_one(q, q.address == p.address))",message="spec.backend.bgp.peers[].address must be unique: list each router once"
// +kubebuilder:validation:XValidation:rule="!has(self.takeOver) || !has(self.addressFrom)",message="spec.backend.bgp.takeOver cannot be used with spec.backend.bgp.addressFrom: the VIP taken over is the Cluster's existing endpoint, which no pool allocates; remove addressFrom and set spec.endpoint.host to that address",fieldPath=".takeOver"
type BGPBackend struct {
	VIPBackend `json:",inline"`

	// asn is the members' autonomous system number (1-4294967295), usually one private ASN
	// shared by the control-plane nodes.
	// +required
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=4294967295
	ASN int64 `json:"asn"`

	// peers are the routers every member announces the VIP to.
	// +required
	// +listType=atomic
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=16
	Peers []BGPPeer `json:"peers"`

	// communities are standard communities ("65000:100" or a well-known name such as
	// "no-export") attached to the VIP's routes.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MaxLength=32
	Communities []string `json:"communities,omitempty"`

	// takeOver says that kube-vip announces this LoadBalancer's VIP by BGP today and caplb is to
	// take the address over from it (see spec.backend.arp.takeOver for why a cluster keeps its
	// VIP). BGP needs no order between the two speakers: while kube-vip's nodes and caplb's
	// members announce the same /32 to the same routers, the routers spread connections by ECMP
	// across API servers of the same cluster, so caplb's members announce as soon as they are
	// healthy. The manager checks kube-vip's configuration (KubeVIPTakeOverReady), including that
	// every router kube-vip announces to is in peers. With kube-vip's Lease election it fences
	// kube-vip's Lease once a caplb member is active, and kube-vip's leader withdraws; without
	// it every kube-vip node announces until its Machine goes. Requires spec.endpoint.host set to
	// the VIP and spec.clusterName. See docs/migrate-from-kube-vip.md.
	// +optional
	TakeOver *TakeOver `json:"takeOver,omitempty"`
}

// BGPPeer is one router.
// +kubebuilder:validation:XValidation:rule="(has(self.keepaliveTime) && !self.keepaliveTime.matches('^(0|([0-9]{1,5}([.][0-9]{1,9})?(ns|us|µs|ms|s|m|h)){1,4})$')) || (has(self.holdTime) && !self.holdTime.matches('^(0|([0-9]{1,5}([.][0-9]{1,9})?(ns|us|µs|ms|s|m|h)){1,4})$')) || (!has(self.keepaliveTime) || duration(self.keepaliveTime) < duration(has(self.holdTime) ? self.holdTime : '9s'))",message="spec.backend.bgp.peers[].keepaliveTime must be shorter than holdTime (default 9s): a third of it is usual"
// +kubebuilder:validation:XValidation:rule="!has(self.bfd) || (isIP(self.address) && ip(self.address).family() == 4)",message="spec.backend.bgp.peers[].bfd: BFD runs to IPv4 routers only; remove bfd from this IPv6 peer"
type BGPPeer struct {
	// address of the router, an IP address.
	// +required
	// +kubebuilder:validation:MaxLength=45
	// +kubebuilder:validation:XValidation:rule="isIP(self)",message="spec.backend.bgp.peers[].address must be an IP address (10.0.0.1, fd00::1)"
	// +kubebuilder:validation:XValidation:rule="!isIP(self) || ip(self).isGlobalUnicast() || ip(self).isLinkLocalUnicast()",message="spec.backend.bgp.peers[].address must be a router's unicast address: not loopback, multicast, broadcast or unspecified"
	Address string `json:"address"`

	// asn of the router; equal to spec.backend.bgp.asn makes an iBGP session.
	// +required
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=4294967295
	ASN int64 `json:"asn"`

	// port of the router's BGP listener. Default 179.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	Port int32 `json:"port,omitempty"`

	// ebgpMultihop is the TTL for an eBGP router that is not directly connected.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=255
	EBGPMultihop int32 `json:"ebgpMultihop,omitempty"`

	// holdTime proposed to the router: whole seconds, at least 3s. Default 9s.
	// +optional
	// +kubebuilder:validation:XValidation:rule="!self.matches('^(0|([0-9]{1,5}([.][0-9]{1,9})?(ns|us|µs|ms|s|m|h)){1,4})$') || (duration(self) >= duration('3s') && duration(self) <= duration('65535s') && duration(self).getMilliseconds() % 1000 == 0)",message="spec.backend.bgp.peers[].holdTime must be whole seconds between 3s and 65535s, written like 3s (RFC 4271)"
	HoldTime *Duration `json:"holdTime,omitempty"`

	// keepaliveTime: whole seconds, shorter than holdTime. Default a third of holdTime.
	// +optional
	// +kubebuilder:validation:XValidation:rule="!self.matches('^(0|([0-9]{1,5}([.][0-9]{1,9})?(ns|us|µs|ms|s|m|h)){1,4})$') || (duration(self) >= duration('1s') && duration(self) <= duration('21845s') && duration(self).getMilliseconds() % 1000 == 0)",message="spec.backend.bgp.peers[].keepaliveTime must be whole seconds between 1s and 21845s, written like 1s, shorter than holdTime"
	KeepaliveTime *Duration `json:"keepaliveTime,omitempty"`

	// connectRetry is the interval between attempts to reach a router that is down. Default 5s.
	// +optional
	// +kubebuilder:validation:XValidation:rule="!self.matches('^(0|([0-9]{1,5}([.][0-9]{1,9})?(ns|us|µs|ms|s|m|h)){1,4})$') || (duration(self) >= duration('1s') && duration(self) <= duration('1h') && duration(self).getMilliseconds() % 1000 == 0)",message="spec.backend.bgp.peers[].connectRetry must be whole seconds between 1s and 1h, written like 1s"
	ConnectRetry *Duration `json:"connectRetry,omitempty"`

	// passwordSecretRef names a Secret key in the LoadBalancer's namespace holding the RFC 2385
	// TCP-MD5 password. The controller copies it into the bootstrap Secret; it is never logged.
	// +optional
	PasswordSecretRef *SecretKeyReference `json:"passwordSecretRef,omitempty"`

	// bfd runs single-hop BFD (RFC 5880, 5881) from each member to this router, so that the
	// router drops a frozen or powered-off member's route after minTx x multiplier (900 ms at
	// 300ms x 3) instead of the BGP hold time. The router must run BFD on the session too (FRR:
	// bfdd and `neighbor <member> bfd`). Off unless set; IPv4 routers only.
	// +optional
	BFD *BFDSettings `json:"bfd,omitempty"`
}

// BFDSettings are one BGP router's BFD timers.
type BFDSettings struct {
	// minRx is the fastest the member accepts BFD packets at. Default 300ms; 10ms to 60s.
	// +optional
	// +kubebuilder:validation:XValidation:rule="!self.matches('^(0|([0-9]{1,5}([.][0-9]{1,9})?(ns|us|µs|ms|s|m|h)){1,4})$') || (duration(self) >= duration('10ms') && duration(self) <= duration('60s'))",message="spec.backend.bgp.peers[].bfd.minRx must be between 10ms and 60s, written like 300ms"
	MinRx *Duration `json:"minRx,omitempty"`
	// minTx is how often the member would like to send them once the session is up. Default
	// 300ms; 10ms to 60s. The router's receive interval may make it slower.
	// +optional
	// +kubebuilder:validation:XValidation:rule="!self.matches('^(0|([0-9]{1,5}([.][0-9]{1,9})?(ns|us|µs|ms|s|m|h)){1,4})$') || (duration(self) >= duration('10ms') && duration(self) <= duration('60s'))",message="spec.backend.bgp.peers[].bfd.minTx must be between 10ms and 60s, written like 300ms"
	MinTx *Duration `json:"minTx,omitempty"`
	// multiplier: the router declares the member down after this many intervals without a
	// packet. Default 3.
	// +optional
	// +kubebuilder:validation:Minimum=2
	// +kubebuilder:validation:Maximum=255
	Multiplier int32 `json:"multiplier,omitempty"`
}

// SecretKeyReference names one key of a Secret in the LoadBalancer's namespace.
type SecretKeyReference struct {
	// name of the Secret.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')",message="passwordSecretRef.name must be a Secret name: lower-case letters, digits, '-' and '.'"
	Name string `json:"name"`
	// key in the Secret's data.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self.matches('^[-._a-zA-Z0-9]+$')",message="passwordSecretRef.key must be a Secret data key: letters, digits, '-', '_' and '.'"
	Key string `json:"key"`
}

// VIPBackend holds what the ARP and BGP backends share: where the VIP comes from, the ports it
// serves, and how the node agents run.
// +kubebuilder:validation:XValidation:rule="has(self.addressFrom) == has(oldSelf.addressFrom) && (!has(self.addressFrom) || self.addressFrom == oldSelf.addressFrom)",message="addressFrom cannot change once set: the VIP is baked into certificates and kubeconfigs; create a new LoadBalancer instead"
type VIPBackend struct {
	// addressFrom allocates the VIP from a CAPI IPAM pool (an IPAddressClaim owned by the
	// LoadBalancer). Leave it out to use spec.endpoint.host, which must then be an IP address.
	// The VIP is installed on nodes as a /32 (/128) whatever the pool's prefix.
	// +optional
	AddressFrom *AddressFrom `json:"addressFrom,omitempty"`

	// extraPorts the VIP serves beyond the API port, where a control plane needs them (RKE2
	// registers nodes on 9345).
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=8
	// +kubebuilder:validation:items:Minimum=1
	// +kubebuilder:validation:items:Maximum=65535
	ExtraPorts []int32 `json:"extraPorts,omitempty"`

	// agent configures the node agents the bootstrap Secret runs.
	// +optional
	Agent AgentSpec `json:"agent,omitzero"`
}

// AddressFrom names where a VIP is allocated.
type AddressFrom struct {
	// poolRef is the IPAM pool, e.g. {apiGroup: ipam.cluster.x-k8s.io, kind: InClusterIPPool,
	// name: vips} (or GlobalInClusterIPPool).
	// +required
	PoolRef IPPoolReference `json:"poolRef"`
}

// IPPoolReference names an IPAM pool.
type IPPoolReference struct {
	// apiGroup of the pool kind, e.g. ipam.cluster.x-k8s.io.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	APIGroup string `json:"apiGroup"`
	// kind of the pool, e.g. InClusterIPPool or GlobalInClusterIPPool.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:XValidation:rule="self.matches('^[A-Z][A-Za-z0-9]*$')",message="addressFrom.poolRef.kind must be a kind name, like InClusterIPPool"
	Kind string `json:"kind"`
	// name of the pool (in the LoadBalancer's namespace for namespaced kinds).
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
}

// AgentSpec configures the node agents.
// +kubebuilder:validation:XValidation:rule="!has(self.caFile) || !has(self.health) || !has(self.health.type) || self.health.type == 'https'",message="spec.backend.<arp|bgp>.agent.caFile verifies the https health check only: remove it for health type http or tcp",fieldPath=".caFile"
type AgentSpec struct {
	// flavor of the control plane's nodes, for the paths the agent reads: the API server's CA and
	// the kubelet's kubeconfig. kubeadm (default), k3s or rke2.
	// +optional
	// +kubebuilder:validation:Enum=kubeadm;k3s;rke2
	Flavor string `json:"flavor,omitempty"`

	// image of the agent's static pod. Default: the manager's --agent-image.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:XValidation:rule="self.matches('^[^\\\\s]+$')",message="agent.image must be an image reference without spaces, like registry.example.com/caplb/caplb-agent:v0.1.0"
	Image string `json:"image,omitempty"`

	// interface that carries the VIP (arp). Default: the interface of the route to the VIP.
	// +optional
	// +kubebuilder:validation:MaxLength=15
	// +kubebuilder:validation:XValidation:rule="self.matches('^[A-Za-z0-9_.@-]+$') && self != '.' && self != '..'",message="agent.interface must be a Linux interface name (eth0, bond0.100): at most 15 letters, digits, '_', '.', '@' or '-'"
	Interface string `json:"interface,omitempty"`

	// caFile on the node that verifies the local API server. Default per flavor (kubeadm
	// /etc/kubernetes/pki/ca.crt, k3s /var/lib/rancher/k3s/server/tls/server-ca.crt, rke2
	// /var/lib/rancher/rke2/server/tls/server-ca.crt).
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	// +kubebuilder:validation:XValidation:rule="self.startsWith('/')",message="agent.caFile must be an absolute path on the node, like /etc/kubernetes/pki/ca.crt"
	CAFile string `json:"caFile,omitempty"`

	// timers override the election and hand-over defaults (docs/backends/arp.md explains each).
	// +optional
	Timers *AgentTimers `json:"timers,omitempty"`

	// health is the local check that makes a member eligible. Default: the local API server's
	// /readyz over HTTPS, verified with caFile. A LoadBalancer whose members serve something
	// else (an ingress controller on 80/443) checks that instead, with type http or tcp.
	// +optional
	Health *AgentHealth `json:"health,omitempty"`

	// metrics opens the agent's admin listener (/metrics) to Prometheus on the node's address.
	// Unset: 127.0.0.1:7473, reachable from the node only.
	// +optional
	Metrics *AgentMetrics `json:"metrics,omitempty"`
}

// AgentHealth is the node agent's member health check, against 127.0.0.1 on the node.
// +kubebuilder:validation:XValidation:rule="!has(self.path) || !has(self.type) || self.type != 'tcp'",message="spec.backend.<arp|bgp>.agent.health.path applies only to type http or https: remove it for type tcp",fieldPath=".path"
type AgentHealth struct {
	// type of the check. https (default): GET https://127.0.0.1:<port><path>, verified with
	// agent.caFile as the name "kubernetes" (the API server's certificate), healthy on 200.
	// http: a plain GET of http://127.0.0.1:<port><path>, healthy on any 2xx. tcp: healthy when a
	// TCP connection to 127.0.0.1:<port> opens within the agent's timeout (1s).
	// +optional
	// +kubebuilder:validation:Enum=https;http;tcp
	Type string `json:"type,omitempty"`

	// port on the node that is checked. Default: spec.targetPort (the LoadBalancer's port).
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	Port int32 `json:"port,omitempty"`

	// path of the GET (http and https only). Default /readyz for https, /healthz for http.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	// +kubebuilder:validation:XValidation:rule="self.startsWith('/') && !self.contains(' ')",message="spec.backend.<arp|bgp>.agent.health.path must start with '/' and hold no spaces, like /healthz"
	Path string `json:"path,omitempty"`
}

// Agent health check types (AgentHealth.Type).
const (
	AgentHealthHTTPS = "https"
	AgentHealthHTTP  = "http"
	AgentHealthTCP   = "tcp"
)

// AgentTimers are optional overrides of the agent's election and hand-over timers.
type AgentTimers struct {
	// probeInterval of the failure detector. Default 100ms.
	// +optional
	// +kubebuilder:validation:XValidation:rule="!self.matches('^(0|([0-9]{1,5}([.][0-9]{1,9})?(ns|us|µs|ms|s|m|h)){1,4})$') || (duration(self) >= duration('10ms') && duration(self) <= duration('10s'))",message="spec.backend.<arp|bgp>.agent.timers.probeInterval must be between 10ms and 10s"
	ProbeInterval *Duration `json:"probeInterval,omitempty"`
	// probeTimeout of one probe, shorter than probeInterval. Default 50ms.
	// +optional
	// +kubebuilder:validation:XValidation:rule="!self.matches('^(0|([0-9]{1,5}([.][0-9]{1,9})?(ns|us|µs|ms|s|m|h)){1,4})$') || (duration(self) >= duration('5ms') && duration(self) <= duration('10s'))",message="spec.backend.<arp|bgp>.agent.timers.probeTimeout must be between 5ms and 10s"
	ProbeTimeout *Duration `json:"probeTimeout,omitempty"`
	// contactTimeout: an owner with no direct answer from a majority this long releases.
	// Default 500ms.
	// +optional
	// +kubebuilder:validation:XValidation:rule="!self.matches('^(0|([0-9]{1,5}([.][0-9]{1,9})?(ns|us|µs|ms|s|m|h)){1,4})$') || (duration(self) >= duration('20ms') && duration(self) <= duration('1m'))",message="spec.backend.<arp|bgp>.agent.timers.contactTimeout must be between 20ms and 1m"
	ContactTimeout *Duration `json:"contactTimeout,omitempty"`
	// settle: after regaining quorum a member waits this long before it may claim. Default 500ms.
	// +optional
	// +kubebuilder:validation:XValidation:rule="!self.matches('^(0|([0-9]{1,5}([.][0-9]{1,9})?(ns|us|µs|ms|s|m|h)){1,4})$') || (duration(self) >= duration('0s') && duration(self) <= duration('1m'))",message="spec.backend.<arp|bgp>.agent.timers.settle must be between 0s and 1m"
	Settle *Duration `json:"settle,omitempty"`
	// drain: a quiescing owner keeps the VIP this long after its successor announced it.
	// Default 500ms.
	// +optional
	// +kubebuilder:validation:XValidation:rule="!self.matches('^(0|([0-9]{1,5}([.][0-9]{1,9})?(ns|us|µs|ms|s|m|h)){1,4})$') || (duration(self) >= duration('0s') && duration(self) <= duration('1m'))",message="spec.backend.<arp|bgp>.agent.timers.drain must be between 0s and 1m"
	Drain *Duration `json:"drain,omitempty"`
	// busyDrain (ARP): after drain, a quiescing owner keeps the VIP, quiet, for up to this much
	// longer while connections to it still carry requests (their clients sent at least 512 bytes
	// in the last 2 seconds), and releases as soon as none does. Set it with kube-apiserver's
	// --goaway-chance: the API server's GOAWAY moves a busy HTTP/2 client to the successor and
	// client-go resends what the old connection left unanswered, where the release's reset would
	// fail the write in flight (client-go resends only GETs). Connections left with only a watch
	// do not count; the release resets them and client-go reopens the watch. Default 0: off.
	// Not with spec.backend.arp.loadBalancing spread: spread connections reach the API servers at
	// node addresses, not the VIP, so none would count.
	// +optional
	// +kubebuilder:validation:XValidation:rule="!self.matches('^(0|([0-9]{1,5}([.][0-9]{1,9})?(ns|us|µs|ms|s|m|h)){1,4})$') || (duration(self) >= duration('0s') && duration(self) <= duration('5m'))",message="spec.backend.<arp|bgp>.agent.timers.busyDrain must be between 0s and 5m"
	BusyDrain *Duration `json:"busyDrain,omitempty"`
}
