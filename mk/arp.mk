# ARP VIP node agent: benchmark in the network-namespace lab (root).
# The e2e/arp lab tests build their own binaries and run in `make test`.

BENCH_ARP_TRIALS ?= 20

.PHONY: bench-arp
bench-arp: nftables ## ARP failover benchmark (root): p50/p99 per fault, failed connects, agent RSS -> $BENCH_OUT (default _out/bench-arp.json)
	$(GO) run ./e2e/bench/arp -trials $(BENCH_ARP_TRIALS)

# nft (Debian package nftables): the successor's hand-over redirect (modes/arp/handover.go) shells out
# to it, so the lab suite's zero-loss hand-over assertions need it. Idempotent and cheap once installed;
# installing needs root (without root the lab tests skip anyway).
.PHONY: nftables
nftables: ## Install nft (Debian package nftables) for the ARP lab if it is missing.
	@if command -v nft >/dev/null 2>&1 || [ -x /usr/sbin/nft ]; then exit 0; fi; \
	if [ "$$(id -u)" != 0 ]; then echo "nftables: not root, not installing nft (ARP lab tests will skip)"; exit 0; fi; \
	export DEBIAN_FRONTEND=noninteractive; \
	apt-get install -y --no-install-recommends nftables || { apt-get update && apt-get install -y --no-install-recommends nftables; }

TEST_DEPS += nftables
