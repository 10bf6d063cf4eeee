//go:build linux

package lifecycle

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/caplb/caplb/e2e/lab"
	"github.com/caplb/caplb/e2e/lab/bgplab"
	"github.com/caplb/caplb/e2e/lifecycle/observe"
)

var bins Binaries

func TestMain(m *testing.M) {
	code := func() int {
		if os.Geteuid() == 0 {
			dir, err := os.MkdirTemp("", "caplb-lifecycle-bin-")
			if err != nil {
				panic(err)
			}
			defer os.RemoveAll(dir)
			if bins, err = BuildBinaries(dir); err != nil {
				panic(err)
			}
		}
		return m.Run()
	}()
	os.Exit(code)
}

// runLifecycle runs the whole life behind the backend's VIP and checks what the issue promises:
// the client never fails (new and kept-alive connections; the watch-like stream always
// reopens), the VIP always has a holder and two only within a hand-over's drain, every
// pre-drain hook released only after the data plane confirmed the member left (the scenario
// checks that at the moment it sees the release), and nothing left behind.
func runLifecycle(t *testing.T, backend Backend, api APIServer, name string) {
	lab.SkipUnlessRoot(t)
	rt := &recordingT{T: t}
	g := NewWithT(rt)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	var err error
	opts := Options{Backend: backend, Binaries: bins, Name: name, APIServer: api}
	if api == Real {
		// CAPI's kubeadm bootstrap provider renders the machines' data (CAPLB_LAB_BOOTSTRAP=lab:
		// the lab writes kubeadm's configuration itself).
		opts.Bootstrap, err = BootstrapFromEnv(CAPIBootstrap)
		g.Expect(err).NotTo(HaveOccurred())
	}
	l, err := Start(ctx, opts)
	g.Expect(err).NotTo(HaveOccurred())
	defer func() {
		if dir := os.Getenv("CAPLB_LIFECYCLE_LOG_DIR"); dir != "" {
			if err := l.SaveLogs(filepath.Join(dir, name)); err != nil {
				t.Logf("saving the lab's logs: %v", err)
			}
		}
		if t.Failed() {
			t.Log(l.LogTail(40))
			t.Logf("the agents' decisions:\n%s", l.DecisionLog())
			// Last, so that a report showing only the output's tail still names what failed.
			t.Logf("%s failed: %q", t.Name(), rt.failures)
		}
		if err := l.Close(); err != nil {
			t.Errorf("closing the lab: %v", err)
		}
	}()
	obs, err := RunObserved(ctx, l, func(s string) { t.Logf("%s ==> %s", time.Now().UTC().Format("15:04:05.000"), s) })
	if dir := os.Getenv("CAPLB_LIFECYCLE_SVG_DIR"); dir != "" {
		if f, ferr := os.Create(filepath.Join(dir, "lifecycle-"+string(backend)+"-"+string(api)+".svg")); ferr == nil {
			_ = observe.RenderSVG(f, obs.Input)
			f.Close()
		}
	}
	logObserved(t, obs)
	g.Expect(err).NotTo(HaveOccurred())
	r := obs.Result
	g.Expect(r.Replacements).To(Equal(3))
	if opts.Bootstrap == CAPIBootstrap {
		checkBootedFromCABPK(ctx, g, l)
	}
	g.Expect(r.Requests).To(BeNumerically(">", 1000), "the client ran throughout")
	var failed []observe.Sample
	for _, f := range obs.Failures {
		if !f.Interrupted {
			failed = append(failed, f)
		}
	}
	g.Expect(failed).To(BeEmpty(), "no client request failed")
	g.Expect(r.FailedRequests).To(BeZero())
	g.Expect(r.HooksUnreleased).To(BeZero())
	if api == Real {
		c := obs.Clients
		g.Expect(c).NotTo(BeNil(), "client-go ran through the VIP")
		g.Expect(c.Writes).To(BeNumerically(">", 500), "the writer ran throughout")
		g.Expect(c.FailedWrites).To(BeZero(), "no write failed (after client-go's own retries): %s", c.FirstFailure)
		g.Expect(c.LostEvents).To(BeZero(), "the informer delivered every successful write")
		g.Expect(c.StoreMatches).To(BeTrue(), "the informer's store ends at the writer's last state")
		g.Expect(c.LeaderLosses).To(BeZero(), "the leader-elected loop never lost its Lease")
		// Relists are reported, not asserted: one follows a watch whose API server left (a rolled
		// member) when the next one no longer has its resource version, and the writes it coalesced
		// (relist_skipped) reached the store (StoreMatches above). LostEvents counts only writes
		// that no relist explains.
	}
	if api == Real {
		// Every goal make demo and make bench-rollout judge by, but the longest gap: behind BGP
		// too the VIP is never without an announcing member for MaxGapGoalMS. The gap is
		// printed above and judged by the bench (over 200 ms on 2 shared cores: slow API answers
		// while a machine boots, docs/benchmarks.md).
		var missed []string
		for _, m := range Goals(backend, api, r, obs.Clients) {
			if !strings.HasPrefix(m, MaxGapMiss) {
				missed = append(missed, m)
			}
		}
		g.Expect(missed).To(BeEmpty(), "the goals of a real control plane's life")
	}
	if backend == ARP {
		// A member booting on the same cores starved holders past the silent-holder rule and
		// memberlist's suspicion timeout, and others claimed beside them (issue 36): the kernel's
		// handshake now tells a starved holder from a gone one.
		g.Expect(r.SpuriousClaims).To(BeEmpty(), "no member claimed the VIP beside a live holder that was not leaving")
	}
	if backend == ARP && api == Real {
		// Four control planes on 2 shared cores starve an owner's agent now and then: it asks a
		// majority directly (handshakes included) before it fences itself, and no longer lets go
		// for its own slowness (524 ms without a holder in a run before that, 0 after).
		g.Expect(*r.HolderLessMSMax).To(BeNumerically("<", MaxGapGoalMS), "the VIP never lacked a holder for long")
	} else if backend == ARP {
		g.Expect(*r.HolderLessMSMax).To(BeZero(), "the VIP always had a holder")
	}
	if backend == ARP {
		// The sample's agent drain is 5 s (goaway-chance needs the time); a hand-over adds the
		// gossip of the claim and up to 300 ms for busy connections to answer before the reset.
		// On a real control plane the old owner also keeps its VIP (quiet) for up to the
		// sample's busyDrain while its connections carry requests, until kube-apiserver's
		// GOAWAY moved them.
		bound := 6500.0
		if api == Real {
			busy, err := SampleBusyDrain(backend)
			g.Expect(err).NotTo(HaveOccurred())
			bound += float64(busy.Milliseconds())
		}
		g.Expect(*r.DualOwnerMSMax).To(BeNumerically("<", bound), "two holders only within a hand-over's drain")
	}
}

// recordingT keeps the failures gomega reports, to repeat them after the logs.
type recordingT struct {
	*testing.T
	failures []string
}

func (r *recordingT) Fatalf(format string, args ...any) {
	r.failures = append(r.failures, fmt.Sprintf(format, args...))
	r.T.Helper()
	r.T.Fatalf(format, args...)
}

// logObserved logs a life's figures and what client-go saw.
func logObserved(t *testing.T, obs Observed) {
	t.Helper()
	var b []byte
	_ = observe.Print(writerFunc(func(p []byte) (int, error) { b = append(b, p...); return len(p), nil }), obs.Result)
	t.Logf("figures:\n%s", b)
	if obs.Clients != nil {
		t.Logf("client-go through the VIP: %+v", *obs.Clients)
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

func TestLifecycleARP(t *testing.T) { runLifecycle(t, ARP, StandIn, "lcarp") }

// TestLifecycleBGP runs only where the real control plane is left out (CAPLB_LAB_APISERVER=
// standin): behind BGP, TestLifecycleRealBGP asserts everything this one does (three
// replacements, no failed request, every hook released) and client-go's figures besides. The
// stand-in ARP life stays in make test for its stricter bounds (never without a holder, two
// holders only within the 5 s drain), which a real control plane's busyDrain and stalls loosen.
func TestLifecycleBGP(t *testing.T) {
	bgplab.SkipUnlessFRR(t)
	if api, err := APIServerFromEnv(Real); err != nil {
		t.Fatal(err)
	} else if api == Real {
		t.Skip("TestLifecycleRealBGP runs this life on a real control plane (CAPLB_LAB_APISERVER=standin runs this one)")
	}
	runLifecycle(t, BGP, StandIn, "lcbgp")
}

// The same life in front of a real control plane: kubeadm-made etcd and kube-apiservers on
// every machine, the workload cluster behind the VIP, client-go clients counting failures
// (docs/benchmarks.md). make demo and make bench-rollout run the same life. CAPLB_LAB_APISERVER=
// standin leaves them out (the stand-in lifecycles above run either way).
func TestLifecycleRealARP(t *testing.T) {
	skipUnlessReal(t)
	runLifecycle(t, ARP, Real, "lcrarp")
}

// TestLifecycleRealBGP: behind BGP ECMP the members share their connections (flow sharing), so
// that neither a join nor a withdrawal rehashing the router's flows fails a client-go write.
func TestLifecycleRealBGP(t *testing.T) {
	skipUnlessReal(t)
	bgplab.SkipUnlessFRR(t)
	runLifecycle(t, BGP, Real, "lcrbgp")
}

func skipUnlessReal(t *testing.T) {
	t.Helper()
	api, err := APIServerFromEnv(Real)
	if err != nil {
		t.Fatal(err)
	}
	if api != Real {
		t.Skip("CAPLB_LAB_APISERVER=standin: the real control plane is left out")
	}
}

// checkBootedFromCABPK: every control-plane machine booted from the data CAPI's kubeadm
// bootstrap provider rendered for its Machine's KubeadmConfig — the first with `kubeadm init`,
// the others with `kubeadm join` — and not from anything the lab wrote.
func checkBootedFromCABPK(ctx context.Context, g Gomega, l *Lab) {
	booted := l.Booted()
	g.Expect(booted).To(HaveLen(6), "3 machines and 3 replacements booted")
	checked := 0
	for i, b := range booted {
		g.Expect(b.FromCloudInit).To(BeTrue(), "%s booted from CABPK's cloud-init", b.Machine)
		g.Expect(b.Kubeadm.Join).To(Equal(i > 0), "%s ran kubeadm %s", b.Machine, map[bool]string{true: "join", false: "init"}[i > 0])
		cfg := &bootstrapv1.KubeadmConfig{}
		err := l.Mgmt.Client.Get(ctx, client.ObjectKey{Namespace: l.Namespace, Name: b.Machine}, cfg)
		if apierrors.IsNotFound(err) {
			// CAPI deletes a deleted Machine's bootstrap config with it.
			g.Expect(l.Node(b.Machine)).To(BeNil(), "%s runs, but its KubeadmConfig is gone", b.Machine)
			continue
		}
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(cfg.Status.DataSecretName).To(Equal(b.Secret), "%s booted from its KubeadmConfig's data Secret", b.Machine)
		checked++
	}
	g.Expect(checked).To(Equal(3), "the three machines left were checked against their KubeadmConfigs")
}
