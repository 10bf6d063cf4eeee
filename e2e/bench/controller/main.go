// Command controller is `make bench-controller`: it measures caplb's manager at scale on the test
// control plane. It creates N Clusters, each with three control-plane Machines reported Ready and
// a static LoadBalancer, then starts the real `caplb manager` binary as a child process and
// measures
//
//   - converge: from the manager's start until every LoadBalancer is Ready with three active
//     members (seen through a watch);
//   - change-to-status latency at steady state: a member's disabled annotation is toggled, one
//     change at a time, and the time from the request until the LoadBalancer's status reflects
//     it (seen through the watch) is recorded;
//   - the manager's peak and current RSS (/proc/<pid>/status VmHWM, VmRSS) and CPU time.
//
// It prints a table and writes JSON to -out ($BENCH_OUT, default _out/bench-controller.json).
// Goals (docs/benchmarks.md): converge < 60 s, p99 < 250 ms, RSS < 300 MiB with N = 1000; converge
// < 240 s and RSS < 1 GiB with N = 10000 (goalsFor interpolates between). The JSON is written
// even when a goal is missed or the run fails part-way: a figure that missed its goal is still a
// figure.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	lbv1 "github.com/caplb/caplb/api/v1alpha1"
	"github.com/caplb/caplb/e2e/harness"
)

// goalP99Millis is the change-to-status goal at every N.
const goalP99Millis = 250

// goalsFor returns the converge and RSS goals for n LoadBalancers: 60 s and 300 MiB up to 1000,
// 240 s and 1024 MiB at 10000 (the product brief and issue 21), linear between and beyond.
func goalsFor(n int) (convergeSeconds, rssMiB float64) {
	f := max(0, float64(n-1000)/9000)
	return 60 + 180*f, 300 + 724*f
}

type config struct {
	n, changes, workers int
	binary, out         string
	managerArgs         string
	convergeTimeout     time.Duration
	verbose             bool
}

// timeout is -converge-timeout, or when it is 0 a limit long enough to report the real figure
// rather than hide it: 10 minutes plus 100 ms per LoadBalancer.
func (c config) timeout() time.Duration {
	if c.convergeTimeout > 0 {
		return c.convergeTimeout
	}
	return 10*time.Minute + time.Duration(c.n)*100*time.Millisecond
}

// result is the JSON written to -out.
type result struct {
	LoadBalancers   int     `json:"loadbalancers"`
	Machines        int     `json:"machines"`
	CreateSeconds   float64 `json:"create_seconds"`
	ConvergeSeconds float64 `json:"converge_seconds"`
	// Converged counts the LoadBalancers Ready with 3 active members when the wait ended (all of
	// them unless the limit passed).
	Converged int `json:"converged"`
	// ConvergeSecondsPerThousand and RSSMiBPerThousand are the per-LoadBalancer costs, to compare
	// runs of different N.
	ConvergeSecondsPerThousand float64 `json:"converge_seconds_per_1000"`
	RSSMiBPerThousand          float64 `json:"rss_mib_per_1000"`
	Error                      string  `json:"error,omitempty"`
	Changes                    int     `json:"changes"`
	P50Millis                  float64 `json:"p50_ms"`
	P90Millis                  float64 `json:"p90_ms"`
	P99Millis                  float64 `json:"p99_ms"`
	MaxMillis                  float64 `json:"max_ms"`
	// RSSMiB is the manager's peak resident set (VmHWM) over the whole run.
	RSSMiB          float64 `json:"rss_mib"`
	RSSConvergedMiB float64 `json:"rss_converged_mib"`
	RSSEndMiB       float64 `json:"rss_end_mib"`
	CPUConverge     float64 `json:"cpu_seconds_converge"`
	CPUTotal        float64 `json:"cpu_seconds_total"`
	// CPU used by the test control plane while the manager converged, and the machine's load:
	// the benchmark shares 2 cores with them (and with whatever else runs on the machine).
	APIServerCPUCreate   float64            `json:"apiserver_cpu_seconds_create"`
	APIServerCPUConverge float64            `json:"apiserver_cpu_seconds_converge"`
	EtcdCPUConverge      float64            `json:"etcd_cpu_seconds_converge"`
	LoadAvgStart         string             `json:"loadavg_at_manager_start"`
	LoadAvgConverged     string             `json:"loadavg_at_convergence"`
	MetricsConverged     map[string]float64 `json:"manager_metrics_at_convergence,omitempty"`
	Metrics              map[string]float64 `json:"manager_metrics,omitempty"`
	Goals                map[string]bool    `json:"goals_met"`
	Command              string             `json:"command"`
	Date                 string             `json:"date"`
	CPUs                 int                `json:"cpus"`
	GoVersion            string             `json:"go_version"`
}

func main() {
	cfg := config{}
	out := os.Getenv("BENCH_OUT")
	if out == "" {
		out = "_out/bench-controller.json"
	}
	flag.IntVar(&cfg.n, "n", 1000, "number of Clusters and LoadBalancers (each Cluster has 3 Machines)")
	flag.IntVar(&cfg.changes, "changes", 300, "steady-state changes to time (at least 200)")
	flag.IntVar(&cfg.workers, "workers", 32, "parallel creators")
	flag.StringVar(&cfg.binary, "binary", "_out/bin/caplb", "the caplb binary to run as the manager")
	flag.StringVar(&cfg.out, "out", out, "where to write the JSON result ($BENCH_OUT)")
	flag.StringVar(&cfg.managerArgs, "manager-args", "", "extra arguments for `caplb manager`, space-separated")
	flag.BoolVar(&cfg.verbose, "v", false, "print every steady-state change")
	flag.DurationVar(&cfg.convergeTimeout, "converge-timeout", 0, "give up converging after this long (0: 10m + 100ms per LoadBalancer)")
	flag.Parse()
	if cfg.changes < 200 {
		fmt.Fprintln(os.Stderr, "bench-controller: -changes must be at least 200 for a meaningful p99")
		os.Exit(2)
	}
	// On SIGINT/SIGTERM the context ends, the waits give up and the deferred stops run: the
	// manager, the API server and etcd never outlive the benchmark.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	res, err := run(ctx, cfg)
	if cfg.n > 0 {
		res.ConvergeSecondsPerThousand = res.ConvergeSeconds * 1000 / float64(cfg.n)
		res.RSSMiBPerThousand = res.RSSMiB * 1000 / float64(cfg.n)
	}
	if err != nil {
		res.Error = err.Error()
		fmt.Fprintln(os.Stderr, "bench-controller: FAILED:", err)
	}
	printTable(res)
	if werr := writeJSON(cfg.out, res); werr != nil {
		fmt.Fprintln(os.Stderr, "bench-controller:", werr)
		os.Exit(1)
	}
	fmt.Println("wrote", cfg.out)
	if err != nil {
		stop()
		os.Exit(1)
	}
}

func logf(format string, args ...any) {
	fmt.Printf("%s %s\n", time.Now().Format("15:04:05.000"), fmt.Sprintf(format, args...))
}

func run(ctx context.Context, cfg config) (res result, err error) {
	res = result{
		LoadBalancers: cfg.n, Machines: 3 * cfg.n, Changes: cfg.changes,
		Command: "make bench-controller N=" + fmt.Sprint(cfg.n), Date: time.Now().UTC().Format(time.RFC3339),
		CPUs: runtime.NumCPU(), GoVersion: runtime.Version(),
	}
	logf("starting the test control plane")
	env, err := harness.Start(harness.Options{ClientQPS: 5000, ClientBurst: 10000})
	if err != nil {
		return res, err
	}
	defer func() {
		if serr := env.Stop(); serr != nil && err == nil {
			err = serr
		}
	}()
	ext, err := harness.Listen(0, "127.0.0.1")
	if err != nil {
		return res, err
	}
	defer ext.Close()
	if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "bench"}}); err != nil {
		return res, err
	}

	pop := &population{c: env.Client, namespace: "bench", n: cfg.n, workers: cfg.workers,
		endpoint: lbv1.APIEndpoint{Host: "127.0.0.1", Port: int32(ext.Port)}}
	logf("creating %d Clusters, %d Machines (Ready), %d LoadBalancers with %d workers", cfg.n, 3*cfg.n, cfg.n, cfg.workers)
	apiCPUCreate0 := childCPUSeconds("kube-apiserver")
	took, err := pop.create(ctx, func(done int) {
		if done%500 == 0 || done == cfg.n {
			logf("  %d/%d created", done, cfg.n)
		}
	})
	if err != nil {
		return res, err
	}
	res.CreateSeconds = took.Seconds()
	res.APIServerCPUCreate = childCPUSeconds("kube-apiserver") - apiCPUCreate0
	logf("created in %.1fs", took.Seconds())

	// Stopped before the control plane (defers run last-in first-out).
	tctx, stopTracker := context.WithCancel(ctx)
	defer stopTracker()
	trk, err := startTracker(tctx, env.Config, cfg.n)
	if err != nil {
		return res, err
	}
	dir, err := os.MkdirTemp("", "caplb-bench-")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(dir)
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kubeconfig, env.ControlPlane.Environment.KubeConfig, 0o600); err != nil {
		return res, err
	}
	logPath := filepath.Join(filepath.Dir(cfg.out), "bench-controller-manager.log")
	if err := os.MkdirAll(filepath.Dir(logPath), 0o755); err != nil {
		return res, err
	}
	logFile, err := os.Create(logPath)
	if err != nil {
		return res, err
	}
	defer logFile.Close()

	logf("starting %s manager (log: %s)", cfg.binary, logPath)
	apiCPU0, etcdCPU0 := childCPUSeconds("kube-apiserver"), childCPUSeconds("etcd")
	res.LoadAvgStart = loadavg()
	start := time.Now()
	mgr, err := startManager(cfg.binary, kubeconfig, strings.Fields(cfg.managerArgs), logFile)
	if err != nil {
		return res, err
	}
	defer func() {
		if serr := mgr.stop(); serr != nil && err == nil {
			err = fmt.Errorf("stopping manager: %w", serr)
		}
	}()

	convergeErr := awaitConvergence(ctx, cfg, trk, mgr, start)
	res.Converged = trk.convergedCount()
	res.RSSMiB, _, _ = mgr.memory()
	if convergeErr != nil {
		res.ConvergeSeconds = time.Since(start).Seconds()
		return res, convergeErr
	}
	res.ConvergeSeconds = trk.convergedAt.Sub(start).Seconds()
	_, res.RSSConvergedMiB, _ = mgr.memory()
	res.CPUConverge, _ = mgr.cpuSeconds()
	res.APIServerCPUConverge = childCPUSeconds("kube-apiserver") - apiCPU0
	res.EtcdCPUConverge = childCPUSeconds("etcd") - etcdCPU0
	res.LoadAvgConverged = loadavg()
	res.MetricsConverged, _ = mgr.scrape(ctx, metricNames...)
	logf("converged: %d LoadBalancers Ready with 3 active members in %.2fs", cfg.n, res.ConvergeSeconds)

	lat, err := steadyState(ctx, cfg, env, trk)
	if err != nil {
		return res, err
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	res.P50Millis, res.P90Millis = ms(percentile(lat, 50)), ms(percentile(lat, 90))
	res.P99Millis, res.MaxMillis = ms(percentile(lat, 99)), ms(lat[len(lat)-1])

	res.RSSMiB, res.RSSEndMiB, err = mgr.memory()
	if err != nil {
		return res, err
	}
	res.CPUTotal, _ = mgr.cpuSeconds()
	res.Metrics, _ = mgr.scrape(ctx, metricNames...)
	goalConverge, goalRSS := goalsFor(cfg.n)
	res.Goals = map[string]bool{
		fmt.Sprintf("converge_under_%.0fs", goalConverge): res.ConvergeSeconds < goalConverge,
		"p99_under_250ms":                         res.P99Millis < goalP99Millis,
		fmt.Sprintf("rss_under_%.0fmib", goalRSS): res.RSSMiB < goalRSS,
		"all_changes_visible":                     len(lat) == cfg.changes,
	}
	return res, nil
}

// metricNames are the manager metrics recorded, to tell where the time goes.
var metricNames = []string{
	"controller_runtime_reconcile_total", "controller_runtime_reconcile_errors_total",
	"controller_runtime_reconcile_time_seconds_sum", "controller_runtime_reconcile_time_seconds_count",
	"workqueue_queue_duration_seconds_sum", "workqueue_queue_duration_seconds_count",
	"workqueue_work_duration_seconds_sum", "workqueue_work_duration_seconds_count",
	"rest_client_requests_total",
	"rest_client_request_duration_seconds_sum", "rest_client_request_duration_seconds_count",
	"caplb_loadbalancer_reconcile_total",
}

func loadavg() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	return strings.Join(strings.Fields(string(data))[:3], " ")
}

func awaitConvergence(ctx context.Context, cfg config, trk *tracker, mgr *managerProc, start time.Time) error {
	deadline := time.NewTimer(cfg.timeout())
	defer deadline.Stop()
	tick := time.NewTicker(5 * time.Second)
	defer tick.Stop()
	for {
		select {
		case <-trk.onConverged:
			return nil
		case <-tick.C:
			if done, err := mgr.exited(); done {
				return fmt.Errorf("manager exited before convergence: %v (see its log)", err)
			}
			peak, _, _ := mgr.memory()
			logf("  %.0fs: %d/%d converged, manager RSS peak %.0f MiB", time.Since(start).Seconds(),
				trk.convergedCount(), cfg.n, peak)
		case <-deadline.C:
			return fmt.Errorf("only %d/%d LoadBalancers converged within %s", trk.convergedCount(), cfg.n, cfg.timeout())
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// steadyState toggles members' disabled annotation one change at a time and returns the time
// from each request to the watch event whose status reflects it. Before the next change the
// member is let settle (disabled, or active again), so changes do not overlap.
func steadyState(ctx context.Context, cfg config, env *harness.Env, trk *tracker) ([]time.Duration, error) {
	logf("steady state: %d changes (disable / enable a member), one at a time", cfg.changes)
	rnd := rand.New(rand.NewPCG(1, 2))
	lat := make([]time.Duration, 0, cfg.changes)
	reason := "bench"
	for len(lat) < cfg.changes {
		i, j := rnd.IntN(cfg.n), rnd.IntN(3)
		key, member := "bench/"+lbName(i), machineName(i, j)
		m := &clusterv1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: "bench", Name: member}}
		for _, disable := range []bool{true, false} {
			if len(lat) == cfg.changes {
				break
			}
			reflects, settled := func(lb *lbv1.LoadBalancer) bool {
				s := harness.TargetState(lb, member)
				return s == lbv1.TargetDisabling || s == lbv1.TargetDisabled
			}, func(lb *lbv1.LoadBalancer) bool { return harness.TargetState(lb, member) == lbv1.TargetDisabled }
			value := &reason
			if !disable {
				reflects, settled = func(lb *lbv1.LoadBalancer) bool {
					s := harness.TargetState(lb, member)
					return s == lbv1.TargetAdding || s == lbv1.TargetActive
				}, func(lb *lbv1.LoadBalancer) bool { return converged(lb) }
				value = nil
			}
			wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			sent := time.Now()
			if err := env.Annotate(wctx, m, lbv1.DisabledAnnotation, value); err != nil {
				cancel()
				return nil, err
			}
			at, err := trk.waitFor(wctx, key, reflects)
			var settledAt time.Time
			if err == nil {
				settledAt, err = trk.waitFor(wctx, key, settled)
			}
			cancel()
			if cfg.verbose && err == nil {
				logf("  change %d: disable=%t %s reflected after %s, settled after %s", len(lat)+1, disable, member,
					at.Sub(sent).Round(time.Microsecond), settledAt.Sub(sent).Round(time.Microsecond))
			}
			if err != nil {
				return nil, fmt.Errorf("change %d (disable=%t %s): %w", len(lat)+1, disable, member, err)
			}
			lat = append(lat, at.Sub(sent))
		}
		if len(lat)%100 == 0 {
			logf("  %d/%d changes", len(lat), cfg.changes)
		}
	}
	return lat, nil
}

// percentile uses the nearest-rank method on sorted durations.
func percentile(sorted []time.Duration, p float64) time.Duration {
	rank := int(float64(len(sorted))*p/100+0.999999) - 1
	rank = max(0, min(rank, len(sorted)-1))
	return sorted[rank]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func printTable(r result) {
	mark := func(ok bool) string {
		if ok {
			return "met"
		}
		return "MISSED"
	}
	fmt.Println()
	fmt.Printf("caplb controller benchmark: %d LoadBalancers x 3 Machines (%d CPUs, %s)\n", r.LoadBalancers, r.CPUs, r.GoVersion)
	fmt.Printf("  %-38s %10s   %s\n", "measure", "value", "goal")
	fmt.Printf("  %-38s %9.1fs   -\n", "create objects (bench client)", r.CreateSeconds)
	goalConverge, goalRSS := goalsFor(r.LoadBalancers)
	convergeKey, rssKey := fmt.Sprintf("converge_under_%.0fs", goalConverge), fmt.Sprintf("rss_under_%.0fmib", goalRSS)
	fmt.Printf("  %-38s %9.2fs   < %.0fs: %s\n", fmt.Sprintf("converge from manager start (%d/%d)", r.Converged, r.LoadBalancers),
		r.ConvergeSeconds, goalConverge, mark(r.Goals[convergeKey]))
	fmt.Printf("  %-38s %8.1fms\n", "change-to-status p50", r.P50Millis)
	fmt.Printf("  %-38s %8.1fms\n", "change-to-status p90", r.P90Millis)
	fmt.Printf("  %-38s %8.1fms   < %dms: %s\n", fmt.Sprintf("change-to-status p99 (%d changes)", r.Changes), r.P99Millis, goalP99Millis, mark(r.Goals["p99_under_250ms"]))
	fmt.Printf("  %-38s %8.1fms\n", "change-to-status max", r.MaxMillis)
	fmt.Printf("  %-38s %7.0fMiB   < %.0fMiB: %s\n", "manager RSS peak (VmHWM)", r.RSSMiB, goalRSS, mark(r.Goals[rssKey]))
	fmt.Printf("  %-38s %9.2fs   %7.0fMiB\n", "per 1000 LoadBalancers: converge, RSS", r.ConvergeSecondsPerThousand, r.RSSMiBPerThousand)
	fmt.Printf("  %-38s %7.0fMiB\n", "manager RSS at convergence", r.RSSConvergedMiB)
	fmt.Printf("  %-38s %7.0fMiB\n", "manager RSS at end", r.RSSEndMiB)
	fmt.Printf("  %-38s %9.1fs\n", "manager CPU to converge", r.CPUConverge)
	fmt.Printf("  %-38s %9.1fs\n", "manager CPU total", r.CPUTotal)
	fmt.Printf("  %-38s %9.1fs\n", "kube-apiserver CPU while creating", r.APIServerCPUCreate)
	fmt.Printf("  %-38s %9.1fs\n", "kube-apiserver CPU while converging", r.APIServerCPUConverge)
	fmt.Printf("  %-38s %9.1fs\n", "etcd CPU while converging", r.EtcdCPUConverge)
	fmt.Printf("  %-38s %10s\n", "load average at start / converged", r.LoadAvgStart+" / "+r.LoadAvgConverged)
	if n := r.MetricsConverged["controller_runtime_reconcile_time_seconds_count"]; n > 0 {
		fmt.Printf("  %-38s %10.0f\n", "reconciles until converged", n)
		fmt.Printf("  %-38s %10.0f\n", "API requests until converged", r.MetricsConverged["rest_client_requests_total"])
	}
	if n := r.Metrics["controller_runtime_reconcile_time_seconds_count"]; n > 0 {
		fmt.Printf("  %-38s %10.0f\n", "reconciles", n)
		fmt.Printf("  %-38s %8.1fms\n", "mean reconcile time", 1000*r.Metrics["controller_runtime_reconcile_time_seconds_sum"]/n)
	}
	if n := r.Metrics["workqueue_queue_duration_seconds_count"]; n > 0 {
		fmt.Printf("  %-38s %8.1fms\n", "mean time queued", 1000*r.Metrics["workqueue_queue_duration_seconds_sum"]/n)
	}
	fmt.Println()
}

func writeJSON(path string, r result) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(data, '\n'), 0o644)
}
