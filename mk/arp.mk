# ARP VIP node agent: benchmark in the network-namespace lab (root).
# The e2e/arp lab tests build their own binaries and run in `make test`.

BENCH_ARP_TRIALS ?= 20

.PHONY: bench-arp
bench-arp: ## ARP failover benchmark (root): p50/p99 per fault, failed connects, agent RSS -> $BENCH_OUT (default _out/bench-arp.json)
	$(GO) run ./e2e/bench/arp -trials $(BENCH_ARP_TRIALS)
