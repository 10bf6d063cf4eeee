// Command caplb is the control-plane load balancer provider for Cluster API: the management-side
// manager (controllers), the node-side agent (ARP/BGP data plane) and the WireGuard gateway and
// member (docs/backends/wireguard.md) in one binary.
package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/caplb/caplb/cmd/internal/version"
	"github.com/caplb/caplb/modes/wireguard"
)

func main() {
	if err := newRootCommand().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "caplb:", err)
		os.Exit(1)
	}
}

func newRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:           "caplb",
		Short:         "Control-plane load balancer provider for Cluster API",
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       version.Get().String(),
	}
	root.SetVersionTemplate("caplb {{.Version}}\n")
	root.AddCommand(newManagerCommand(), newAgentCommand(), newCleanupCommand(),
		wireguard.NewGatewayCommand(wireguard.WithGatewayBuildInfo(version.Get().BuildLabels())), wireguard.NewMemberCommand())
	return root
}
