//go:build linux

package lifecycle

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/caplb/caplb/e2e/envtest"
	"github.com/caplb/caplb/e2e/lab"
	"github.com/caplb/caplb/e2e/lab/bgplab"
)

// TestKubeVIPTakeOverReal moves a running cluster off real kube-vip (built from its module, a
// static pod on every machine of a real kubeadm-made control plane, its Lease on the real API
// server) onto caplb by a rolling replacement whose new Machines boot with caplb's files, with
// the prober and client-go on the VIP throughout: kube-vip and caplb never hold the VIP at once,
// the VIP is silent for under a second, and kube-vip is retired at the end.
func TestKubeVIPTakeOverReal(t *testing.T) {
	runTakeOverTest(t, ARP, "lckv", false)
}

// TestKubeVIPTakeOverRealBGP moves a cluster off a real BGP kube-vip (its elected leader
// announcing the VIP to the lab's FRR router) onto caplb's BGP members: caplb's first member
// announces beside kube-vip, the manager's fence makes kube-vip's leader withdraw, and no new
// connection fails through the overlap. CAPLB_KUBE_VIP_NO_ELECTION=1 runs the overlap without
// kube-vip's election (every kube-vip node announces until its Machine goes). make test leaves
// it to make bench-takeover, which runs both (BENCH_ONLY_TESTS in the Makefile).
func TestKubeVIPTakeOverRealBGP(t *testing.T) {
	runTakeOverTest(t, BGP, "lckvb", os.Getenv("CAPLB_KUBE_VIP_NO_ELECTION") == "1")
}

func runTakeOverTest(t *testing.T, backend Backend, name string, noElection bool) {
	skipUnlessReal(t)
	lab.SkipUnlessRoot(t)
	if backend == BGP {
		bgplab.SkipUnlessFRR(t)
	}
	g := NewWithT(t)
	dir, err := envtest.BinaryDir()
	g.Expect(err).NotTo(HaveOccurred())
	// CAPLB_KUBE_VIP_VERSION picks another release make testbin builds (envtest.KubeVIPNewVersion).
	version := envtest.KubeVIPOldVersion
	if v := os.Getenv("CAPLB_KUBE_VIP_VERSION"); v != "" {
		version = v
	}
	kv, err := envtest.KubeVIPBinary(dir, version)
	g.Expect(err).NotTo(HaveOccurred())
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	l, err := Start(ctx, Options{Backend: backend, Binaries: bins, Name: name, APIServer: Real,
		KubeVIP: KubeVIPOptions{Version: version, Binary: kv, NoElection: noElection}})
	g.Expect(err).NotTo(HaveOccurred())
	defer func() {
		if d := os.Getenv("CAPLB_LIFECYCLE_LOG_DIR"); d != "" {
			_ = l.SaveLogs(filepath.Join(d, name))
		}
		if t.Failed() {
			t.Log(l.LogTail(40))
		}
		if err := l.Close(); err != nil {
			t.Errorf("closing the lab: %v", err)
		}
	}()
	obs, s, err := RunTakeOverObserved(ctx, l, false, func(s string) { t.Logf("%s ==> %s", time.Now().UTC().Format("15:04:05.000"), s) })
	logObserved(t, obs)
	g.Expect(err).NotTo(HaveOccurred())
	// ARP: kube-vip drops the VIP without a drain: a connection to its node breaks when the
	// address leaves it (the client's segments reach a kernel that no longer has it, then
	// caplb's node, which resets them), and client-go resends no write. The writer writes one at
	// a time, so at most the one in flight then fails; nothing may fail before the fence or
	// after the hand-over. BGP: no new connection fails (TakeOverGoals, which make
	// bench-takeover judges by too).
	f := TakeOverGoals(obs, s)
	j, _ := json.Marshal(f)
	t.Logf("takeover: %s", j)
	g.Expect(f.Missed).To(BeEmpty(), "the takeover's goals")
}
