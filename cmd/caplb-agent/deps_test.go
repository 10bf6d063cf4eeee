package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestAgentStaysSmall keeps the heavy Kubernetes client libraries out of the node agent: every
// package linked in is resident on every control-plane node (the agent's RSS goal is < 40 MiB).
// The agent talks to the API through core/v1-only REST clients (modes/agent, modes/wireguard).
func TestAgentStaysSmall(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Skipf("go list unavailable: %v", err)
	}
	for _, forbidden := range []string{
		"k8s.io/client-go/kubernetes",
		"sigs.k8s.io/controller-runtime",
		"sigs.k8s.io/cluster-api",
	} {
		for _, pkg := range strings.Fields(string(out)) {
			if pkg == forbidden || strings.HasPrefix(pkg, forbidden+"/") {
				t.Errorf("caplb-agent links %s; use a core/v1 REST client instead (see modes/agent/nodeclient.go)", pkg)
				break
			}
		}
	}
}
