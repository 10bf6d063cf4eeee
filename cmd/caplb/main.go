// Command caplb is the control-plane load balancer provider for Cluster API: the management-side
// manager (controllers), the node-side agent (ARP/BGP data plane) and the WireGuard gateway and
// member (docs/backends/wireguard.md) in one binary.
package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/caplb/caplb/modes/wireguard"
)

func main() {
	root := &cobra.Command{
		Use:           "caplb",
		Short:         "Control-plane load balancer provider for Cluster API",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newManagerCommand(), newAgentCommand(), wireguard.NewGatewayCommand(), wireguard.NewMemberCommand())
	if err := root.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "caplb:", err)
		os.Exit(1)
	}
}
