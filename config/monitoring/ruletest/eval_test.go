package ruletest

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/common/promslog"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/promqltest"
	"github.com/prometheus/prometheus/rules"
)

// evalInterval is both the series' sample interval and the rules' evaluation interval, as a
// typical 1m scrape and evaluation would have it.
const evalInterval = time.Minute

// firing evaluates the rule files every evalInterval from time 0 to at over series (the body of
// a promqltest "load 1m" block, as promtool's input_series) and returns the alerts firing at at,
// each as Name{label="value",...} with the labels that tell instances apart (job, instance,
// node), sorted.
func firing(series string, at time.Duration, ruleFiles ...string) ([]string, error) {
	suite, err := promqltest.NewLazyLoader("load 1m\n"+series, promqltest.LazyLoaderOpts{
		EnableAtModifier: true, EnableNegativeOffset: true,
	})
	if err != nil {
		return nil, fmt.Errorf("loading the series: %w", err)
	}
	defer suite.Close()
	suite.SubqueryInterval = evalInterval
	m := rules.NewManager(&rules.ManagerOptions{
		QueryFunc:    rules.EngineQueryFunc(suite.QueryEngine(), suite.Storage()),
		AppendableV2: suite.Storage(),
		Context:      context.Background(),
		NotifyFunc:   func(context.Context, string, ...*rules.Alert) {},
		Logger:       promslog.NewNopLogger(),
	})
	groups, errs := m.LoadGroups(evalInterval, labels.EmptyLabels(), "", nil, false, ruleFiles...)
	if len(errs) > 0 {
		return nil, fmt.Errorf("loading %v: %v", ruleFiles, errs)
	}
	for _, g := range groups {
		for _, r := range g.Rules() {
			if ar, ok := r.(*rules.AlertingRule); ok {
				ar.SetRestored(true) // as promtool: a fresh rule is not waiting for restored state
			}
		}
	}
	start := time.Unix(0, 0).UTC()
	var evalErr error
	for ts := start; !ts.After(start.Add(at)); ts = ts.Add(evalInterval) {
		suite.WithSamplesTill(ts, func(err error) {
			if err != nil {
				evalErr = err
				return
			}
			for _, g := range groups {
				g.Eval(suite.Context(), ts)
				for _, r := range g.Rules() {
					if r.LastError() != nil {
						evalErr = fmt.Errorf("rule %s at %s: %w", r.Name(), ts.Sub(start), r.LastError())
					}
				}
			}
		})
		if evalErr != nil {
			return nil, evalErr
		}
	}
	var out []string
	for _, g := range groups {
		for _, r := range g.Rules() {
			ar, ok := r.(*rules.AlertingRule)
			if !ok {
				continue
			}
			for _, a := range ar.ActiveAlerts() {
				if a.State != rules.StateFiring {
					continue
				}
				var ls []string
				for _, name := range []string{"job", "instance", "node", "namespace", "loadbalancer"} {
					if v := a.Labels.Get(name); v != "" {
						ls = append(ls, fmt.Sprintf("%s=%q", name, v))
					}
				}
				out = append(out, a.Labels.Get(model.AlertNameLabel)+"{"+strings.Join(ls, ",")+"}")
			}
		}
	}
	slices.Sort(out)
	return out, nil
}

// seriesText joins series lines (promqltest notation: 1x30 is 31 samples of 1, stale ends a
// series as a failed scrape's staleness marker does).
func seriesText(lines ...string) string {
	var b strings.Builder
	for _, l := range lines {
		b.WriteString("  " + l + "\n")
	}
	return b.String()
}
