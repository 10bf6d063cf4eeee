package v1alpha1

import (
	"net/netip"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
)

// Defaults applied when a field is left empty. The CRD's OpenAPI defaults carry the same values
// so that `kubectl get -o yaml` shows them; the Go helpers below apply them again because
// objects built in code (tests, other controllers) never pass through the API server's defaulting.
const (
	// DefaultTargetPort is the members' API server port (kubeadm's default).
	DefaultTargetPort int32 = 6443
	// DefaultProbeInterval is the time between two endpoint probes.
	DefaultProbeInterval = 10 * time.Second
	// DefaultProbeTimeout bounds one endpoint probe.
	DefaultProbeTimeout = 2 * time.Second
	// DefaultDrainPeriod is how long in-flight connections may finish after a member left rotation.
	DefaultDrainPeriod = 10 * time.Second
	// DefaultQuiesceTimeout bounds the wait for a backend to confirm a quiesce.
	DefaultQuiesceTimeout = 2 * time.Minute
	// MaxQuiesceTimeout is the largest spec.quiesce.timeout accepted: no spec can hold a
	// Machine's deletion longer than this.
	MaxQuiesceTimeout = time.Hour
	// MaxDrainPeriod is the largest spec.quiesce.drainPeriod accepted.
	MaxDrainPeriod = 30 * time.Minute
)

// Target kinds accepted in spec.targetKind.
const (
	// MachineKind is CAPI's Machine, in group cluster.x-k8s.io.
	MachineKind = "Machine"
	// MachineAPIGroup is the group of MachineKind.
	MachineAPIGroup = "cluster.x-k8s.io"
	// NodeKind is the core Node (group "").
	NodeKind = "Node"
)

// IsNode reports whether the members are Nodes. An empty kind means Machine (the default).
func (k TargetKind) IsNode() bool { return k.Kind == NodeKind }

// RemoteNodes reports whether the members are the Nodes of spec.clusterName's workload cluster,
// read through its <cluster>-kubeconfig Secret, rather than the Nodes of the cluster the manager
// runs in. The rule is the spec alone — targetKind Node with a clusterName — so that it is known
// at admission and never flips while the LoadBalancer lives (clusterName and targetKind are
// immutable): a Secret that appears or disappears must not move the members from one cluster's
// Nodes to another's. For Machine targets clusterName names the cluster the members belong to;
// for Node targets it does the same.
func (s *LoadBalancerSpec) RemoteNodes() bool { return s.TargetKind.IsNode() && s.ClusterName != "" }

// LocalNodes reports whether the members are Nodes of the cluster the manager runs in (Node
// targets without clusterName): the case fenced by the manager's --node-targets-namespace.
func (s *LoadBalancerSpec) LocalNodes() bool { return s.TargetKind.IsNode() && s.ClusterName == "" }

// EffectiveTargetPort returns spec.targetPort or its default.
func (s *LoadBalancerSpec) EffectiveTargetPort() int32 {
	if s.TargetPort != 0 {
		return s.TargetPort
	}
	return DefaultTargetPort
}

// EffectivePort returns the port of the published endpoint: spec.endpoint.port, else the
// target port.
func (s *LoadBalancerSpec) EffectivePort() int32 {
	if s.Endpoint.Port != 0 {
		return s.Endpoint.Port
	}
	return s.EffectiveTargetPort()
}

// EffectiveInterval returns the probe interval or its default.
func (h HealthCheck) EffectiveInterval() time.Duration {
	if h.Interval.Duration > 0 {
		return h.Interval.Duration
	}
	return DefaultProbeInterval
}

// EffectiveTimeout returns the probe timeout or its default.
func (h HealthCheck) EffectiveTimeout() time.Duration {
	if h.Timeout.Duration > 0 {
		return h.Timeout.Duration
	}
	return DefaultProbeTimeout
}

// EffectiveDrainPeriod returns the drain period, or its default when unset. An explicit "0s"
// means no drain: the field is a pointer so that zero and unset differ.
func (q Quiesce) EffectiveDrainPeriod() time.Duration {
	if q.DrainPeriod != nil {
		return q.DrainPeriod.Duration
	}
	return DefaultDrainPeriod
}

// EffectiveTimeout returns the quiesce timeout or its default.
func (q Quiesce) EffectiveTimeout() time.Duration {
	if q.Timeout.Duration > 0 {
		return q.Timeout.Duration
	}
	return DefaultQuiesceTimeout
}

// ValidHost reports whether h is acceptable as an endpoint host: an IP address or a lower-case DNS
// name. It is the one address rule of caplb and matches the CRD's CEL rule exactly: CEL's isIP
// rejects IPv4-mapped IPv6 (::ffff:10.0.0.1) and zones (fe80::1%eth0), so this does too;
// accepting in Go what admission rejects would make every later spec patch fail.
func ValidHost(h string) bool {
	if a, err := netip.ParseAddr(h); err == nil {
		return a.Zone() == "" && !a.Is4In6()
	}
	return len(validation.IsDNS1123Subdomain(h)) == 0 && !strings.Contains(h, ":")
}

// PublishesClusterEndpoint reports whether the LoadBalancer writes its endpoint to its Cluster
// (and control plane): spec.publishClusterEndpoint, true when unset.
func (s *LoadBalancerSpec) PublishesClusterEndpoint() bool {
	return s.PublishClusterEndpoint == nil || *s.PublishClusterEndpoint
}
