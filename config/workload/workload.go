// Package workload embeds the RBAC caplb needs in a workload cluster whose Nodes a LoadBalancer
// targets remotely, so that the integration suite applies exactly this file to the workload API
// server and runs the manager with a token of its ServiceAccount: a missing verb fails a test.
package workload

import _ "embed"

// RBAC is rbac.yaml: the ServiceAccount, the ClusterRole (Nodes: get, list, watch, patch; GET
// on "/") and its binding, and the endpoint move's Roles (get and patch of cluster-info,
// kubeadm-config and kube-proxy, by name) and their bindings.
//
//go:embed rbac.yaml
var RBAC []byte

// Namespace and ServiceAccount are those rbac.yaml binds.
const (
	Namespace      = "kube-system"
	ServiceAccount = "caplb-manager"
)
