# The Helm chart (charts/caplb). Its tests and packager live in CHART_TEST_DIR, a module of its own
# that `make check` vets and `make test` runs after the main module; these targets run them alone.

.PHONY: chart test-chart
chart: ## Package charts/caplb as caplb-<version>.tgz (version VERSION without the v, images REGISTRY/...:VERSION) into $(RELEASE_DIR).
	@mkdir -p $(RELEASE_DIR)
	cd $(CHART_TEST_DIR) && $(GO) run ./cmd/mkchart -root $(CURDIR) -version $(VERSION) -registry $(REGISTRY) -out $(abspath $(RELEASE_DIR))

test-chart: ## Lint and render the Helm chart, check it against the kustomize release and the agent's validator (hack/chart).
	cd $(CHART_TEST_DIR) && $(GO) vet ./... && $(GO) test -count=1 $(GOTEST_FLAGS) ./...
