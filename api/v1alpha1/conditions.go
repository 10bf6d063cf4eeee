package v1alpha1

// Condition types of a LoadBalancer. All are metav1.Condition.
const (
	// ReadyCondition is True when the endpoint is available and at least one target is active.
	// It summarises EndpointAvailable and TargetsAvailable; its reason is the first failing one's.
	ReadyCondition = "Ready"

	// EndpointAvailableCondition is True when the backend has an endpoint and reports it serving.
	EndpointAvailableCondition = "EndpointAvailable"

	// TargetsAvailableCondition is True when at least one selected target is active.
	TargetsAvailableCondition = "TargetsAvailable"

	// ClusterEndpointCondition is True when the Cluster's spec.controlPlaneEndpoint equals the
	// LoadBalancer's endpoint. False when they differ: caplb never overwrites a Cluster's endpoint.
	ClusterEndpointCondition = "ClusterEndpoint"

	// PausedCondition is True while reconciliation is paused by Cluster.spec.paused or the
	// cluster.x-k8s.io/paused annotation on the LoadBalancer.
	PausedCondition = "Paused"

	// WorkloadClusterReachableCondition is set only for remote Node targets (targetKind Node with
	// spec.clusterName): True while the manager reaches the workload cluster's API server through
	// CAPI's ClusterCache (the <clusterName>-kubeconfig Secret) and its health probe passes. False
	// while it does not: then nothing changes — status.targets keeps the last known members, the
	// Nodes keep their annotations, the agents keep the membership they run and the endpoint stays
	// published. It does not make Ready False by itself (the data plane does not depend on the
	// manager's view); Ready follows what the backend can still verify: the arp and bgp backends
	// cannot read the agents' reports and say so in EndpointAvailable, as for Machine targets.
	WorkloadClusterReachableCondition = "WorkloadClusterReachable"
)

// Condition reasons. A reason is CamelCase and says why a condition has its status.
const (
	// ReadyReason: the condition is satisfied.
	ReadyReason = "Ready"
	// InvalidSpecReason: the spec failed validation; the message names the field and the fix.
	InvalidSpecReason = "InvalidSpec"
	// ReconcileErrorReason: a write the reconcile needed failed (RBAC, admission, the API
	// unreachable): hooks, member annotations or the published endpoint may not be in place. The
	// message carries the error.
	ReconcileErrorReason = "ReconcileError"
	// BackendErrorReason: the backend returned an error; the message carries it.
	BackendErrorReason = "BackendError"
	// APINotInstalledReason: the LoadBalancer (or class) needs an API the cluster does not serve
	// (CAPI's Cluster or Machine, the IPAM contract's IPAddressClaim); the message names the CRD
	// and the fix. The manager discovers APIs at start: it needs a restart after they are installed.
	APINotInstalledReason = "APINotInstalled"

	// EndpointAvailableReason: the backend serves the endpoint.
	EndpointAvailableReason = "EndpointAvailable"
	// WaitingForEndpointReason: the backend has no endpoint yet (e.g. no ready member to publish).
	WaitingForEndpointReason = "WaitingForEndpoint"
	// EndpointUnreachableReason: the endpoint is set but its probe fails.
	EndpointUnreachableReason = "EndpointUnreachable"

	// TargetsAvailableReason: at least one target is active.
	TargetsAvailableReason = "TargetsAvailable"
	// NoTargetsReason: the selector matches no member.
	NoTargetsReason = "NoTargets"
	// NoActiveTargetsReason: members exist but none is active (not ready, disabled or removing).
	NoActiveTargetsReason = "NoActiveTargets"

	// ClusterEndpointSetReason: the Cluster's endpoint equals ours.
	ClusterEndpointSetReason = "ClusterEndpointSet"
	// ClusterEndpointMismatchReason: the Cluster has a different endpoint; caplb left it alone.
	ClusterEndpointMismatchReason = "ClusterEndpointMismatch"
	// ClusterNotFoundReason: spec.clusterName names no Cluster in the namespace.
	ClusterNotFoundReason = "ClusterNotFound"
	// NoClusterReason: the LoadBalancer is standalone (no clusterName); nothing to publish to.
	NoClusterReason = "NoCluster"
	// NotPublisherReason: spec.publishClusterEndpoint is false; another LoadBalancer (or the
	// user) owns the Cluster's endpoint.
	NotPublisherReason = "NotPublisher"
	// AnotherPublisherReason: an older LoadBalancer of the same Cluster publishes its endpoint
	// too; this one does not, until one of them sets spec.publishClusterEndpoint false.
	AnotherPublisherReason = "AnotherPublisher"
	// WorkerTargetsReason: the LoadBalancer's members are (or its selector names) Machines that
	// are not control-plane Machines (no cluster.x-k8s.io/control-plane label): it fronts a
	// service on workers, not the API server, and never publishes the Cluster's endpoint.
	WorkerTargetsReason = "WorkerTargets"

	// PausedReason: reconciliation is paused.
	PausedReason = "Paused"
	// NotPausedReason: reconciliation runs.
	NotPausedReason = "NotPaused"

	// DeletingReason: the LoadBalancer is being deleted and is releasing its members.
	DeletingReason = "Deleting"

	// WorkloadClusterReachableReason: the workload cluster's API server answers the ClusterCache's
	// health probe.
	WorkloadClusterReachableReason = "WorkloadClusterReachable"
	// WorkloadClusterUnreachableReason: the ClusterCache has no connection to the workload cluster
	// (no kubeconfig Secret yet, the Cluster's infrastructure not provisioned, the API server
	// down or refusing the credentials), or its health probe fails. The message says which and
	// since when the last probe passed.
	WorkloadClusterUnreachableReason = "WorkloadClusterUnreachable"
)

// Reasons of WorkloadClusterReachable False when the manager refuses the Cluster's
// <clusterName>-kubeconfig Secret and never dials the workload cluster. Whoever can write a
// Secret in the Cluster's namespace writes that kubeconfig, yet the manager would act on it with
// its own filesystem, processes and network: a file path makes it read a file of its own (its
// ServiceAccount token is one) and send it, a program makes it run one, a proxy URL makes it
// send its requests through a host of the writer's choice. Each reason names the offending
// field; the message names the kubeconfig entry and the inline form to use instead.
const (
	// KubeconfigTokenFileReason: a user has tokenFile. Put the token itself in token.
	KubeconfigTokenFileReason = "KubeconfigTokenFile"
	// KubeconfigClientCertificateFileReason: a user has client-certificate (a file path). Use
	// client-certificate-data.
	KubeconfigClientCertificateFileReason = "KubeconfigClientCertificateFile"
	// KubeconfigClientKeyFileReason: a user has client-key (a file path). Use client-key-data.
	KubeconfigClientKeyFileReason = "KubeconfigClientKeyFile"
	// KubeconfigCertificateAuthorityFileReason: a cluster has certificate-authority (a file
	// path). Use certificate-authority-data.
	KubeconfigCertificateAuthorityFileReason = "KubeconfigCertificateAuthorityFile"
	// KubeconfigExecReason: a user has exec (a credential plugin the manager would run).
	KubeconfigExecReason = "KubeconfigExec"
	// KubeconfigAuthProviderReason: a user has auth-provider (a plugin, which may run a
	// program or read files).
	KubeconfigAuthProviderReason = "KubeconfigAuthProvider"
	// KubeconfigProxyURLReason: a cluster has proxy-url. The manager reaches workload clusters
	// directly (or through its own environment's proxy settings), never through a proxy a
	// Secret names.
	KubeconfigProxyURLReason = "KubeconfigProxyURL"
	// KubeconfigInvalidReason: the Secret's kubeconfig does not parse; nothing in it is used.
	KubeconfigInvalidReason = "KubeconfigInvalid"
)

// Conditions and reasons of the VIP backends (arp, bgp).
const (
	// AddressAllocatedCondition is True when the VIP is known: spec.endpoint.host, or the
	// address the IPAM pool allocated to the LoadBalancer's IPAddressClaim. While it is False its
	// message says what allocation waits for.
	AddressAllocatedCondition = "AddressAllocated"
	// AddressAllocatedReason: the VIP is known.
	AddressAllocatedReason = "AddressAllocated"
	// WaitingForAddressReason: the IPAddressClaim exists and the pool has not allocated yet (the
	// pool's provider is missing, the pool is exhausted, or the Cluster is paused).
	WaitingForAddressReason = "WaitingForAddress"
	// PoolNotFoundReason: spec.backend.<kind>.addressFrom.poolRef names no pool.
	PoolNotFoundReason = "PoolNotFound"

	// AgentsReadyCondition is True when every member's node agent reports the current
	// membership version. Its message lists the members that lag.
	AgentsReadyCondition = "AgentsReady"
	// AgentsReadyReason: every member's agent runs the current membership.
	AgentsReadyReason = "AgentsReady"
	// WaitingForAgentsReason: some member's agent has not reported, or reports an older membership.
	WaitingForAgentsReason = "WaitingForAgents"
)

// The condition and reasons of a takeover from kube-vip (spec.backend.<arp|bgp>.takeOver.kubeVIP).
// The manager reads kube-vip's mirror Pods (kube-system/kube-vip-<node>) in the workload cluster
// and judges the configuration kube-vip runs with, from the Pods' env and args as kube-vip itself
// reads them. Each False reason names one setting that makes a hand-over unsafe or impossible;
// the message names the Pods, the setting and the fix. See docs/migrate-from-kube-vip.md.
const (
	// KubeVIPTakeOverReadyCondition is set only with spec.backend.<arp|bgp>.takeOver.kubeVIP: True
	// when every kube-vip mirror Pod runs a configuration caplb can take the VIP over from (its
	// message names the Lease and the nodes), False with a reason below when not, Unknown while
	// the Pods cannot be read.
	KubeVIPTakeOverReadyCondition = "KubeVIPTakeOverReady"
	// KubeVIPTakeOverReadyReason: kube-vip serves the VIP in the backend's mode (ARP with Lease
	// election; BGP with or without it), and nothing in its configuration stands in the way.
	KubeVIPTakeOverReadyReason = "KubeVIPTakeOverReady"
	// KubeVIPPodsUnreadableReason (Unknown): the workload cluster's Pods cannot be read yet (no
	// connection, or RBAC); the message carries the error.
	KubeVIPPodsUnreadableReason = "KubeVIPPodsUnreadable"
	// KubeVIPNotFoundReason: no kube-vip mirror Pod in kube-system: kube-vip does not run as a
	// static pod (a DaemonSet is an in-place takeover, not supported), or it is gone already.
	KubeVIPNotFoundReason = "KubeVIPNotFound"
	// KubeVIPConfigUnreadableReason: a setting the check needs comes from somewhere the manager
	// cannot read (a config file on the node, an env valueFrom) or does not parse (kube-vip
	// would not start with it either).
	KubeVIPConfigUnreadableReason = "KubeVIPConfigUnreadable"
	// KubeVIPPodsDisagreeReason: the mirror Pods run different configurations (kube-vip's own
	// change is half rolled out); which one would hand over is not known.
	KubeVIPPodsDisagreeReason = "KubeVIPPodsDisagree"
	// KubeVIPControlPlaneDisabledReason: cp_enable is not true: this kube-vip does not serve a
	// control-plane VIP, so there is nothing to take over.
	KubeVIPControlPlaneDisabledReason = "KubeVIPControlPlaneDisabled"
	// KubeVIPAddressMismatchReason: kube-vip's address (or vip_address) is not the
	// LoadBalancer's VIP (spec.endpoint.host), or is a DNS name or several addresses.
	KubeVIPAddressMismatchReason = "KubeVIPAddressMismatch"
	// KubeVIPBGPEnabledReason: kube-vip announces the VIP by BGP (bgp_enable); the arp backend
	// takes over an ARP VIP only (spec.backend.bgp.takeOver takes over a BGP one).
	KubeVIPBGPEnabledReason = "KubeVIPBGPEnabled"
	// KubeVIPBGPDisabledReason: bgp_enable is not true under spec.backend.bgp.takeOver: kube-vip
	// does not announce the VIP by BGP (an ARP kube-vip is taken over by spec.backend.arp).
	KubeVIPBGPDisabledReason = "KubeVIPBGPDisabled"
	// KubeVIPModeAmbiguousReason: vip_arp and bgp_enable are both true under
	// spec.backend.bgp.takeOver. kube-vip v0.x then announces by BGP and also sends gratuitous
	// ARP for the VIP, v1.x runs in ARP mode only: which one a Pod runs is not known from its
	// manifest, and clients that reach the VIP by ARP would lose it with kube-vip.
	KubeVIPModeAmbiguousReason = "KubeVIPModeAmbiguous"
	// KubeVIPPeersMismatchReason: under spec.backend.bgp.takeOver, a router kube-vip announces
	// the VIP to (bgp_peers, bgp_peeraddress) is not in spec.backend.bgp.peers, or with another
	// AS, or kube-vip names no router the manager can read: clients behind that router would
	// lose the VIP when kube-vip withdraws, since no caplb member announces it there.
	KubeVIPPeersMismatchReason = "KubeVIPPeersMismatch"
	// KubeVIPARPDisabledReason: vip_arp is not true: kube-vip does not answer ARP for the VIP.
	KubeVIPARPDisabledReason = "KubeVIPARPDisabled"
	// KubeVIPLeaderElectionDisabledReason: vip_leaderelection is not true under
	// spec.backend.arp.takeOver: there is no Lease to fence kube-vip with. (A BGP kube-vip
	// without it is allowed: every node announces, and caplb's members announce beside it.)
	KubeVIPLeaderElectionDisabledReason = "KubeVIPLeaderElectionDisabled"
	// KubeVIPEtcdElectionReason: kube-vip elects through etcd (--leaderElectionType etcd), not
	// a Kubernetes Lease: the manager cannot fence it. Not supported.
	KubeVIPEtcdElectionReason = "KubeVIPEtcdElection"
	// KubeVIPLeaseMismatchReason: kube-vip elects on another Lease than
	// spec.backend.<arp|bgp>.takeOver.kubeVIP names; a fence there would not stop it.
	KubeVIPLeaseMismatchReason = "KubeVIPLeaseMismatch"
	// KubeVIPPreserveOnLeadershipLossReason: vip_preserve_on_leadership_loss is true under
	// spec.backend.arp.takeOver: a fenced kube-vip keeps the VIP on its interface, so two nodes
	// would hold it. Not supported. (Not judged under BGP: the routers follow the announcements,
	// not the address.)
	KubeVIPPreserveOnLeadershipLossReason = "KubeVIPPreserveOnLeadershipLoss"
	// KubeVIPServiceVIPsReason: svc_enable is true (CAPV's template sets it) and
	// spec.backend.<arp|bgp>.takeOver.kubeVIP.acknowledgeServiceVIPs is not: kube-vip's Service VIPs
	// would go with it.
	KubeVIPServiceVIPsReason = "KubeVIPServiceVIPs"
)

// The hand-over's phase, once the check allows it: the fence Lease the manager writes in the
// workload cluster under kube-vip's election Lease, so that every kube-vip steps down and stays a
// follower, and its retirement; or, for a BGP kube-vip without Lease election, the overlap until
// its nodes are gone. See docs/migrate-from-kube-vip.md.
const (
	// KubeVIPTakeOverCondition is set with spec.backend.<arp|bgp>.takeOver.kubeVIP (and, after
	// the field is removed, until the fence it wrote is gone): True once kube-vip is retired,
	// False while the hand-over waits or runs, Unknown while the fence cannot be read or written.
	// Its message names the fence Lease (namespace/name).
	KubeVIPTakeOverCondition = "KubeVIPTakeOver"
	// KubeVIPFencePendingReason (False): no fence yet: KubeVIPTakeOverReady is not True, or no
	// caplb member is active, so kube-vip keeps the VIP.
	KubeVIPFencePendingReason = "KubeVIPFencePending"
	// KubeVIPFencedReason (False): the manager holds kube-vip's Lease under caplb's name and
	// renews it while a kube-vip mirror Pod exists; kube-vip's leader drops the VIP within its
	// renew deadline (BGP: withdraws its route), and caplb's owner claims it once nobody answers
	// ARP for it (BGP: caplb's members announce already).
	KubeVIPFencedReason = "KubeVIPFenced"
	// KubeVIPOverlappingReason (False): a BGP kube-vip without Lease election: every kube-vip node
	// announces the VIP beside caplb's members, and the routers spread connections across both.
	// Nothing is fenced (nothing caplb writes makes kube-vip withdraw); each kube-vip node
	// withdraws as its Machine goes.
	KubeVIPOverlappingReason = "KubeVIPOverlapping"
	// KubeVIPFenceHeldReason (False): the Lease is held, unexpired, by someone that is neither
	// kube-vip on one of its nodes nor this LoadBalancer (another LoadBalancer's fence, another
	// tool); the manager does not take it.
	KubeVIPFenceHeldReason = "KubeVIPFenceHeld"
	// KubeVIPFenceFailedReason (Unknown): reading, writing or deleting the fence failed (a write
	// conflict with kube-vip's own renewal, RBAC, the API unreachable); retried on the next
	// reconcile. The message carries the error.
	KubeVIPFenceFailedReason = "KubeVIPFenceFailed"
	// KubeVIPRetiredReason (True): no kube-vip mirror Pod is left and the fence, if any, is
	// deleted: caplb serves the VIP alone; spec.backend.<arp|bgp>.takeOver can be removed.
	KubeVIPRetiredReason = "KubeVIPRetired"
)

// Conditions and reasons of the wireguard backend.
const (
	// GatewaysReadyCondition is True when every gateway in spec.backend.wireguard.gateways has
	// reported recently (its ConfigMap <clusterName>-caplb-gateway-<name>). Its message names the
	// silent ones. Members are in rotation only where a gateway reports them healthy.
	GatewaysReadyCondition = "GatewaysReady"
	// GatewaysReadyReason: every gateway reports.
	GatewaysReadyReason = "GatewaysReady"
	// WaitingForGatewaysReason: some gateway has never reported or its report is stale.
	WaitingForGatewaysReason = "WaitingForGateways"
	// GatewayPortConflictReason: another LoadBalancer already uses a port this one needs on a
	// shared gateway host; nothing is published or rendered until the spec is fixed.
	GatewayPortConflictReason = "GatewayPortConflict"
)

// Reasons of a LoadBalancerClass's Ready condition (it also uses ReadyReason, InvalidSpecReason,
// ReconcileErrorReason and the Paused condition).
const (
	// WaitingForLoadBalancersReason: every matched Cluster has its LoadBalancer, in sync with the
	// template, but some are not Ready yet; the message names them.
	WaitingForLoadBalancersReason = "WaitingForLoadBalancers"
	// NoClustersMatchedReason: the selector matches no Cluster; there is nothing to do.
	NoClustersMatchedReason = "NoClustersMatched"
	// TemplateNotAppliedReason: some LoadBalancers keep a value the template no longer has,
	// because the LoadBalancer's immutability rules forbid the change (backend kind, addressFrom,
	// a published endpoint) or admission refused it; the message names each and the field. The
	// class never fights admission: recreate the LoadBalancer (or the Cluster) to apply it.
	TemplateNotAppliedReason = "TemplateNotApplied"
	// LoadBalancerNameConflictReason: a LoadBalancer named <cluster>-<class> exists that this
	// class did not create (no class label or another class's); the class leaves it alone.
	LoadBalancerNameConflictReason = "LoadBalancerNameConflict"
)

// The EndpointMove condition and its reasons, on a LoadBalancer with spec.takeOverEndpointFrom
// (docs/endpoint-move.md). Its reason says which step the move waits at; its message names the
// members or objects concerned. The condition stays after the move (Switched) as its record.
const (
	// EndpointMoveCondition is True once the Cluster has switched to this LoadBalancer's endpoint,
	// False while the move waits or works, and False with EndpointMoveRefusedReason when it
	// cannot start or go on.
	EndpointMoveCondition = "EndpointMove"
	// (WaitingForEndpointReason, shared with EndpointAvailable: this LoadBalancer is not Ready on
	// its own endpoint yet; nothing is rewritten until it is.)

	// WaitingForCertSANsReason: some member's serving certificate does not verify as this
	// LoadBalancer's host; the message lists them and what to add to the control plane's certSANs
	// (or, with certSANs AddToControlPlane, that caplb added it and waits for the rollout).
	WaitingForCertSANsReason = "WaitingForCertSANs"
	// SwitchingReason: the rewrites are under way; the message names the step (status.endpointMove.step).
	SwitchingReason = "Switching"
	// SwitchedReason: the Cluster's endpoint is this LoadBalancer's; the message lists the
	// Machines created before the switch, which still name the old endpoint.
	SwitchedReason = "Switched"
	// EndpointMoveRefusedReason: the move cannot start or go on (the old LoadBalancer is gone
	// before the switch, is not the publisher, names another Cluster, or the Cluster's endpoint
	// is neither the old nor the new one, e.g. a GitOps tool reverted it). Nothing more is
	// written until the cause is fixed; the message names it.
	EndpointMoveRefusedReason = "EndpointMoveRefused"
)
