// Command agentonly is `caplb agent` linked without the manager: the same
// modes/agent command in a binary that does not carry controller-runtime and
// Cluster API. The benchmark measures it with -agent-pkg to show the agent's
// own memory; a shipped cmd/caplb-agent would be exactly this.
package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/caplb/caplb/modes/agent"
)

func main() {
	root := &cobra.Command{Use: "caplb", SilenceUsage: true, SilenceErrors: true}
	root.AddCommand(agent.NewCommand())
	if err := root.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "caplb:", err)
		os.Exit(1)
	}
}
