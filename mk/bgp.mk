# BGP VIP (issue 4): the FRR router the network lab peers with, and the BGP benchmark.

# FRR's daemons, run directly by e2e/lab in a router namespace (never the system service).
FRR_BGPD := /usr/lib/frr/bgpd

.PHONY: frr bench-bgp

# Idempotent and cheap once installed: CI runs `make test` as root on a fresh machine, and the
# BGP lab suite needs a real router. Installing needs root; without it the lab tests skip.
frr: ## Install FRR (Debian package frr) for the BGP lab if it is missing.
	@if [ -x $(FRR_BGPD) ] && [ -x /usr/lib/frr/zebra ]; then exit 0; fi; \
	if [ "$$(id -u)" != 0 ]; then echo "frr: not root, not installing FRR (BGP lab tests will skip)"; exit 0; fi; \
	export DEBIAN_FRONTEND=noninteractive; \
	apt-get install -y --no-install-recommends frr || { apt-get update && apt-get install -y --no-install-recommends frr; }

TEST_DEPS += frr

BENCH_BGP_TRIALS ?= 20
# BFD soak after the scenarios: two busy loops on the machine, no BFD flap allowed ("0": skip).
BENCH_BGP_SOAK ?= 5m
# go test runs in the package directory: hand it an absolute output path.
bench-bgp: frr nftables ## Benchmark the BGP VIP: health failure, graceful quiesce, agent kill, frozen agent and powered-off node (BFD 300ms x 3), ECMP spread, BFD soak.
	@mkdir -p $(OUT)
	CAPLB_BENCH_BGP=1 BENCH_TRIALS=$(BENCH_BGP_TRIALS) BENCH_SOAK=$(BENCH_BGP_SOAK) \
	  BENCH_OUT=$(abspath $(or $(BENCH_OUT),$(OUT)/bench-bgp.json)) \
	  $(GO) test -count=1 -timeout 30m -v -run '^TestBenchBGP$$' ./e2e/bench/bgp/
