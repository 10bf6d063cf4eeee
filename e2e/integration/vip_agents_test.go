package integration

import (
	"context"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentv1 "github.com/caplb/caplb/api/agent/v1alpha1"
)

// fakeAgents plays the node agents of one workload cluster the way the real agent reports
// (api/agent/v1alpha1 AgentStatus on its own Node): it reads the membership and quiesce
// annotations the manager writes on each Node and writes its report back. The first member of
// the membership that is not quiesced holds the VIP; before any membership, the first node to
// report holds it alone (bootstrap). A paused agent writes nothing (a node whose agent is slow or
// stuck); its last report stays.
type fakeAgents struct {
	c      client.Client
	mu     sync.Mutex
	nodes  []string
	paused map[string]bool
}

func newFakeAgents(ctx context.Context, c client.Client) *fakeAgents {
	a := &fakeAgents{c: c, paused: map[string]bool{}}
	go func() {
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				a.step(ctx)
			}
		}
	}()
	return a
}

// run starts an agent on node (paused when told).
func (a *fakeAgents) run(node string, paused bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.nodes = append(a.nodes, node)
	a.paused[node] = paused
}

func (a *fakeAgents) pause(node string, p bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.paused[node] = p
}

func (a *fakeAgents) step(ctx context.Context) {
	a.mu.Lock()
	nodes := append([]string(nil), a.nodes...)
	paused := map[string]bool{}
	for k, v := range a.paused {
		paused[k] = v
	}
	a.mu.Unlock()

	type seen struct {
		node      *corev1.Node
		m         agentv1.Membership
		hasM      bool
		quiesce   bool
		prevReply agentv1.AgentStatus
	}
	all := map[string]*seen{}
	newest := agentv1.Membership{Version: -1}
	for _, n := range nodes {
		node := &corev1.Node{}
		if err := a.c.Get(ctx, client.ObjectKey{Name: n}, node); err != nil {
			continue
		}
		s := &seen{node: node}
		if v := node.Annotations[agentv1.MembershipAnnotation]; v != "" {
			if m, err := agentv1.ParseMembership(v); err == nil {
				s.m, s.hasM = m, true
			}
		}
		_, s.quiesce = node.Annotations[agentv1.QuiesceAnnotation]
		if v := node.Annotations[agentv1.AgentStatusAnnotation]; v != "" {
			s.prevReply, _ = agentv1.ParseAgentStatus(v)
		}
		all[n] = s
		if !paused[n] && s.hasM && s.m.Version > newest.Version {
			newest = s.m
		}
	}
	// Who holds: the first running, unquiesced member of the newest membership; without one,
	// the first running node (bootstrap).
	holder := ""
	if newest.Version >= 1 {
		for _, m := range newest.Members {
			if s := all[m.Name]; s != nil && !paused[m.Name] && !s.quiesce {
				holder = m.Name
				break
			}
		}
	} else {
		for _, n := range nodes {
			if all[n] != nil && !paused[n] {
				holder = n
				break
			}
		}
	}
	for _, n := range nodes {
		s := all[n]
		if s == nil || paused[n] {
			continue
		}
		// Agents converge by gossip: each runs the newest version any running agent knows.
		m := newest
		if m.Version < 0 {
			m = agentv1.Membership{}
		}
		member := m.Has(n)
		st := agentv1.AgentStatus{
			MembershipVersion: m.Version,
			Member:            member,
			Eligible:          !s.quiesce,
			InDataPlane:       member && !s.quiesce,
			Holding:           n == holder,
			Quiesced:          s.quiesce && n != holder,
			Reason:            "fake agent",
		}
		p := s.prevReply
		if p.MembershipVersion == st.MembershipVersion && p.Member == st.Member && p.Eligible == st.Eligible &&
			p.InDataPlane == st.InDataPlane && p.Holding == st.Holding && p.Quiesced == st.Quiesced &&
			time.Since(p.UpdatedAt.Time) < 2*time.Second {
			continue
		}
		st.UpdatedAt = metav1.NewMicroTime(time.Now())
		orig := s.node.DeepCopy()
		if s.node.Annotations == nil {
			s.node.Annotations = map[string]string{}
		}
		s.node.Annotations[agentv1.AgentStatusAnnotation] = st.String()
		_ = a.c.Patch(ctx, s.node, client.MergeFrom(orig))
	}
}
