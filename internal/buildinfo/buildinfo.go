// Package buildinfo exports caplb_build_info{version, revision, goversion} = 1, the series a
// dashboard or alert joins on to tell which build runs where. Every binary that serves metrics
// exports it through its client_golang registry (manager, agent, WireGuard gateway). The values
// come from the caller (cmd/internal/version), so this package reads no globals.
package buildinfo

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// MetricName is the info series' name.
const MetricName = "caplb_build_info"

const help = "Build of this caplb binary: always 1, with its version, VCS revision and Go version as labels."

// Labels are the values of the series' labels. The zero value means "not known": Register then
// exports nothing, so a component built into a test without version wiring serves no
// made-up build.
type Labels struct {
	Version   string
	Revision  string
	GoVersion string
}

// Known says whether there is a build to report.
func (l Labels) Known() bool { return l != Labels{} }

// Register adds the series to r. Registering the same build twice (a manager restarted in one
// process, as in tests) is not an error.
func Register(r prometheus.Registerer, l Labels) error {
	if !l.Known() {
		return nil
	}
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: MetricName,
		Help: help,
		ConstLabels: prometheus.Labels{
			"version": l.Version, "revision": l.Revision, "goversion": l.GoVersion,
		},
	})
	g.Set(1)
	if err := r.Register(g); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			return nil
		}
		return fmt.Errorf("registering %s: %w", MetricName, err)
	}
	return nil
}
