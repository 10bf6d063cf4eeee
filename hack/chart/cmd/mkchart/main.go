// Command mkchart packages charts/caplb for a release: `make chart` runs it (mk/chart.mk). It sets
// the chart's version and appVersion from -version and the images' registry from -registry, refuses a chart that does not render with its
// defaults, and writes caplb-<version>.tgz into -out, as `helm package` would.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/caplb/caplb/hack/chart"
)

func main() {
	root := flag.String("root", "../..", "the repository root")
	version := flag.String("version", "", "the release version, e.g. v0.1.0 (chart version 0.1.0, appVersion v0.1.0)")
	registry := flag.String("registry", "ghcr.io/caplb", "the images' registry (image.registry's default)")
	out := flag.String("out", "", "the directory to write caplb-<version>.tgz into")
	flag.Parse()
	if err := run(*root, *version, *registry, *out); err != nil {
		fmt.Fprintln(os.Stderr, "mkchart:", err)
		os.Exit(1)
	}
}

func run(root, version, registry, out string) error {
	if out == "" {
		return fmt.Errorf("-out is required")
	}
	c, err := chart.Load(root)
	if err != nil {
		return err
	}
	if err := chart.SetVersion(c, version); err != nil {
		return err
	}
	if err := chart.SetRegistry(c, registry); err != nil {
		return err
	}
	// A chart that fails with its own defaults must not ship.
	if _, err := chart.Render(c, "caplb-system", nil); err != nil {
		return err
	}
	path, err := chart.Package(c, out)
	if err != nil {
		return err
	}
	fmt.Println(path)
	return nil
}
