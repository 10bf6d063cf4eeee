// Package buildinfo exports caplb_build_info{version, revision, goversion} = 1, the series a
// dashboard or alert joins on to tell which build runs where. Every binary that serves metrics
// exports it: through a client_golang registry (manager, agent) or as a line of Prometheus text
// (the WireGuard gateway, whose /metrics is written by hand). The values come from the caller
// (cmd/internal/version), so this package reads no globals.
package buildinfo

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// MetricName is the info series' name.
const MetricName = "caplb_build_info"

const help = "Build of this caplb binary: always 1, with its version, VCS revision and Go version as labels."

// Labels are the values of the series' labels. The zero value means "not known": Register and
// Text then export nothing, so a component built into a test without version wiring serves no
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

// Text is the series in the Prometheus text format (HELP, TYPE and the sample, each line ending
// in a newline), for handlers that write their metrics by hand; empty when l is not known.
func Text(l Labels) string {
	if !l.Known() {
		return ""
	}
	return fmt.Sprintf("# HELP %s %s\n# TYPE %s gauge\n%s{goversion=%q,revision=%q,version=%q} 1\n",
		MetricName, help, MetricName, MetricName, l.GoVersion, l.Revision, l.Version)
}
