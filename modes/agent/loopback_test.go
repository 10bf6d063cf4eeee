package agent

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-logr/logr"
	. "github.com/onsi/gomega"

	agentv1 "github.com/caplb/caplb/api/agent/v1alpha1"
	"github.com/caplb/caplb/modes/election"
)

// loopAgent is a real agent (real memberlist on 127.0.0.i, fake data plane
// and health) in this process.
type loopAgent struct {
	a      *Agent
	dp     *fakeDP
	store  *memberStore
	health *fakeHealth
}

func startLoopAgent(t *testing.T, port, i int, doc agentv1.Membership, stateFile string, healthy bool) *loopAgent {
	t.Helper()
	name := fmt.Sprintf("n%d", i)
	cfg, err := agentv1.Parse([]byte(fmt.Sprintf(`
apiVersion: agent.loadbalancer.cluster.x-k8s.io/v1alpha1
kind: AgentConfiguration
nodeName: %s
vips: ["192.0.2.10"]
members: []
membership: {dynamic: true, stateFile: %q}
health: {insecureSkipVerify: true}
election: {insecure: true, port: %d, bindAddress: 127.0.0.%d, settle: 200ms}
`, name, stateFile, port, i)))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Membership.Version, cfg.Members = doc.Version, doc.Members
	store, err := newMemberStore(cfg, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	ecfg, err := electionConfig(cfg, store.roster())
	if err != nil {
		t.Fatal(err)
	}
	ecfg.OnMembership = func(r election.Roster) { store.offer(r.Document(), "gossip") }
	ml, err := election.Start(ecfg, election.Meta{}, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	store.mu.Lock()
	store.run = func(r election.Roster) { ml.SetRoster(r) }
	store.mu.Unlock()
	ml.SetRoster(store.roster())
	m, _ := newMetrics(nil)
	dp := &fakeDP{}
	h := &fakeHealth{}
	h.set(healthy)
	a := newAgent(cfg, logr.Discard(), agentParts{dp: dp, ml: ml, health: h, m: m, store: store})
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx, context.Background()) }()
	t.Cleanup(func() { stop(); <-done })
	return &loopAgent{a: a, dp: dp, store: store, health: h}
}

func (l *loopAgent) holding() bool { l.dp.mu.Lock(); defer l.dp.mu.Unlock(); return l.dp.announce }

func members(idx ...int) []agentv1.MemberConfig {
	var out []agentv1.MemberConfig
	for _, i := range idx {
		out = append(out, agentv1.MemberConfig{Name: fmt.Sprintf("n%d", i), Address: fmt.Sprintf("127.0.0.%d", i)})
	}
	return out
}

// TestStaleAndNonMemberNeverClaim runs three real agents on loopback. n1 is
// the most preferred member of version 1; n2 and n3 run version 2, which
// removed n1. n1 learns version 2 by gossip. If it cannot keep it (its state
// file cannot be written) it knows of a newer version it does not run: it
// never claims. If it can, it runs version 2 and is not a member: it never
// claims either. n2, the most preferred member of version 2, holds the VIP.
func TestStaleAndNonMemberNeverClaim(t *testing.T) {
	for _, tc := range []struct {
		name       string
		canPersist bool
		n1Version  int64
	}{
		{"stale: knows a newer version it cannot run", false, 1},
		{"non-member: runs the version without itself", true, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			port := freeLoopbackPort(t, 3)
			dir := t.TempDir()
			v1 := agentv1.Membership{Version: 1, Members: members(1, 2, 3)}
			v2 := agentv1.Membership{Version: 2, Members: members(2, 3)}
			n1 := startLoopAgent(t, port, 1, v1, filepath.Join(dir, "n1.json"), true)
			if !tc.canPersist {
				// A regular file where the state file's directory should be:
				// every write fails (root ignores permissions).
				blocker := filepath.Join(dir, "blocker")
				g.Expect(os.WriteFile(blocker, nil, 0o600)).To(Succeed())
				n1.store.mu.Lock()
				n1.store.path = filepath.Join(blocker, "n1.json")
				n1.store.mu.Unlock()
			}
			// n2 and n3 are not eligible yet: by version 1 alone, n1 (most
			// preferred, healthy, 3 of 3 alive) would claim.
			n2 := startLoopAgent(t, port, 2, v2, filepath.Join(dir, "n2.json"), false)
			n3 := startLoopAgent(t, port, 3, v2, filepath.Join(dir, "n3.json"), false)
			g.Eventually(func() int64 { return n1.a.Status().NewestVersion }, 10*time.Second, 20*time.Millisecond).Should(Equal(int64(2)))
			g.Consistently(n1.holding, 2*time.Second, 20*time.Millisecond).Should(BeFalse(), "n1 never claims")
			s := n1.a.Status()
			g.Expect(s.MembershipVersion).To(Equal(tc.n1Version))
			g.Expect(s.Report.Holding).To(BeFalse())
			if tc.canPersist {
				g.Expect(s.Report.Member).To(BeFalse())
				g.Expect(s.Decision + s.Waiting).To(ContainSubstring("not eligible: not a member of membership version 2"))
			} else {
				g.Expect(s.Report.Member).To(BeTrue(), "still a member of the version it runs")
				g.Expect(s.Waiting).To(ContainSubstring("claim withheld: a peer runs membership version 2, this node 1"))
			}
			n2.health.set(true)
			n3.health.set(true)
			g.Eventually(n2.holding, 10*time.Second, 20*time.Millisecond).Should(BeTrue(), "n2 owns version 2")
			g.Consistently(func() bool { return n1.holding() || n3.holding() }, time.Second, 20*time.Millisecond).Should(BeFalse())
		})
	}
}

// freeLoopbackPort finds a port free for UDP and TCP on 127.0.0.1-n.
func freeLoopbackPort(t *testing.T, n int) int {
	t.Helper()
	for try := 0; try < 20; try++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		_ = l.Close()
		ok := true
		for i := 1; i <= n && ok; i++ {
			u, err := net.ListenPacket("udp", fmt.Sprintf("127.0.0.%d:%d", i, port))
			if err != nil {
				ok = false
				break
			}
			_ = u.Close()
		}
		if ok {
			return port
		}
	}
	t.Fatal("no free port")
	return 0
}
