// Package rbac embeds the RBAC manifests caplb ships, so that the integration suite runs its
// manager under exactly these rules (impersonating the ServiceAccount) and a missing or excess
// verb fails a test.
package rbac

import "embed"

// FS holds the manager's ServiceAccount, roles and bindings, and the opt-in node-targets
// component's role.
//
//go:embed *.yaml node-targets/role.yaml
var FS embed.FS

// Namespace and ServiceAccount are those the manifests bind.
const (
	Namespace      = "caplb-system"
	ServiceAccount = "caplb-manager"
)
