// Package samples embeds the manifests in config/samples so that the demo (and tests that
// check the samples stay valid) need no files at run time.
package samples

import "embed"

// FS holds every sample manifest: the user-facing ones at the top level and the demo's
// dedicated set under demo/ (applied in file-name order).
//
//go:embed *.yaml demo/*.yaml
var FS embed.FS
