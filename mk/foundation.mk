# Foundation (issue 2): the demo on the test control plane and the controller benchmark.
# The integration suite (e2e/integration) runs in `make test`; it needs the control-plane
# binaries, hence testbin in TEST_DEPS (cheap once built).

TEST_DEPS += testbin

.PHONY: demo bench-controller test-real

demo: testbin nftables ## As root: a real (kubeadm-made) control plane's whole life behind an ARP VIP with client-go counting failures (else the static demo); prints a timeline.
	$(GO) run ./e2e/demo

test-real: testbin nftables frr ## As root: the lifecycle tests on a real kubeadm-made control plane alone (TestLifecycleRealARP and TestLifecycleRealBGP, ~4 min each; also in make test).
	$(GO) test -count=1 -timeout 25m -run 'TestLifecycleReal(ARP|BGP)$$' -v ./e2e/lifecycle

# N LoadBalancers x 3 Machines; the brief's goal is stated for N=1000.
N ?= 1000
BENCH_CHANGES ?= 300
bench-controller: testbin build ## Benchmark the manager binary: N LoadBalancers x 3 Machines (N=1000), JSON to $BENCH_OUT.
	@mkdir -p $(OUT)
	BENCH_OUT=$${BENCH_OUT:-$(OUT)/bench-controller.json} \
	  $(GO) run ./e2e/bench/controller -n $(N) -changes $(BENCH_CHANGES) -binary $(OUT)/bin/caplb

# Trials per fault (hard kill, quorum loss) of bench-rollout's fault pass: 0.5-1.5 min of lab
# boot, then per trial about 50 s of quorum loss and 30 s of hard kill and rebuild on 2 cores.
BENCH_ROLLOUT_FAULT_TRIALS ?= 5
# Rollout runs per backend: every one must meet the goals; the worst is reported.
BENCH_ROLLOUT_RUNS ?= 3

.PHONY: bench-rollout
bench-rollout: testbin frr ## Benchmark a real (kubeadm-made) control plane's whole life behind an ARP and a BGP VIP, BENCH_ROLLOUT_RUNS=3 times each, then its faults (owner's machine killed hard, etcd quorum loss; BENCH_ROLLOUT_FAULT_TRIALS=5 each) (root): JSON to $BENCH_OUT, SVG timelines beside it; exits non-zero when any run misses a goal.
	@mkdir -p $(OUT)
	BENCH_OUT=$${BENCH_OUT:-$(OUT)/bench-rollout.json} $(GO) run ./e2e/bench/rollout -runs $(BENCH_ROLLOUT_RUNS) -fault-trials $(BENCH_ROLLOUT_FAULT_TRIALS)

.PHONY: bench-takeover
bench-takeover: testbin nftables frr ## Benchmark moving a running cluster off real kube-vip (v0.9.1 and v1.2.2, static pods on a kubeadm-made control plane) onto caplb — ARP, the unguarded swap as a control, BGP with and without kube-vip's election (root; about 25 min): JSON to $BENCH_OUT; exits non-zero when a goal is missed.
	@mkdir -p $(OUT)
	BENCH_OUT=$${BENCH_OUT:-$(OUT)/bench-takeover.json} $(GO) run ./e2e/bench/takeover
