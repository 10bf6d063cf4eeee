package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// EndpointTakeOver asks this LoadBalancer to take its Cluster's API endpoint over from another
// LoadBalancer of the same Cluster (docs/endpoint-move.md). Each LoadBalancer's endpoint stays
// immutable: the Cluster moves from one LoadBalancer (E1) to another (E2), with both served
// until the user deletes the old one. It is a struct, not a bare name, so that the move's
// options sit next to the reference they qualify; it has no namespace because the old
// LoadBalancer must be in this one (a Cluster's LoadBalancers all are).
// +kubebuilder:validation:XValidation:rule="self.name == oldSelf.name",message="spec.takeOverEndpointFrom.name cannot change during a move: remove spec.takeOverEndpointFrom (before the switch) to abort, then set it again"
type EndpointTakeOver struct {
	// name of the LoadBalancer, in this namespace, that publishes the Cluster's endpoint now.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`

	// certSANs says who puts this LoadBalancer's host (and the old endpoint's host, which new
	// Machines no longer get from the Cluster's endpoint) into the API servers' certificates.
	// Report (the default): the EndpointMove condition names the members whose certificate
	// lacks it and what to add to the control plane's certSANs; the move waits. AddToControlPlane:
	// caplb adds both hosts to
	// KubeadmControlPlane.spec.kubeadmConfigSpec.clusterConfiguration.apiServer.certSANs, which
	// rolls every control-plane Machine; the move waits for the rollout.
	// +optional
	// +kubebuilder:validation:Enum=Report;AddToControlPlane
	CertSANs CertSANsPolicy `json:"certSANs,omitempty"`

	// restartKubeProxy: once the kube-proxy ConfigMap names the new endpoint, caplb restarts
	// the kube-system/kube-proxy DaemonSet (its Pods read the ConfigMap only when they start)
	// by setting the pod-template annotation
	// loadbalancer.cluster.x-k8s.io/endpoint to the new endpoint, as `kubectl rollout restart`
	// sets one. Off by default: a restart interrupts Service routing on each node for a moment.
	// +optional
	RestartKubeProxy bool `json:"restartKubeProxy,omitempty"`
}

// KubeProxyEndpointAnnotation is the kube-proxy DaemonSet's pod-template annotation an endpoint
// move with restartKubeProxy sets to the new endpoint (host:port): the change rolls its Pods onto
// the rewritten ConfigMap, and setting it again to the same value changes nothing.
const KubeProxyEndpointAnnotation = "loadbalancer.cluster.x-k8s.io/endpoint"

// CertSANsPolicy says whether caplb edits the control plane's certSANs during an endpoint move.
type CertSANsPolicy string

const (
	// CertSANsReport: caplb only reports what is missing; the user edits the control plane.
	CertSANsReport CertSANsPolicy = "Report"
	// CertSANsAddToControlPlane: caplb adds the missing hosts to the KubeadmControlPlane.
	CertSANsAddToControlPlane CertSANsPolicy = "AddToControlPlane"
)

// EffectiveCertSANs returns the policy with its default applied.
func (t *EndpointTakeOver) EffectiveCertSANs() CertSANsPolicy {
	if t == nil || t.CertSANs == "" {
		return CertSANsReport
	}
	return t.CertSANs
}

// EndpointMoveStep is where an endpoint move stands. Steps run in the order below; each is
// idempotent, so a manager restarted at any step does it again and finds it done (no second
// write).
type EndpointMoveStep string

// The steps of an endpoint move, in order.
const (
	// MoveStepServe: waiting for this LoadBalancer to be Ready on its own endpoint (E2).
	MoveStepServe EndpointMoveStep = "Serve"
	// MoveStepCertSANs: waiting for every member's serving certificate to carry E2.
	MoveStepCertSANs EndpointMoveStep = "CertSANs"
	// MoveStepClusterInfo: rewriting kube-public/cluster-info (the bootstrap signer re-signs it).
	MoveStepClusterInfo EndpointMoveStep = "ClusterInfo"
	// MoveStepKubeadmConfig: rewriting kube-system/kubeadm-config's controlPlaneEndpoint.
	MoveStepKubeadmConfig EndpointMoveStep = "KubeadmConfig"
	// MoveStepKubeProxy: rewriting kube-system/kube-proxy's kubeconfig.conf.
	MoveStepKubeProxy EndpointMoveStep = "KubeProxy"
	// MoveStepKubeconfigSecret: rewriting the management cluster's <cluster>-kubeconfig Secret.
	MoveStepKubeconfigSecret EndpointMoveStep = "KubeconfigSecret"
	// MoveStepReleaseOld: setting the old LoadBalancer's spec.publishClusterEndpoint false.
	MoveStepReleaseOld EndpointMoveStep = "ReleaseOld"
	// MoveStepClusterEndpoint: writing E2 to Cluster.spec.controlPlaneEndpoint.
	MoveStepClusterEndpoint EndpointMoveStep = "ClusterEndpoint"
	// MoveStepPublish: this LoadBalancer becomes the publisher (publishClusterEndpoint true,
	// takeOverEndpointFrom removed, in one patch).
	MoveStepPublish EndpointMoveStep = "Publish"
	// MoveStepDone: the Cluster is on E2; E1 is served until the old LoadBalancer is deleted.
	MoveStepDone EndpointMoveStep = "Done"
)

// EndpointMoveStatus records an endpoint move. It is written before each step is taken, so a
// restarted manager resumes where it stopped; both endpoints are recorded at the start so that
// the move does not depend on reading them again (the old LoadBalancer may be deleted after
// the switch).
type EndpointMoveStatus struct {
	// from is the LoadBalancer the endpoint is taken over from.
	From string `json:"from"`

	// oldEndpoint is E1, the endpoint the Cluster had when the move started.
	// +optional
	OldEndpoint APIEndpoint `json:"oldEndpoint,omitzero"`

	// newEndpoint is E2, this LoadBalancer's endpoint.
	// +optional
	NewEndpoint APIEndpoint `json:"newEndpoint,omitzero"`

	// step is the step in progress (Done when finished).
	// +optional
	Step EndpointMoveStep `json:"step,omitempty"`

	// machinesBeforeSwitch are the Cluster's Machines that existed when the Cluster switched to
	// E2: their admin.conf (control plane) and kubelet.conf (workers) still name E1 until they
	// are replaced (KCP rollout.after, a MachineDeployment rollout).
	// +optional
	// +listType=set
	MachinesBeforeSwitch []string `json:"machinesBeforeSwitch,omitempty"`

	// switchedAt is when the Cluster's endpoint was switched to E2.
	// +optional
	SwitchedAt *metav1.Time `json:"switchedAt,omitempty"`
}
