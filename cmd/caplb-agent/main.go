// Command caplb-agent is the node agent alone: the same code as `caplb agent`, linked without the
// manager's controller-runtime and Cluster API, so that a node pays only for what it runs (peak
// RSS ~29 MiB against ~50 MiB for the full binary, docs/benchmarks.md). It takes the agent's flags
// directly (`caplb-agent --config FILE`) and also as `caplb-agent agent --config FILE`, so it is a
// drop-in for `caplb agent` in manifests and scripts. `caplb-agent wireguard` is the WireGuard
// member and `caplb-agent gateway` the gateway (docs/backends/wireguard.md).
package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/caplb/caplb/cmd/internal/version"
	"github.com/caplb/caplb/modes/agent"
	"github.com/caplb/caplb/modes/wireguard"
)

func main() {
	if err := newRootCommand().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "caplb-agent:", err)
		os.Exit(1)
	}
}

func newRootCommand() *cobra.Command {
	build := version.Get().BuildLabels()
	root := agent.NewCommand(agent.WithBuildInfo(build))
	root.Use = "caplb-agent"
	root.SilenceUsage, root.SilenceErrors = true, true
	root.Version = version.Get().String()
	root.SetVersionTemplate("caplb-agent {{.Version}}\n")
	root.AddCommand(agent.NewCommand(agent.WithBuildInfo(build)), wireguard.NewMemberCommand(),
		wireguard.NewGatewayCommand(wireguard.WithGatewayBuildInfo(build)))
	return root
}
