package controllers

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/cluster-api/util/conditions"

	lbv1 "github.com/caplb/caplb/api/v1alpha1"
)

// Metric names, exported on controller-runtime's metrics endpoint next to its own
// controller_runtime_reconcile_* series.
const (
	MetricReconcileTotal    = "caplb_loadbalancer_reconcile_total"
	MetricReconcileDuration = "caplb_loadbalancer_reconcile_duration_seconds"
	MetricTargets           = "caplb_loadbalancer_targets"
	MetricHooksHeld         = "caplb_loadbalancer_hooks_held"
	MetricReady             = "caplb_loadbalancer_ready"
	MetricQuiesceTimeouts   = "caplb_loadbalancer_quiesce_timeouts_total"
	MetricEndpointPublished = "caplb_loadbalancer_cluster_endpoint_published_total"
	MetricInvalidSpec       = "caplb_loadbalancer_invalid_spec"
)

// Reconcile results, the values of the "result" label.
const (
	resultSuccess = "success"
	resultRequeue = "requeue"
	resultError   = "error"
	resultPaused  = "paused"
	// resultStale: the cache did not yet show our last status patch; retried shortly.
	resultStale = "stale_cache"
)

var allStates = []lbv1.TargetState{
	lbv1.TargetAdding, lbv1.TargetActive, lbv1.TargetDisabling,
	lbv1.TargetDisabled, lbv1.TargetRemoving, lbv1.TargetRemoved,
}

// Metrics are the controller's Prometheus collectors. One value is shared by every reconcile
// of a manager; it is built by newMetrics and registered once.
type Metrics struct {
	reconcileTotal    *prometheus.CounterVec
	reconcileDuration *prometheus.HistogramVec
	targets           *prometheus.GaugeVec
	hooksHeld         *prometheus.GaugeVec
	ready             *prometheus.GaugeVec
	quiesceTimeouts   *prometheus.CounterVec
	endpointPublished *prometheus.CounterVec
	invalidSpec       *prometheus.GaugeVec
}

// newMetrics builds the collectors and registers them on reg. When a collector of the same name
// is already registered (a second manager in the same process, as tests do), the registered one
// is reused so that both managers report to the same series.
func newMetrics(reg prometheus.Registerer) (*Metrics, error) {
	lbLabels := []string{"namespace", "name"}
	m := &Metrics{
		reconcileTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricReconcileTotal,
			Help: "LoadBalancer reconciles by result (success, requeue, error, paused, stale_cache).",
		}, []string{"result"}),
		reconcileDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    MetricReconcileDuration,
			Help:    "Duration of LoadBalancer reconciles, by result.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}, []string{"result"}),
		targets: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: MetricTargets,
			Help: "Members of a LoadBalancer by state (adding, active, disabling, disabled, removing, removed).",
		}, append(lbLabels, "state")),
		hooksHeld: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: MetricHooksHeld,
			Help: "Machines on which a LoadBalancer holds its pre-drain deletion hook.",
		}, lbLabels),
		ready: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: MetricReady,
			Help: "1 when the LoadBalancer's Ready condition is True, else 0.",
		}, lbLabels),
		quiesceTimeouts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricQuiesceTimeouts,
			Help: "Quiesces that passed spec.quiesce.timeout without the backend's confirmation.",
		}, lbLabels),
		endpointPublished: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricEndpointPublished,
			Help: "Times caplb wrote a Cluster's (or control plane's) controlPlaneEndpoint, by target kind.",
		}, []string{"target"}),
		invalidSpec: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: MetricInvalidSpec,
			Help: "1 while a LoadBalancer's spec fails validation (Ready False, reason InvalidSpec); alert on it.",
		}, lbLabels),
	}
	var err error
	m.reconcileTotal, err = register(reg, m.reconcileTotal)
	if err != nil {
		return nil, err
	}
	if m.reconcileDuration, err = register(reg, m.reconcileDuration); err != nil {
		return nil, err
	}
	if m.targets, err = register(reg, m.targets); err != nil {
		return nil, err
	}
	if m.hooksHeld, err = register(reg, m.hooksHeld); err != nil {
		return nil, err
	}
	if m.ready, err = register(reg, m.ready); err != nil {
		return nil, err
	}
	if m.quiesceTimeouts, err = register(reg, m.quiesceTimeouts); err != nil {
		return nil, err
	}
	if m.endpointPublished, err = register(reg, m.endpointPublished); err != nil {
		return nil, err
	}
	if m.invalidSpec, err = register(reg, m.invalidSpec); err != nil {
		return nil, err
	}
	return m, nil
}

func register[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing, nil
			}
		}
		return c, err
	}
	return c, nil
}

func (m *Metrics) observeReconcile(result string, d time.Duration) {
	m.reconcileTotal.WithLabelValues(result).Inc()
	m.reconcileDuration.WithLabelValues(result).Observe(d.Seconds())
}

// setLoadBalancer records the per-LoadBalancer gauges after a reconcile.
func (m *Metrics) setLoadBalancer(lb *lbv1.LoadBalancer, hooks int, ready bool) {
	counts := map[lbv1.TargetState]int{}
	for _, t := range lb.Status.Targets {
		counts[t.State]++
	}
	for _, s := range allStates {
		m.targets.WithLabelValues(lb.Namespace, lb.Name, string(s)).Set(float64(counts[s]))
	}
	m.hooksHeld.WithLabelValues(lb.Namespace, lb.Name).Set(float64(hooks))
	v := 0.0
	if ready {
		v = 1
	}
	m.ready.WithLabelValues(lb.Namespace, lb.Name).Set(v)
	invalid := 0.0
	if c := conditions.Get(lb, lbv1.ReadyCondition); c != nil && c.Reason == lbv1.InvalidSpecReason {
		invalid = 1
	}
	m.invalidSpec.WithLabelValues(lb.Namespace, lb.Name).Set(invalid)
}

// forget drops the per-LoadBalancer series of a deleted LoadBalancer.
func (m *Metrics) forget(namespace, name string) {
	for _, s := range allStates {
		m.targets.DeleteLabelValues(namespace, name, string(s))
	}
	m.hooksHeld.DeleteLabelValues(namespace, name)
	m.ready.DeleteLabelValues(namespace, name)
	m.quiesceTimeouts.DeleteLabelValues(namespace, name)
	m.invalidSpec.DeleteLabelValues(namespace, name)
}
