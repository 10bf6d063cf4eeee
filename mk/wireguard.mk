# WireGuard tunnel backend (issue 11): the lab's tools and the benchmark.
# The e2e/wireguard lab tests run in `make test` (root); they need nft for the lab's NAT router
# (the agent itself needs no nft: it programs nftables over netlink) and conntrack to flush its
# mappings.

.PHONY: nftables conntrack bench-wireguard

# Idempotent and cheap once installed; installing needs root (without root the lab tests skip).
nftables: ## Install nft (Debian package nftables) for the WireGuard lab's NAT router if it is missing.
	@if command -v nft >/dev/null 2>&1 || [ -x /usr/sbin/nft ]; then exit 0; fi; \
	if [ "$$(id -u)" != 0 ]; then echo "nftables: not root, not installing (WireGuard NAT test will skip)"; exit 0; fi; \
	export DEBIAN_FRONTEND=noninteractive; \
	apt-get install -y --no-install-recommends nftables || { apt-get update && apt-get install -y --no-install-recommends nftables; }

TEST_DEPS += nftables

# Idempotent and cheap once installed; installing needs root (without root the lab tests skip).
conntrack: ## Install conntrack (Debian package conntrack) for the WireGuard NAT lab if it is missing.
	@if command -v conntrack >/dev/null 2>&1 || [ -x /usr/sbin/conntrack ]; then exit 0; fi; \
	if [ "$$(id -u)" != 0 ]; then echo "conntrack: not root, not installing (WireGuard NAT test will skip)"; exit 0; fi; \
	export DEBIAN_FRONTEND=noninteractive; \
	apt-get install -y --no-install-recommends conntrack || { apt-get update && apt-get install -y --no-install-recommends conntrack; }

TEST_DEPS += conntrack

BENCH_WIREGUARD_TRIALS ?= 20
# BENCH_WIREGUARD_SCENARIOS: all, none (path figures only: latency, throughput, RSS) or a comma list.
BENCH_WIREGUARD_SCENARIOS ?= all
# BENCH_WIREGUARD_DEVICE: the tunnel device of every gateway and member, netstack or tun.
BENCH_WIREGUARD_DEVICE ?= netstack
bench-wireguard: nftables conntrack ## WireGuard benchmark (root): failover/quiesce/rotation per scenario, added latency, throughput, gateway RSS -> $BENCH_OUT (default _out/bench-wireguard.json)
	@mkdir -p $(OUT)
	BENCH_OUT=$(abspath $(or $(BENCH_OUT),$(OUT)/bench-wireguard.json)) \
	  $(GO) run ./e2e/bench/wireguard -trials $(BENCH_WIREGUARD_TRIALS) -scenarios $(BENCH_WIREGUARD_SCENARIOS) -device $(BENCH_WIREGUARD_DEVICE)
