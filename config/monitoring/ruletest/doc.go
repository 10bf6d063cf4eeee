// Package ruletest evaluates config/monitoring/alerts.yaml with Prometheus's own rule engine
// (github.com/prometheus/prometheus/rules, what promtool test rules runs) against recorded
// series, and decodes config/monitoring/operator strictly into the Prometheus Operator's types.
//
// It is a module of its own because those two bring cloud SDKs and a newer Kubernetes client
// that the caplb module must not link: `make test` runs it with its own go test line, and
// `go test ./...` from the repository root does not see it.
package ruletest
