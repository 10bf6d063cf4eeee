# Real kube-apiserver + etcd for e2e/envtest, built from Go modules pinned in
# e2e/testbin (see hack/testbin.sh). The build is cached per version, so
# `make testbin` is cheap after the first (multi-minute) run.

# Resolved relative to this fragment so `make -C` and includes from any
# directory work.
TESTBIN_SCRIPT := $(abspath $(dir $(lastword $(MAKEFILE_LIST)))../hack/testbin.sh)

# Where the binaries live; the script is the single source of truth for the
# path (it honours CAPLB_CACHE). Exported so recipes such as the test target
# can pass it on, e.g. as KUBEBUILDER_ASSETS.
TESTBIN_DIR := $(shell $(TESTBIN_SCRIPT) --print-dir)
export TESTBIN_DIR

.PHONY: testbin
testbin:
	$(TESTBIN_SCRIPT)
