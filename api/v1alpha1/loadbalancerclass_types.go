package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// LoadBalancerClassFinalizer is held by a LoadBalancerClass until it has deleted the
// LoadBalancers it created.
const LoadBalancerClassFinalizer = "loadbalancer.cluster.x-k8s.io/class-finalizer"

// ClassLabel is set on every LoadBalancer a LoadBalancerClass created, to the class's name. The
// class owns (and may update or delete) only LoadBalancers that carry it.
const ClassLabel = "loadbalancer.cluster.x-k8s.io/class"

// LoadBalancerClassSpec selects Clusters and says what LoadBalancer each one gets.
type LoadBalancerClassSpec struct {
	// clusterSelector picks Clusters in the class's namespace by label. Every matching Cluster
	// gets one LoadBalancer named <cluster>-<class>; a Cluster that stops matching loses it. An
	// empty selector matches every Cluster in the namespace.
	// +required
	// +kubebuilder:validation:XValidation:rule="!has(self.matchExpressions) || self.matchExpressions.all(e, e.operator in ['In', 'NotIn', 'Exists', 'DoesNotExist'])",message="spec.clusterSelector.matchExpressions[].operator must be one of In, NotIn, Exists, DoesNotExist"
	// +kubebuilder:validation:XValidation:rule="!has(self.matchExpressions) || self.matchExpressions.all(e, (e.operator in ['In', 'NotIn']) == (has(e.values) && size(e.values) > 0))",message="spec.clusterSelector.matchExpressions[]: operators In and NotIn need at least one value, Exists and DoesNotExist take none"
	ClusterSelector metav1.LabelSelector `json:"clusterSelector"`

	// template is the LoadBalancer every matching Cluster gets; the controller fills
	// spec.clusterName (and targetKind Machine) per Cluster.
	// +required
	Template LoadBalancerClassTemplate `json:"template"`
}

// LoadBalancerClassTemplate is the LoadBalancer stamped out per Cluster.
type LoadBalancerClassTemplate struct {
	// spec of each LoadBalancer, without clusterName and targetKind.
	// +required
	Spec LoadBalancerTemplateSpec `json:"spec"`
}

// LoadBalancerTemplateSpec is a LoadBalancerSpec without the per-Cluster fields. One template
// serves many Clusters, so it cannot carry a per-Cluster VIP: the arp and bgp backends must
// allocate it from an IPAM pool (addressFrom.poolRef), and endpoint.host must stay empty. (A
// static template may name a host: an external load balancer several Clusters share is rare,
// but a DNS name per class is legitimate.) The backend kind and addressFrom cannot change once
// set, as on a LoadBalancer: existing LoadBalancers could not follow.
// +kubebuilder:validation:XValidation:rule="!(has(self.backend.arp) || has(self.backend.bgp)) || !has(self.endpoint) || !has(self.endpoint.host) || size(self.endpoint.host) == 0",message="spec.template.spec.endpoint.host must be empty for the arp and bgp backends: one template serves many Clusters and cannot carry a per-Cluster VIP; allocate it with spec.template.spec.backend.<arp|bgp>.addressFrom.poolRef"
// +kubebuilder:validation:XValidation:rule="!has(self.backend.arp) || has(self.backend.arp.addressFrom)",message="spec.template.spec.backend.arp.addressFrom.poolRef is required: one template serves many Clusters, so each Cluster's VIP comes from an IPAM pool"
// +kubebuilder:validation:XValidation:rule="!has(self.backend.bgp) || has(self.backend.bgp.addressFrom)",message="spec.template.spec.backend.bgp.addressFrom.poolRef is required: one template serves many Clusters, so each Cluster's VIP comes from an IPAM pool"
type LoadBalancerTemplateSpec struct {
	// selector narrows each Cluster's control-plane Machines (see LoadBalancer spec.selector).
	// +optional
	// +kubebuilder:validation:XValidation:rule="!has(self.matchExpressions) || self.matchExpressions.all(e, e.operator in ['In', 'NotIn', 'Exists', 'DoesNotExist'])",message="spec.template.spec.selector.matchExpressions[].operator must be one of In, NotIn, Exists, DoesNotExist"
	// +kubebuilder:validation:XValidation:rule="!has(self.matchExpressions) || self.matchExpressions.all(e, (e.operator in ['In', 'NotIn']) == (has(e.values) && size(e.values) > 0))",message="spec.template.spec.selector.matchExpressions[]: operators In and NotIn need at least one value, Exists and DoesNotExist take none"
	Selector *metav1.LabelSelector `json:"selector,omitempty"`

	// publishClusterEndpoint of each LoadBalancer (see LoadBalancer spec.publishClusterEndpoint):
	// false for a class that gives Clusters an extra endpoint beside the one another class (or the
	// user) publishes. Default true.
	// +optional
	PublishClusterEndpoint *bool `json:"publishClusterEndpoint,omitempty"`

	// endpoint of each LoadBalancer (see LoadBalancer spec.endpoint). host only for static.
	// +optional
	Endpoint APIEndpoint `json:"endpoint,omitzero"`

	// targetPort is the port the members' API servers listen on.
	// +optional
	// +kubebuilder:default=6443
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	TargetPort int32 `json:"targetPort,omitempty"`

	// backend of each LoadBalancer.
	// +required
	Backend Backend `json:"backend"`

	// healthCheck of each LoadBalancer.
	// +optional
	// +kubebuilder:default={interval: "10s", timeout: "2s"}
	HealthCheck HealthCheck `json:"healthCheck,omitzero"`

	// quiesce of each LoadBalancer.
	// +optional
	// +kubebuilder:default={drainPeriod: "10s", timeout: "2m"}
	Quiesce Quiesce `json:"quiesce,omitzero"`
}

// LoadBalancerSpecFor returns the LoadBalancer spec the template gives the named Cluster.
func (t *LoadBalancerTemplateSpec) LoadBalancerSpecFor(clusterName string) LoadBalancerSpec {
	c := t.DeepCopy()
	return LoadBalancerSpec{
		ClusterName:            clusterName,
		TargetKind:             TargetKind{APIGroup: MachineAPIGroup, Kind: MachineKind},
		Selector:               c.Selector,
		PublishClusterEndpoint: c.PublishClusterEndpoint,
		Endpoint:               c.Endpoint,
		TargetPort:             c.TargetPort,
		Backend:                c.Backend,
		HealthCheck:            c.HealthCheck,
		Quiesce:                c.Quiesce,
	}
}

// LoadBalancerClassStatus is the observed state of a LoadBalancerClass.
type LoadBalancerClassStatus struct {
	// matchedClusters counts the Clusters the selector matches (Clusters being deleted excluded).
	// +optional
	MatchedClusters int32 `json:"matchedClusters"`

	// readyLoadBalancers counts the class's LoadBalancers whose Ready condition is True.
	// +optional
	ReadyLoadBalancers int32 `json:"readyLoadBalancers"`

	// observedGeneration is the generation last reconciled.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// conditions: Ready (every matched Cluster has its LoadBalancer, in sync with the template)
	// and Paused.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// LoadBalancerClass gives every Cluster its selector matches a LoadBalancer made from its
// template: the add-on pattern (like cluster-api-addon-provider-helm's HelmChartProxy) for
// ClusterClass users, whose topology cannot template a LoadBalancer.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:path=loadbalancerclasses,scope=Namespaced,shortName=lbc,categories=cluster-api
// +kubebuilder:metadata:labels="cluster.x-k8s.io/v1beta2=v1alpha1"
// +kubebuilder:printcolumn:name="Clusters",type=integer,JSONPath=".status.matchedClusters"
// +kubebuilder:printcolumn:name="Ready LBs",type=integer,JSONPath=".status.readyLoadBalancers"
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=".status.conditions[?(@.type==\"Ready\")].status"
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=".status.conditions[?(@.type==\"Ready\")].reason",priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=".metadata.creationTimestamp"
type LoadBalancerClass struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   LoadBalancerClassSpec   `json:"spec,omitempty"`
	Status LoadBalancerClassStatus `json:"status,omitempty"`
}

// GetConditions returns the status conditions (CAPI's conditions Getter).
func (c *LoadBalancerClass) GetConditions() []metav1.Condition { return c.Status.Conditions }

// SetConditions replaces the status conditions (CAPI's conditions Setter).
func (c *LoadBalancerClass) SetConditions(cs []metav1.Condition) { c.Status.Conditions = cs }

// LoadBalancerClassList is a list of LoadBalancerClasses.
// +kubebuilder:object:root=true
type LoadBalancerClassList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []LoadBalancerClass `json:"items"`
}

func init() {
	SchemeBuilder.Register(&LoadBalancerClass{}, &LoadBalancerClassList{})
}
