package agent

import (
	agentv1 "github.com/caplb/caplb/api/agent/v1alpha1"
)

// The configuration schema lives in api/agent/v1alpha1: the manager renders it and the agent
// parses it, with one type and one validator. The aliases keep the agent's code short.
type (
	Config           = agentv1.AgentConfiguration
	MemberConfig     = agentv1.MemberConfig
	HealthConfig     = agentv1.HealthConfig
	ElectionConfig   = agentv1.ElectionConfig
	QuiesceConfig    = agentv1.QuiesceConfig
	AdminConfig      = agentv1.AdminConfig
	ARPConfig        = agentv1.ARPConfig
	MembershipConfig = agentv1.MembershipConfig
	NodeAPIConfig    = agentv1.NodeAPIConfig
	Duration         = agentv1.Duration
)

// Modes of the agent.
const (
	ModeARP = agentv1.ModeARP
	ModeBGP = agentv1.ModeBGP
)

// Load reads, parses and validates the agent configuration file at path.
func Load(path string) (*Config, error) { return agentv1.Load(path) }

// Parse decodes, defaults and validates an agent configuration.
func Parse(data []byte) (*Config, error) { return agentv1.Parse(data) }

// NewConfig returns an empty configuration with its apiVersion and kind set.
func NewConfig() Config { return agentv1.New() }
