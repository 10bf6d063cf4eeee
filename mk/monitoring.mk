# Monitoring (config/monitoring): its unit tests run in `go test ./...`; the rule evaluation lives in
# RULETEST_DIR, a module of its own that `make test` runs after them. This target runs it alone.

.PHONY: test-rules
test-rules: ## Evaluate config/monitoring/alerts.yaml with Prometheus's rule engine against recorded series; decode config/monitoring/operator into the operator's types.
	cd $(RULETEST_DIR) && $(GO) vet ./... && $(GO) test -count=1 $(GOTEST_FLAGS) ./...
