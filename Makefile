# caplb — see README.md. Area-specific targets live in mk/*.mk; each adds its
# prerequisites of `make test` to TEST_DEPS.
SHELL := /bin/bash
.DEFAULT_GOAL := help
GO ?= go
OUT ?= _out
CONTROLLER_GEN := $(GO) run sigs.k8s.io/controller-tools/cmd/controller-gen@v0.20.0
# Flags for `go test` in `make test`; override e.g. GOTEST_FLAGS='-run Foo -v'.
GOTEST_FLAGS ?=
TEST_DEPS :=
# The alert rules evaluated by Prometheus's rule engine: a module of its own (its go.mod says why),
# so ./... does not reach it and check and test name it.
RULETEST_DIR := config/monitoring/ruletest
# The Helm chart's tests and packager (charts/caplb): a module of its own too (helm needs k8s.io
# v0.37, the main module is on v0.36; hack/chart/doc.go).
CHART_TEST_DIR := hack/chart

include $(sort $(wildcard mk/*.mk))

.PHONY: help build generate fmt check test

help: ## List the targets.
	@grep -hE '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/' | sort

build: ## Build caplb (manager + agent) and caplb-agent (the agent alone, smaller) into _out/bin.
	$(GO) build -ldflags '$(GO_LDFLAGS)' -o $(OUT)/bin/caplb ./cmd/caplb
	$(GO) build -ldflags '$(GO_LDFLAGS)' -o $(OUT)/bin/caplb-agent ./cmd/caplb-agent

generate: ## Regenerate deepcopy code, CRDs and RBAC from the Go markers.
	$(CONTROLLER_GEN) object paths=./api/...
	$(CONTROLLER_GEN) crd paths=./api/... output:crd:dir=./config/crd/bases
	$(CONTROLLER_GEN) rbac:roleName=caplb-manager paths=./controllers/... paths=./providers/... output:rbac:dir=./config/rbac

fmt: ## Format the Go code.
	gofmt -w $$(git ls-files '*.go')

check: ## Fail on unformatted code and go vet findings.
	@echo "check: gofmt and go vet (a first run also downloads and compiles caplb's modules: several minutes)"
	@bad=$$(gofmt -l $$(git ls-files -co --exclude-standard '*.go')); \
	  if [ -n "$$bad" ]; then echo "gofmt: these files need formatting (run make fmt):"; echo "$$bad"; exit 1; fi
	$(GO) vet ./...
	cd $(RULETEST_DIR) && $(GO) vet ./...
	cd $(CHART_TEST_DIR) && $(GO) vet ./...

# Packages whose tests run no network lab and measure no sub-second timer: make test runs them
# two at a time, in the background at idle CPU priority, beside the light labs (hack/test.sh says
# why that leaves the labs' timings alone). A new package runs with the labs until it is listed here.
# Keep e2e/integration and e2e/install (each several API servers and managers) out of the front of the list:
# started first, together, at idle priority, they were slow enough that a manager's stop outlived its grace once.
PARALLEL_TEST_PKGS := ./api/... ./cmd/... ./config/... ./controllers/... ./providers/... ./hack/... \
	./internal/... ./templates/... ./e2e/integration ./e2e/install ./e2e/templates ./e2e/envtest \
	./e2e/harness ./e2e/testinfra ./e2e/testpki ./e2e/bench/controller ./e2e/bench/rollout \
	./e2e/lifecycle/observe/clients ./e2e/lab/cloudinit
# Packages with labs that boot real control planes (load 15 on 2 cores while a member boots):
# make test runs their SOLO_TESTS last, one at a time, with nothing beside them; their other tests
# (stand-in lifecycles, unit tests) run with the light labs.
SOLO_TEST_PKGS := ./e2e/lab/kubeadm ./e2e/realcp ./e2e/lifecycle
SOLO_TESTS := ^(TestKubeadmControlPlane|TestRealControlPlane|TestLifecycleReal(ARP|BGP)|TestKubeVIPTakeOverReal|TestEndpointMoveReal(MemberLeaves)?)$$
# Real control-plane labs make test leaves to a benchmark that runs the same lab (make test's time:
# each boots six machines in about 3.5 minutes): the BGP kube-vip takeover runs in make bench-takeover.
BENCH_ONLY_TESTS := ^TestKubeVIPTakeOverRealBGP$$

test: check $(TEST_DEPS) ## Run unit, integration and (as root) network-lab tests.
	@GO='$(GO)' GOTEST_FLAGS='$(GOTEST_FLAGS)' PARALLEL_TEST_PKGS='$(PARALLEL_TEST_PKGS)' \
	  SOLO_TEST_PKGS='$(SOLO_TEST_PKGS)' SOLO_TESTS='$(SOLO_TESTS)' BENCH_ONLY_TESTS='$(BENCH_ONLY_TESTS)' RULETEST_DIR='$(RULETEST_DIR)' CHART_TEST_DIR='$(CHART_TEST_DIR)' \
	  hack/test.sh
