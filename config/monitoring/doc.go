// Package monitoring holds caplb's Grafana dashboard (dashboard.json), Prometheus alert rules
// (alerts.yaml) and the Prometheus Operator's objects (operator/: the manager's metrics Service,
// a ServiceMonitor, a PodMonitor for the node agents and a PrometheusRule generated from
// alerts.yaml). Its tests check that every metric the dashboard and rules query is one the code
// registers, that every metric the code registers is on the dashboard, and that the operator's
// objects select what they scrape. ruletest/ (a module of its own) evaluates the rules.
package monitoring
