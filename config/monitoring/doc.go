// Package monitoring holds caplb's Grafana dashboard (dashboard.json) and Prometheus alert rules
// (alerts.yaml). Its test checks that every metric they query is one the code registers, and
// that every metric the code registers is on the dashboard.
package monitoring
