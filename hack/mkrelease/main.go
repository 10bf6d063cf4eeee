// Command mkrelease writes caplb's clusterctl release (`make release`): addon-components.yaml,
// caplb-standalone.yaml, metadata.yaml and the agent manifests (and, with -checksums, only
// checksums.txt over a finished release directory), with image references built from one registry and
// version (mk/release.mk).
package main

import (
	"flag"
	"fmt"
	"os"
	"sort"

	"github.com/caplb/caplb/hack/release"
)

func main() {
	var o release.Options
	out := flag.String("out", "_out/release", "directory to write the release into")
	flag.StringVar(&o.Root, "root", ".", "repository root")
	flag.StringVar(&o.Version, "version", "", "release version, e.g. v0.1.0 (its major.minor must be a series in metadata.yaml)")
	flag.StringVar(&o.ManagerImage, "manager-image", "", "manager image reference, the default of ${"+release.ManagerImageVariable+"}")
	flag.StringVar(&o.AgentImage, "agent-image", "", "agent image reference for the agent manifests")
	checksums := flag.Bool("checksums", false, "only write checksums.txt over the files already in -out (the last step of `make release`)")
	flag.Parse()
	if *checksums {
		p, err := release.WriteChecksums(*out)
		if err != nil {
			fmt.Fprintln(os.Stderr, "mkrelease:", err)
			os.Exit(1)
		}
		fmt.Println("wrote", p)
		return
	}
	files, err := release.Write(o, *out)
	if err != nil {
		fmt.Fprintln(os.Stderr, "mkrelease:", err)
		os.Exit(1)
	}
	sort.Strings(files)
	for _, f := range files {
		fmt.Println("wrote", f)
	}
}
