package v1alpha1

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Node annotations and labels: the contract between the manager, the agents and people. The
// manager writes its annotations on the workload cluster's Nodes through CAPI's ClusterCache; the
// agent reads its own Node and writes its status on it with the kubelet's credential (which may
// modify its own Node and nothing else).
const (
	// MembershipAnnotation (manager → Node) holds the Membership document, JSON.
	MembershipAnnotation = "loadbalancer.cluster.x-k8s.io/membership"

	// QuiesceAnnotation (manager → Node) asks the node's agent to leave the data plane: hand the
	// VIP over (arp) or withdraw its routes (bgp), then report Quiesced. The value says why
	// ("disabled", "removing"). Removing the annotation puts the member back.
	QuiesceAnnotation = "loadbalancer.cluster.x-k8s.io/quiesce"

	// DisabledAnnotation (person or tool → Node or Machine) takes a member out of rotation, any
	// value. The same key as the LoadBalancer API's; on a Node it works without the manager.
	DisabledAnnotation = "loadbalancer.cluster.x-k8s.io/disabled"

	// ExcludeFromExternalLBLabel is Kubernetes' standard Node label for "do not send Service
	// load-balancer traffic here". The agent deliberately ignores it: kubeadm puts it on every
	// control-plane Node. Use DisabledAnnotation to take a member out.
	ExcludeFromExternalLBLabel = "node.kubernetes.io/exclude-from-external-load-balancers"

	// AgentStatusAnnotation (agent → its own Node) holds the AgentStatus document, JSON.
	AgentStatusAnnotation = "loadbalancer.cluster.x-k8s.io/agent-status"
)

// Membership is a versioned member list issued by the manager. Versions only grow; two documents
// with the same version are identical. Consecutive versions differ by one member added or
// removed, and the manager issues version n+1 only after a majority of version n's members
// reported running it (AgentStatus.MembershipVersion >= n): every majority of version n overlaps
// every majority of version n+1, so two owners cannot be confirmed on both sides of a change.
type Membership struct {
	// Version of this list; 0 is the empty bootstrap membership.
	Version int64 `json:"version"`
	// Members in preference order.
	Members []MemberConfig `json:"members"`
}

// Newer reports whether m supersedes o.
func (m Membership) Newer(o Membership) bool { return m.Version > o.Version }

// Has reports whether name is a member.
func (m Membership) Has(name string) bool {
	for _, x := range m.Members {
		if x.Name == name {
			return true
		}
	}
	return false
}

// Validate checks the document: names unique and non-empty, addresses IPs and unique.
func (m Membership) Validate() error {
	var errs []error
	if m.Version < 0 {
		errs = append(errs, fmt.Errorf("version: %d is negative", m.Version))
	}
	names := map[string]bool{}
	addrs := map[netip.Addr]bool{}
	for i, x := range m.Members {
		f := fmt.Sprintf("members[%d]", i)
		if x.Name == "" {
			errs = append(errs, fmt.Errorf("%s.name: is empty", f))
		} else if names[x.Name] {
			errs = append(errs, fmt.Errorf("%s.name: %q is listed twice", f, x.Name))
		}
		names[x.Name] = true
		a, err := netip.ParseAddr(x.Address)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s.address: %q is not an IP address", f, x.Address))
			continue
		}
		if addrs[a.Unmap()] {
			errs = append(errs, fmt.Errorf("%s.address: %q is listed twice", f, x.Address))
		}
		addrs[a.Unmap()] = true
	}
	return errors.Join(errs...)
}

// ParseMembership decodes and validates a MembershipAnnotation value.
func ParseMembership(s string) (Membership, error) {
	var m Membership
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		return Membership{}, fmt.Errorf("%s: %w", MembershipAnnotation, err)
	}
	if err := m.Validate(); err != nil {
		return Membership{}, fmt.Errorf("%s: %w", MembershipAnnotation, err)
	}
	return m, nil
}

// String encodes the document as an annotation value.
func (m Membership) String() string {
	b, _ := json.Marshal(m)
	return string(b)
}

// AgentStatus is what an agent reports on its own Node (AgentStatusAnnotation). The manager
// moves a member to active, and counts a quiesce as done, only on what this says.
type AgentStatus struct {
	// MembershipVersion is the newest membership version the agent runs.
	MembershipVersion int64 `json:"membershipVersion"`
	// Member: this node is in that membership.
	Member bool `json:"member"`
	// Eligible: the local API server is healthy and nothing asks the node to stay out.
	Eligible bool `json:"eligible"`
	// InDataPlane: the node serves the endpoint or stands by to take it over: arp, a member
	// that is eligible (the owner holds the VIP, the others are ready to take it); bgp, a node
	// that announces the VIP.
	InDataPlane bool `json:"inDataPlane"`
	// Holding: arp, the node holds the VIP; bgp, it announces the VIP's routes (locally: whether
	// a router takes them is what PeersEstablished says).
	Holding bool `json:"holding"`
	// Peers (bgp only) is how many routers the agent is configured to announce to, and
	// PeersEstablished how many of them have an Established BGP session with this node right
	// now. A session is what the node can see of a router accepting its routes: one refused
	// (wrong AS, an ACL, no neighbour statement for this address) never gets there.
	Peers            int `json:"peers,omitempty"`
	PeersEstablished int `json:"peersEstablished,omitempty"`
	// Quiesced: a quiesce was asked for (QuiesceAnnotation, DisabledAnnotation or
	// ExcludeFromExternalLBLabel) and is complete: the node neither holds nor announces the VIP
	// and the drain period passed.
	Quiesced bool `json:"quiesced"`
	// Reason explains the state in a few words.
	Reason string `json:"reason,omitempty"`
	// UpdatedAt is when the agent wrote this report.
	UpdatedAt metav1.MicroTime `json:"updatedAt"`
}

// AllPeersEstablished reports whether every configured router has an Established session with
// the node (bgp): false with no routers, as from an agent that does not report its sessions.
func (s AgentStatus) AllPeersEstablished() bool {
	return s.Peers > 0 && s.PeersEstablished == s.Peers
}

// ParseAgentStatus decodes an AgentStatusAnnotation value.
func ParseAgentStatus(s string) (AgentStatus, error) {
	var st AgentStatus
	if err := json.Unmarshal([]byte(s), &st); err != nil {
		return AgentStatus{}, fmt.Errorf("%s: %w", AgentStatusAnnotation, err)
	}
	return st, nil
}

// String encodes the report as an annotation value.
func (s AgentStatus) String() string {
	b, _ := json.Marshal(s)
	return string(b)
}

// The bootstrap Secret: the manager keeps one per LoadBalancer with an arp or bgp backend, holding
// everything a new control-plane Machine needs at first boot. A control plane's bootstrap config
// writes its keys to the paths below (KubeadmConfigSpec.files[].contentFrom.secret).
const (
	// SecretConfigKey holds the AgentConfiguration.
	SecretConfigKey = "agent.yaml"
	// SecretGossipKeyKey holds the gossip key (base64 of 32 random bytes).
	SecretGossipKeyKey = "gossip.key"
	// SecretManifestKey holds the agent's static pod manifest.
	SecretManifestKey = "caplb-agent.yaml"
	// SecretMembershipKey holds the authoritative current Membership (JSON), the manager's own
	// record: a Secret survives `clusterctl move` and manager restarts, a status does not. It is
	// not written to nodes.
	SecretMembershipKey = "membership.json"

	// ConfigPath, GossipKeyPath: where the bootstrap writes the agent's files on the node.
	ConfigPath    = "/etc/caplb/agent.yaml"
	GossipKeyPath = "/etc/caplb/gossip.key"
	// DefaultStateFile keeps the newest membership an agent learned.
	DefaultStateFile = "/var/lib/caplb/membership.json"
)
