package main

import (
	"github.com/spf13/cobra"

	"github.com/caplb/caplb/cmd/internal/version"
	"github.com/caplb/caplb/modes/agent"
)

// newAgentCommand runs the node agent (modes/agent, docs/backends/arp.md).
func newAgentCommand() *cobra.Command {
	return agent.NewCommand(agent.WithBuildInfo(version.Get().BuildLabels()))
}
