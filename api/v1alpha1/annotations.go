package v1alpha1

import (
	"crypto/sha256"
	"encoding/hex"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
)

// Annotations and labels from the Cluster API load balancer provider proposal
// (kubernetes-sigs/cluster-api #4389). They are set on member objects (Machines or Nodes).
const (
	// NameAnnotation names the LoadBalancer a member belongs to. The controller sets it.
	NameAnnotation = "loadbalancer.cluster.x-k8s.io/name"

	// StatusAnnotation mirrors the member's TargetState. The controller sets it.
	StatusAnnotation = "loadbalancer.cluster.x-k8s.io/status"

	// DisabledAnnotation is set by people or tools on a member to take it out of rotation
	// (any value). Removing it puts the member back.
	DisabledAnnotation = "loadbalancer.cluster.x-k8s.io/disabled"

	// EndpointPublishedByAnnotation is set on a Cluster, in the same patch that writes its
	// spec.controlPlaneEndpoint, to the name of the LoadBalancer that wrote it. caplb never adopts
	// an endpoint it published itself as if a person had chosen it.
	EndpointPublishedByAnnotation = "loadbalancer.cluster.x-k8s.io/endpoint-published-by"

	// HookOwner is the value of the deletion-hook annotations caplb places, so that a person
	// reading a Machine can tell who holds it.
	HookOwner = "loadbalancer.cluster.x-k8s.io"
)

// PreDrainHookAnnotation returns the key of the pre-drain deletion hook that the LoadBalancer
// named lbName places on its member Machines. CAPI matches the prefix only; the suffix keeps the
// hooks of two LoadBalancers apart and stays within the 63-character name limit of a key.
func PreDrainHookAnnotation(lbName string) string {
	suffix := "caplb-" + lbName
	if len(suffix) > 63 {
		sum := sha256.Sum256([]byte(lbName))
		suffix = "caplb-" + lbName[:40] + "-" + hex.EncodeToString(sum[:])[:16]
	}
	return clusterv1.PreDrainDeleteHookAnnotationPrefix + "/" + suffix
}

// TargetState is a member's place in the load balancer's life cycle, as named by the proposal.
// +kubebuilder:validation:Enum=adding;active;disabling;disabled;removing;removed
type TargetState string

const (
	// TargetAdding: selected, waiting for the backend to put it into rotation.
	TargetAdding TargetState = "adding"
	// TargetActive: in rotation; the backend confirmed it.
	TargetActive TargetState = "active"
	// TargetDisabling: the user set DisabledAnnotation; the backend is quiescing it.
	TargetDisabling TargetState = "disabling"
	// TargetDisabled: out of rotation at the user's request; quiesced.
	TargetDisabled TargetState = "disabled"
	// TargetRemoving: the member is being deleted; the backend is quiescing it before CAPI drains it.
	TargetRemoving TargetState = "removing"
	// TargetRemoved: quiesced and out of rotation; caplb released its deletion hook.
	TargetRemoved TargetState = "removed"
)

// InRotation reports whether a member in this state should receive traffic.
func (s TargetState) InRotation() bool { return s == TargetAdding || s == TargetActive }
