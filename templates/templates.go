// Package templates holds caplb's clusterctl templates: cluster-template-<flavor>.yaml for
// `clusterctl generate cluster --from`, and clusterclass-<name>.yaml. `make release` copies them
// next to the components; e2e/templates validates them against the real CRDs.
package templates

import "embed"

// FS holds every template.
//
//go:embed *.yaml
var FS embed.FS
