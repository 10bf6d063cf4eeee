//go:build linux

package lifecycle

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/caplb/caplb/e2e/lab"
	"github.com/caplb/caplb/e2e/lifecycle/observe"
)

// TestEndpointMoveReal moves a live kubeadm-made cluster from its ARP VIP (E1) to an external
// load balancer (E2, a static LoadBalancer naming the VIP's in spec.takeOverEndpointFrom) with
// client-go — a writer, an informer and a leader-elected loop — on both endpoints throughout:
// no write fails and no event is lost on either; cluster-info is re-signed by the real
// kube-controller-manager's bootstrap signer; a third control-plane Machine then joins through
// E2 with kubeadm's own discovery; deleting the old LoadBalancer stops E1 only. The manager is
// killed at the first writing step it stored, and a new one resumes the move.
func TestEndpointMoveReal(t *testing.T) {
	skipUnlessReal(t)
	lab.SkipUnlessRoot(t)
	g := NewWithT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	l, err := Start(ctx, Options{Backend: ARP, Binaries: bins, Name: "lcmove", APIServer: Real, EndpointMove: true})
	g.Expect(err).NotTo(HaveOccurred())
	defer func() {
		if d := os.Getenv("CAPLB_LIFECYCLE_LOG_DIR"); d != "" {
			_ = l.SaveLogs(filepath.Join(d, "lcmove"))
		}
		if t.Failed() {
			t.Log(l.LogTail(40))
		}
		if err := l.Close(); err != nil {
			t.Errorf("closing the lab: %v", err)
		}
	}()
	obs, s, err := RunEndpointMoveObserved(ctx, l, func(s string) { t.Logf("%s ==> %s", time.Now().UTC().Format("15:04:05.000"), s) })
	logObserved(t, obs)
	if s != nil && s.E2 != nil {
		t.Logf("client-go through E2: %+v", *s.E2)
	}
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(s.Steps).To(ContainElements("ClusterInfo", "KubeadmConfig", "KubeProxy", "KubeconfigSecret", "ReleaseOld",
		"ClusterEndpoint", "Publish"), "the move walked its steps")
	g.Expect(s.CrashedAt).NotTo(BeEmpty(), "the manager was killed in the middle of the move, and a new one finished it")
	var failed []observe.Sample
	for _, f := range obs.Failures {
		if !f.Interrupted {
			failed = append(failed, f)
		}
	}
	g.Expect(failed).To(BeEmpty(), "no request to E1 failed")
	g.Expect(obs.Result.HooksUnreleased).To(BeZero())
	g.Expect(obs.Clients).NotTo(BeNil(), "client-go ran through E1")
	g.Expect(s.E2).NotTo(BeNil(), "client-go ran through E2")
	e1, e2 := obs.Clients, s.E2
	g.Expect(e1.Writes).To(BeNumerically(">", 100), "the writer on E1 ran throughout")
	g.Expect(e2.Writes).To(BeNumerically(">", 100), "the writer on E2 ran throughout")
	g.Expect(e1.FailedWrites).To(BeZero(), "no write through E1 failed: %s", e1.FirstFailure)
	g.Expect(e2.FailedWrites).To(BeZero(), "no write through E2 failed: %s", e2.FirstFailure)
	g.Expect(e1.LostEvents).To(BeZero(), "the informer on E1 delivered every write")
	g.Expect(e2.LostEvents).To(BeZero(), "the informer on E2 delivered every write")
	g.Expect(e1.StoreMatches && e2.StoreMatches).To(BeTrue(), "both informers' stores end at their writer's last state")
	g.Expect(e1.LeaderLosses).To(BeZero(), "the leader-elected loop on E1 kept its Lease")
	g.Expect(e2.LeaderLosses).To(BeZero(), "the leader-elected loop on E2 kept its Lease")
}

// TestEndpointMoveRealMemberLeaves: a cluster whose endpoint is its first machine's address (a
// static LoadBalancer, onPublishedMemberLeave MoveEndpoint) loses that machine; caplb moves the
// Cluster to the next member's address before the machine is drained (its pre-drain hook holds
// while the Cluster names it), with client-go on the new address throughout; a new Machine then
// joins through it with kubeadm's discovery, and CAPI finds its Node through the moved
// kubeconfig Secret.
func TestEndpointMoveRealMemberLeaves(t *testing.T) {
	skipUnlessReal(t)
	lab.SkipUnlessRoot(t)
	g := NewWithT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	l, err := Start(ctx, Options{Backend: ARP, Binaries: bins, Name: "lcmmove", APIServer: Real, EndpointMove: true})
	g.Expect(err).NotTo(HaveOccurred())
	defer func() {
		if d := os.Getenv("CAPLB_LIFECYCLE_LOG_DIR"); d != "" {
			_ = l.SaveLogs(filepath.Join(d, "lcmmove"))
		}
		if t.Failed() {
			t.Log(l.LogTail(40))
		}
		if err := l.Close(); err != nil {
			t.Errorf("closing the lab: %v", err)
		}
	}()
	s := &MemberMoveScenario{Lab: l, Log: func(s string) { t.Logf("%s ==> %s", time.Now().UTC().Format("15:04:05.000"), s) }}
	err = s.Run(ctx)
	if s.E2 != nil {
		t.Logf("client-go through the new endpoint: %+v", *s.E2)
	}
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(s.Violations).To(BeEmpty(), "the leaving Machine's hook held while the Cluster named its address")
	g.Expect(s.Steps).To(ContainElements("ClusterInfo", "KubeadmConfig", "KubeProxy", "KubeconfigSecret", "ClusterEndpoint", "Done"))
	g.Expect(s.Steps).NotTo(ContainElement("ReleaseOld"), "a member move has no other LoadBalancer to release")
	g.Expect(s.Steps).NotTo(ContainElement("Publish"), "nor a publisher to flip")
	e2 := s.E2
	g.Expect(e2).NotTo(BeNil())
	g.Expect(e2.Writes).To(BeNumerically(">", 100), "the writer on the new endpoint ran throughout")
	g.Expect(e2.FailedWrites).To(BeZero(), "no write through the new endpoint failed: %s", e2.FirstFailure)
	g.Expect(e2.LostEvents).To(BeZero())
	g.Expect(e2.StoreMatches).To(BeTrue())
	g.Expect(e2.LeaderLosses).To(BeZero())
}
