//go:build linux

package lifecycle

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/caplb/caplb/e2e/lab"
)

// Binaries are the programs the lab runs: the manager (`caplb`), the node agent, the lab's
// kubelet for static pods and the stand-in API server.
type Binaries struct{ Manager, Agent, Podrun, Standin string }

// BuildBinaries builds them into dir (a fresh temporary directory when empty).
func BuildBinaries(dir string) (Binaries, error) {
	if dir == "" {
		d, err := os.MkdirTemp("", "caplb-lifecycle-bin-")
		if err != nil {
			return Binaries{}, err
		}
		dir = d
	}
	b := Binaries{Manager: filepath.Join(dir, "caplb"), Agent: filepath.Join(dir, "caplb-agent"),
		Podrun: filepath.Join(dir, "podrun"), Standin: filepath.Join(dir, "standin")}
	for pkg, out := range map[string]string{"./cmd/caplb": b.Manager, "./cmd/caplb-agent": b.Agent,
		"./e2e/lab/podrun": b.Podrun, "./e2e/lab/standin": b.Standin} {
		// Static, as in the agent's image (distroless): the lab's kubelet runs the agent in a
		// root that holds nothing else.
		if err := lab.BuildStaticBinary(pkg, out); err != nil {
			return Binaries{}, fmt.Errorf("lifecycle lab: %w", err)
		}
	}
	return b, nil
}
