package v1alpha1

// DefaultAgentMetricsPort is the agent's admin listener port when spec.backend.<arp|bgp>.agent
// .metrics sets none (and the agent's own default, on 127.0.0.1, when metrics is unset).
const DefaultAgentMetricsPort int32 = 7473

// AgentMetrics opens the node agent's admin listener (GET /metrics, /healthz, /status; read-only,
// no authentication) beyond the node itself, for Prometheus to scrape. Unset, the agent listens
// on 127.0.0.1:7473 only.
type AgentMetrics struct {
	// address the listener binds: one of the node's IP addresses, or 0.0.0.0 (::) for every
	// address, which includes the VIP. Default: the node's own address, the one the members
	// gossip to (its member address), which the agent looks up when it starts.
	// +optional
	// +kubebuilder:validation:MaxLength=45
	// +kubebuilder:validation:XValidation:rule="isIP(self)",message="spec.backend.<arp|bgp>.agent.metrics.address must be an IP address (10.0.0.11, fd00::11, 0.0.0.0 for every address); remove it to bind the node's own address"
	// +kubebuilder:validation:XValidation:rule="!isIP(self) || ip(self).isGlobalUnicast() || ip(self).isUnspecified()",message="spec.backend.<arp|bgp>.agent.metrics.address must be a unicast node address Prometheus can reach, or 0.0.0.0 (::): not loopback (leave agent.metrics unset to keep 127.0.0.1), link-local or multicast"
	Address string `json:"address,omitempty"`

	// port the listener binds. Default 7473. It must differ from the ports the node already
	// serves: spec.targetPort, extraPorts, the health check's port and the election's 7946.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	Port int32 `json:"port,omitempty"`
}

// EffectivePort is the port the agent's admin listener binds.
func (m *AgentMetrics) EffectivePort() int32 {
	if m == nil || m.Port == 0 {
		return DefaultAgentMetricsPort
	}
	return m.Port
}
