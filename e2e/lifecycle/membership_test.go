//go:build linux

package lifecycle

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentv1 "github.com/caplb/caplb/api/agent/v1alpha1"
	"github.com/caplb/caplb/e2e/lab"
	"github.com/caplb/caplb/e2e/lifecycle/observe"
	"github.com/caplb/caplb/modes/agent"
)

// TestRenderedSecretMembership runs agents configured only from the Secret caplb rendered
// (machines booted by the lab's provider, as in the lifecycle) through the cases the membership
// design must survive beyond a rollout: a workload Node annotated disabled by hand (the
// standalone path: no Machine annotation, the agent reads its own Node), and a member whose agent
// is down while the membership changes twice, which comes back with its older view and must
// converge from its peers without ever claiming the VIP.
func TestRenderedSecretMembership(t *testing.T) {
	lab.SkipUnlessRoot(t)
	g := NewWithT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	l, err := Start(ctx, Options{Backend: ARP, Binaries: bins, Name: "lcmship"})
	g.Expect(err).NotTo(HaveOccurred())
	defer func() {
		if t.Failed() {
			t.Log(l.LogTail(40))
		}
		g.Expect(l.Close()).To(Succeed())
	}()
	s := &Scenario{Lab: l}
	lb, err := l.CreateCluster(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	s.lbName = lb.Name
	_, err = l.WaitEndpoint(ctx, endpointTimeout)
	g.Expect(err).NotTo(HaveOccurred())
	for range 3 {
		_, err := s.addMachine(ctx)
		g.Expect(err).NotTo(HaveOccurred())
	}
	rec := observe.NewRecorder()
	sctx, stop := context.WithCancel(ctx)
	defer stop()
	go rec.SampleHolders(sctx, 10*time.Millisecond, l.Holders)

	// A Node annotated disabled by hand: its agent reads it, hands over, reports quiesced.
	h, err := l.Holders()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(h).To(HaveLen(1))
	owner := h[0]
	annotateNode(ctx, g, l, owner, `"maintenance"`)
	g.Expect(s.waitHolders(ctx, owner+" hands the VIP over", func(h []string) bool {
		return len(h) == 1 && h[0] != owner
	})).To(Succeed())
	g.Eventually(func(g Gomega) {
		st := nodeReport(ctx, g, l, owner)
		g.Expect(st.Quiesced).To(BeTrue())
		g.Expect(st.Reason).To(ContainSubstring("maintenance"))
	}, moveTimeout, 200*time.Millisecond).Should(Succeed(), "the disabled Node's agent reports quiesced")
	annotateNode(ctx, g, l, owner, "null")
	g.Eventually(func(g Gomega) { g.Expect(nodeReport(ctx, g, l, owner).Eligible).To(BeTrue()) },
		moveTimeout, 200*time.Millisecond).Should(Succeed())

	// A stale member: a non-owner's agent is down while one Machine is added and another removed.
	h, err = l.Holders()
	g.Expect(err).NotTo(HaveOccurred())
	var stale *Node
	for _, m := range s.members {
		if !slices.Contains(h, m) && m != s.members[0] {
			stale = l.Node(m)
			break
		}
	}
	g.Expect(stale).NotTo(BeNil())
	before := agentStatus(ctx, g, stale)
	stoppedAt := time.Now()
	g.Expect(stale.kubelet.Stop(10 * time.Second)).To(Succeed())
	_, err = s.addMachine(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	_, err = s.deleteMachine(ctx, s.members[0])
	g.Expect(err).NotTo(HaveOccurred())
	newest := nodeReport(ctx, g, l, s.members[len(s.members)-1]).MembershipVersion
	g.Expect(newest).To(BeNumerically(">=", before.MembershipVersion+2), "two versions went by while the member was down")

	g.Expect(stale.startAgent()).To(Succeed())
	g.Eventually(func(g Gomega) {
		st := agentStatus(ctx, g, stale)
		g.Expect(st.MembershipVersion).To(Equal(newest), "the stale member converges")
		g.Expect(st.MembersSeen).To(Equal(3))
	}, activeTimeout, 200*time.Millisecond).Should(Succeed())
	g.Expect(agentStatus(ctx, g, stale).Transitions).To(BeZero(), "the stale member never held the VIP")

	stop()
	rec.Stop()
	for _, hs := range rec.Timeline().Holders {
		if hs.At.Before(stoppedAt) {
			continue
		}
		g.Expect(slices.Contains(hs.Holders, stale.Name)).To(BeFalse(), "%s held the VIP at %s", stale.Name, hs.At)
		if hs.Err == "" {
			g.Expect(hs.Holders).NotTo(BeEmpty(), "nobody held the VIP at %s", hs.At)
		}
	}
}

func annotateNode(ctx context.Context, g Gomega, l *Lab, name, value string) {
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%s}}}`, agentv1.DisabledAnnotation, value)
	g.Expect(l.WorkloadClient.Patch(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}},
		client.RawPatch(types.MergePatchType, []byte(patch)))).To(Succeed())
}

func nodeReport(ctx context.Context, g Gomega, l *Lab, name string) agentv1.AgentStatus {
	n := &corev1.Node{}
	g.Expect(l.WorkloadClient.Get(ctx, client.ObjectKey{Name: name}, n)).To(Succeed())
	st, err := agentv1.ParseAgentStatus(n.Annotations[agentv1.AgentStatusAnnotation])
	g.Expect(err).NotTo(HaveOccurred())
	return st
}

// agentStatus reads the agent's /status on its machine's loopback admin listener.
func agentStatus(ctx context.Context, g Gomega, n *Node) agent.Status {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://127.0.0.1:7473/status", nil)
	g.Expect(err).NotTo(HaveOccurred())
	resp, err := n.NS.HTTPClient(2 * time.Second).Do(req)
	g.Expect(err).NotTo(HaveOccurred())
	defer resp.Body.Close()
	var st agent.Status
	g.Expect(json.NewDecoder(resp.Body).Decode(&st)).To(Succeed())
	return st
}
