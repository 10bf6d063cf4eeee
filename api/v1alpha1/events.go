package v1alpha1

// Event reasons the controller records on a LoadBalancer (regarding the LoadBalancer, related to
// the member where one is involved). Integration tests and alerting may match on them.
const (
	// EventTargetAdded (Normal): a newly selected member joined the LoadBalancer (state adding, or
	// disabled when it already carries the disabled annotation).
	EventTargetAdded = "TargetAdded"
	// EventTargetActive (Normal): the backend put a member into rotation (adding → active).
	EventTargetActive = "TargetActive"
	// EventTargetLeftRotation (Warning): the backend took an active member out of rotation on its
	// own (e.g. the member stopped being ready); it is adding again until the backend takes it back.
	EventTargetLeftRotation = "TargetLeftRotation"
	// EventTargetDisabling (Normal): the user set the disabled annotation; quiescing.
	EventTargetDisabling = "TargetDisabling"
	// EventTargetDisabled (Normal): the member is quiesced and out of rotation.
	EventTargetDisabled = "TargetDisabled"
	// EventTargetEnabled (Normal): the user removed the disabled annotation; the backend restored
	// the member and it is adding again.
	EventTargetEnabled = "TargetEnabled"
	// EventTargetRemoving (Normal): the member is being deleted; quiescing before CAPI drains it.
	EventTargetRemoving = "TargetRemoving"
	// EventTargetRemoved (Normal): the member is quiesced; caplb released its pre-drain hook.
	EventTargetRemoved = "TargetRemoved"
	// EventTargetReleased (Normal): the member no longer matches the selector; caplb removed its
	// annotations and hook without quiescing.
	EventTargetReleased = "TargetReleased"
	// EventTargetGoneWithoutQuiesce (Warning): a member disappeared before it was quiesced, e.g.
	// because CAPI skipped the pre-drain hooks (no nodeRef, last control-plane Machine, Cluster or
	// control plane being deleted) or a Node was deleted directly.
	EventTargetGoneWithoutQuiesce = "TargetGoneWithoutQuiesce"
	// EventTargetClaimed (Warning): a selected member already belongs to another LoadBalancer
	// (its name annotation names it); it is left out.
	EventTargetClaimed = "TargetClaimed"
	// EventQuiesceTimeout (Warning): the backend did not confirm a quiesce within
	// spec.quiesce.timeout; caplb carried on (released the hook / marked the member disabled).
	EventQuiesceTimeout = "QuiesceTimeout"

	// EventEndpointAvailable (Normal) and EventEndpointUnavailable (Warning): the
	// EndpointAvailable condition changed.
	EventEndpointAvailable   = "EndpointAvailable"
	EventEndpointUnavailable = "EndpointUnavailable"
	// EventEndpointMoved (Warning, from the static backend): the published member address moved to
	// another member because the previous one left rotation.
	EventEndpointMoved = "EndpointMoved"
	// EventClusterEndpointSet (Normal): caplb wrote the Cluster's spec.controlPlaneEndpoint.
	EventClusterEndpointSet = "ClusterEndpointSet"
	// EventEndpointAdopted (Normal): the Cluster already had an endpoint and spec.endpoint.host was
	// empty; caplb copied it into spec.endpoint.
	EventEndpointAdopted = "EndpointAdopted"
	// EventClusterEndpointMismatch (Warning): the Cluster's endpoint differs from ours; caplb does
	// not overwrite it.
	EventClusterEndpointMismatch = "ClusterEndpointMismatch"
	// EventWorkerTargets (Warning): the LoadBalancer would publish the Cluster's endpoint
	// (spec.publishClusterEndpoint unset or true) but its members are not control-plane Machines;
	// it does not publish. Recorded once per transition.
	EventWorkerTargets = "WorkerTargets"
	// EventAnotherPublisher (Warning): an older LoadBalancer of the same Cluster publishes its
	// endpoint; this one does not.
	EventAnotherPublisher = "AnotherPublisher"
	// EventControlPlaneEndpointSet (Normal): caplb wrote spec.controlPlaneEndpoint of the control
	// plane object whose spec.loadBalancerRef names this LoadBalancer.
	EventControlPlaneEndpointSet = "ControlPlaneEndpointSet"

	// EventClusterEndpointMoved (Warning): an endpoint move (spec.takeOverEndpointFrom) switched
	// the Cluster's spec.controlPlaneEndpoint from the old LoadBalancer's endpoint to this one's.
	// Warning because caplb overwrote a Cluster's endpoint, which it otherwise never does.
	EventClusterEndpointMoved = "ClusterEndpointMoved"
	// EventKubeVIPFenced (Normal): the manager wrote the fence Lease over kube-vip's election
	// Lease (spec.backend.<arp|bgp>.takeOver.kubeVIP); kube-vip lets go of the VIP.
	EventKubeVIPFenced = "KubeVIPFenced"
	// EventKubeVIPRetired (Normal): no kube-vip mirror Pod is left; the manager deleted the fence
	// (if it wrote one).
	EventKubeVIPRetired = "KubeVIPRetired"
	// EventKubeVIPFenceRemoved (Normal): spec.backend.<arp|bgp>.takeOver was removed before kube-vip
	// retired; the manager deleted its fence and kube-vip elects a leader again (rollback).
	EventKubeVIPFenceRemoved = "KubeVIPFenceRemoved"

	// EventInvalidSpec (Warning): validation failed; the message names the field and the fix.
	EventInvalidSpec = "InvalidSpec"
	// EventAPINotInstalled (Warning): the LoadBalancer needs an API the cluster does not serve.
	EventAPINotInstalled = "APINotInstalled"
	// EventBackendError (Warning): a backend call failed.
	EventBackendError = "BackendError"
	// EventReleased (Normal): the LoadBalancer is being deleted and released every hook and
	// annotation it had placed, and its backend.
	EventReleased = "Released"
)

// Event reasons the LoadBalancerClass controller records on a class (related to the
// LoadBalancer).
const (
	// EventClassLoadBalancerCreated (Normal): a Cluster matched; its LoadBalancer was created.
	EventClassLoadBalancerCreated = "LoadBalancerCreated"
	// EventClassLoadBalancerDeleted (Normal): a Cluster stopped matching (or the class is being
	// deleted); its LoadBalancer was deleted and releases its members.
	EventClassLoadBalancerDeleted = "LoadBalancerDeleted"
)
