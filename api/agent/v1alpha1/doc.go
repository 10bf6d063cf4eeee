// Package v1alpha1 is the node agent's configuration schema (kind AgentConfiguration, group
// agent.loadbalancer.cluster.x-k8s.io) and the contract between the caplb manager and the agents
// on a cluster's nodes: the membership document, the Node annotations both sides read and write,
// and the bootstrap Secret's keys. The manager renders configurations with these types; the agent
// parses them with Parse, which applies Default and Validate: one type and one validator on both
// sides. See docs/design/membership.md.
package v1alpha1

// GroupVersion and Kind of an agent configuration file.
const (
	Group      = "agent.loadbalancer.cluster.x-k8s.io"
	Version    = "v1alpha1"
	APIVersion = Group + "/" + Version
	Kind       = "AgentConfiguration"
)
