package harness

import (
	"bytes"
	"fmt"
	"runtime/pprof"
	"strings"
	"time"
)

// stoppingGoroutines describes the goroutines of controller-runtime and CAPI that are still
// running after a manager was asked to stop (after), e.g. a reconcile blocked in a call: the
// manager's own error ("failed waiting for all runnables to end") does not say which.
func stoppingGoroutines(after time.Duration) string {
	var dump bytes.Buffer
	if err := pprof.Lookup("goroutine").WriteTo(&dump, 2); err != nil {
		return fmt.Sprintf("goroutines: %v", err)
	}
	held := managerGoroutines(dump.String())
	if len(held) == 0 {
		return fmt.Sprintf("no controller-runtime or CAPI goroutine left %s after the stop", after)
	}
	return fmt.Sprintf("%d controller-runtime/CAPI goroutines %s after the stop:\n%s", len(held), after, strings.Join(held, "\n\n"))
}

// managerGoroutines keeps, of a debug=2 goroutine dump, the goroutines that run a reconcile or
// a controller's or runnable's loop (at most 20): the rest of a test binary is noise here.
func managerGoroutines(dump string) []string {
	var held []string
	for _, g := range strings.Split(dump, "\n\n") {
		if !strings.Contains(g, "sigs.k8s.io/cluster-api") && !strings.Contains(g, "controller-runtime/pkg/internal/controller") &&
			!strings.Contains(g, "controller-runtime/pkg/manager") {
			continue
		}
		if strings.Contains(g, "harness.stoppingGoroutines") {
			continue
		}
		held = append(held, g)
		if len(held) == 20 {
			break
		}
	}
	return held
}
