// Package webhook embeds the ValidatingWebhookConfiguration caplb ships, so that the integration
// suite registers exactly its rules and matchConditions on a real API server.
package webhook

import _ "embed"

// Configuration is manifests.yaml: the ValidatingWebhookConfiguration.
//
//go:embed manifests.yaml
var Configuration []byte
