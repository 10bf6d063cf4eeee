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
	"github.com/caplb/caplb/e2e/lifecycle/observe/clients"
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
	// The steps are sampled every 100 ms (one may pass unseen); what each wrote is checked
	// from the clusters themselves (checkRewritten).
	g.Expect(s.Steps).To(ContainElement("Done"), "the move finished")
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
	// How long the move and the join take varies (2 s to a minute): the writer on E2 is judged
	// by when it wrote, not by how often.
	g.Expect(e2.Writes).To(BeNumerically(">", 0), "the writer on E2 wrote")
	g.Expect(e2.FirstWriteAt).To(BeTemporally("<", s.MoveStarted), "the writer on E2 wrote before the move began")
	g.Expect(e2.LastWriteAt).To(BeTemporally(">", s.JoinedAt), "the writer on E2 still wrote after the third Machine joined")
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
// kubeconfig Secret. Then member address → VIP: the VIP LoadBalancer beside it (an additional
// endpoint until then) takes the endpoint over, with client-go on both.
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
	if s.VIPClients != nil {
		t.Logf("client-go through the VIP: %+v", *s.VIPClients)
	}
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(s.Violations).To(BeEmpty(), "the leaving Machine's hook held while the Cluster named its address")
	g.Expect(s.Steps).To(ContainElement("Done"), "the member move finished (what it wrote is checked from the clusters)")
	g.Expect(s.Steps).NotTo(ContainElement("ReleaseOld"), "a member move has no other LoadBalancer to release")
	g.Expect(s.Steps).NotTo(ContainElement("Publish"), "nor a publisher to flip")
	g.Expect(s.VIPSteps).To(ContainElement("Done"), "then member address → VIP, a takeover")
	for name, c := range map[string]*clients.Result{"the new member's address": s.E2, "the VIP": s.VIPClients} {
		g.Expect(c).NotTo(BeNil(), "client-go on %s", name)
		g.Expect(c.Writes).To(BeNumerically(">", 50), "the writer on %s ran throughout", name)
		g.Expect(c.FailedWrites).To(BeZero(), "no write through %s failed: %s", name, c.FirstFailure)
		g.Expect(c.LostEvents).To(BeZero(), "no event lost on %s", name)
		g.Expect(c.StoreMatches).To(BeTrue(), "the informer's store on %s ends at the writer's last state", name)
		g.Expect(c.LeaderLosses).To(BeZero(), "no leader loss on %s", name)
	}
}
