# ARP VIP node agent: benchmark in the network-namespace lab (root).
# The e2e/arp lab tests build their own binaries and run in `make test`; they need nothing
# installed (the agent programs nftables over netlink itself).

BENCH_ARP_TRIALS ?= 20

.PHONY: bench-arp keepalived
bench-arp: keepalived ## ARP failover benchmark (root): caplb, then keepalived in the same lab; p50/p99 and ratios per fault -> $BENCH_OUT (default _out/bench-arp.json)
	$(GO) run ./e2e/bench/arp -trials $(BENCH_ARP_TRIALS)

# keepalived (Debian package): the peer that `make bench-arp` runs right after caplb (VRRPv3,
# 100 ms adverts). Idempotent and cheap once installed; installing needs root (the bench does anyway).
KEEPALIVED := /usr/sbin/keepalived
keepalived: ## Install keepalived (Debian package) for the ARP benchmark's peer if it is missing.
	@if [ -x $(KEEPALIVED) ] || command -v keepalived >/dev/null 2>&1; then exit 0; fi; \
	if [ "$$(id -u)" != 0 ]; then echo "keepalived: not root, not installing (make bench-arp needs root anyway)"; exit 1; fi; \
	export DEBIAN_FRONTEND=noninteractive; \
	apt-get install -y --no-install-recommends keepalived || { apt-get update && apt-get install -y --no-install-recommends keepalived; }
