// Package v1alpha1 is the WireGuard backend's node-side schema and the contract between the caplb
// manager, the gateways and the members: the gateway's and the member's configuration files
// (kinds GatewayConfiguration and MemberConfiguration, group
// wireguard.loadbalancer.cluster.x-k8s.io), the keys of the gateways' Secret, and the report a
// gateway writes back. The manager renders the files with these types and checks them with
// ParseGateway/ParseMember before it hands them out; the gateway and the member load them with
// the same functions: one type and one validator on both sides. Files written before the schema
// had an apiVersion and kind (caplb v0.1) still load: a file with neither is read as this
// version. See docs/backends/wireguard.md.
package v1alpha1

// GroupVersion and kinds of the configuration files.
const (
	Group       = "wireguard.loadbalancer.cluster.x-k8s.io"
	Version     = "v1alpha1"
	APIVersion  = Group + "/" + Version
	GatewayKind = "GatewayConfiguration"
	MemberKind  = "MemberConfiguration"
)
