//go:build linux

package lifecycle

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentv1 "github.com/caplb/caplb/api/agent/v1alpha1"
	lbv1 "github.com/caplb/caplb/api/v1alpha1"
	"github.com/caplb/caplb/e2e/harness"
)

// Recorder receives the scenario's steps and rollout rounds (for the timeline and figures);
// observe.Recorder is one.
type Recorder interface {
	Step(text string)
	ReplacementStart(round int)
	ReplacementEnd(round int)
	// Leaving and Back bracket a member's way out of the load balancer and back, so that a
	// second holder beside a leaving one counts as a hand-over, not a spurious claim.
	Leaving(machine string)
	Back(machine string)
}

// Report is what the scenario measured and checked.
type Report struct {
	// Replacements are the rollout's rounds: new Machine created → old Machine gone.
	Replacements []time.Duration
	// HookHolds are, per deleted Machine, deletion → caplb's pre-drain hook released.
	HookHolds []time.Duration
}

// Scenario drives a control plane's life in KubeadmControlPlane's order.
type Scenario struct {
	Lab      *Lab
	Recorder Recorder
	// Replicas (default 3) and Rounds (default Replicas) shape the rollout.
	Replicas, Rounds int
	// AfterBootstrap runs once the first Machine holds the VIP (the caller starts its client
	// there: before, there is nothing to reach).
	AfterBootstrap func() error

	lbName  string
	seq     int
	members []string
	// noAgent names Machines that run no caplb agent (kube-vip's, before a takeover): their
	// release is judged by the VIP's holders alone.
	noAgent map[string]bool
	// unchecked names Machines whose release is not checked at all (the takeover's control).
	unchecked map[string]bool
}

// The scenario's deadlines: generous for a loaded 2-core machine; the figures come from the
// timeline, not from these.
const (
	endpointTimeout = 60 * time.Second
	activeTimeout   = 120 * time.Second
	goneTimeout     = 120 * time.Second
	moveTimeout     = 30 * time.Second
)

func (s *Scenario) leaving(machine string) {
	if s.Recorder != nil {
		s.Recorder.Leaving(machine)
	}
}

func (s *Scenario) back(machine string) {
	if s.Recorder != nil {
		s.Recorder.Back(machine)
	}
}

func (s *Scenario) step(format string, args ...any) {
	if s.Recorder != nil {
		s.Recorder.Step(fmt.Sprintf(format, args...))
	}
}

// Run runs the whole life: endpoint before any Machine, the first Machine alone, scale up,
// a rolling replacement of every Machine, a member disabled and enabled by annotation, a
// member's health failed and restored; then the LoadBalancer deleted and the agents' static
// pods removed, checking that nothing is left behind.
func (s *Scenario) Run(ctx context.Context) (Report, error) {
	var rep Report
	if err := s.bootstrap(ctx); err != nil {
		return rep, err
	}

	for round := 1; round <= s.Rounds; round++ {
		start := time.Now()
		if s.Recorder != nil {
			s.Recorder.ReplacementStart(round)
		}
		s.step("rollout %d/%d: create a new Machine", round, s.Rounds)
		if _, err := s.addMachine(ctx); err != nil {
			return rep, err
		}
		oldest := s.members[0]
		s.step("rollout %d/%d: delete %s (oldest)", round, s.Rounds, oldest)
		hold, err := s.deleteMachine(ctx, oldest)
		if err != nil {
			return rep, err
		}
		rep.HookHolds = append(rep.HookHolds, hold)
		rep.Replacements = append(rep.Replacements, time.Since(start))
		if s.Recorder != nil {
			s.Recorder.ReplacementEnd(round)
		}
		s.step("rollout %d/%d: %s gone after %.1fs (hook held %.1fs)", round, s.Rounds, oldest, time.Since(start).Seconds(), hold.Seconds())
	}

	if err := s.disableAndEnable(ctx); err != nil {
		return rep, err
	}
	if err := s.failHealth(ctx); err != nil {
		return rep, err
	}
	return rep, nil
}

// bootstrap brings the control plane up: the Cluster and its LoadBalancer, the endpoint before
// any Machine, the first Machine alone (AfterBootstrap), then Replicas Machines.
func (s *Scenario) bootstrap(ctx context.Context) error {
	if s.Replicas == 0 {
		s.Replicas = 3
	}
	if s.Rounds == 0 {
		s.Rounds = s.Replicas
	}
	l := s.Lab
	s.step("create the Cluster and its LoadBalancer (%s VIP from an IPAM pool)", l.opts.Backend)
	lb, err := l.CreateCluster(ctx)
	if err != nil {
		return err
	}
	s.lbName = lb.Name
	vip, err := l.WaitEndpoint(ctx, endpointTimeout)
	if err != nil {
		return err
	}
	if ms, err := l.Machines(ctx); err != nil || len(ms) != 0 {
		return fmt.Errorf("the endpoint must be published before any Machine exists (machines: %d, %v)", len(ms), err)
	}
	s.step("endpoint %s:6443 published before any Machine", vip)

	first, err := s.addMachine(ctx)
	if err != nil {
		return err
	}
	if err := s.waitHolders(ctx, "the first Machine holds the VIP alone", func(h []string) bool {
		return slices.Equal(h, []string{first})
	}); err != nil {
		return err
	}
	if s.AfterBootstrap != nil {
		if err := s.AfterBootstrap(); err != nil {
			return err
		}
	}
	for len(s.members) < s.Replicas {
		if _, err := s.addMachine(ctx); err != nil {
			return err
		}
	}
	s.step("control plane at %d Machines", s.Replicas)
	return nil
}

// addMachine creates the next Machine and waits until it is an active member.
func (s *Scenario) addMachine(ctx context.Context) (string, error) {
	s.seq++
	name := fmt.Sprintf("%s-cp-%d", s.Lab.ClusterName, s.seq)
	if _, err := s.Lab.CreateMachine(ctx, name); err != nil {
		return "", err
	}
	s.step("Machine %s created", name)
	if err := s.waitTarget(ctx, name, lbv1.TargetActive, activeTimeout); err != nil {
		return "", err
	}
	s.members = append(s.members, name)
	s.step("%s is an active member", name)
	return name, nil
}

// deleteMachine deletes a Machine as KubeadmControlPlane does in a rollout and waits until it is
// gone. It checks that caplb's pre-drain hook held the deletion until the member was out of the
// data plane, and returns how long the hook held.
func (s *Scenario) deleteMachine(ctx context.Context, name string) (time.Duration, error) {
	l := s.Lab
	hook := lbv1.PreDrainHookAnnotation(s.lbName)
	m := &clusterv1.Machine{}
	if err := l.Mgmt.Client.Get(ctx, client.ObjectKey{Namespace: l.Namespace, Name: name}, m); err != nil {
		return 0, err
	}
	if _, ok := m.Annotations[hook]; !ok {
		return 0, fmt.Errorf("machine %s has no caplb pre-drain hook before its deletion", name)
	}
	s.leaving(name)
	if err := l.Mgmt.Client.Delete(ctx, m); err != nil {
		return 0, err
	}
	deleted := time.Now()
	var released time.Time
	err := harness.Poll(ctx, goneTimeout, "machine "+name+" gone", func(ctx context.Context) (bool, string, error) {
		cur := &clusterv1.Machine{}
		err := l.Mgmt.Client.Get(ctx, client.ObjectKeyFromObject(m), cur)
		if client.IgnoreNotFound(err) != nil {
			return false, "", err
		}
		gone := err != nil
		if _, held := cur.Annotations[hook]; released.IsZero() && (gone || !held) {
			released = time.Now()
			if err := s.checkOut(ctx, name); err != nil {
				return false, "", fmt.Errorf("pre-drain hook released too early: %w", err)
			}
		}
		return gone, fmt.Sprintf("deleting: %v", cur.Status.Deletion != nil), nil
	})
	if err != nil {
		return 0, err
	}
	s.members = slices.DeleteFunc(s.members, func(x string) bool { return x == name })
	return released.Sub(deleted), nil
}

// checkOut verifies that the member left the data plane: its agent's report says so and, for
// ARP, its kernel no longer holds the VIP (BGP: the router no longer routes to it).
func (s *Scenario) checkOut(ctx context.Context, name string) error {
	if s.unchecked[name] {
		return nil
	}
	l := s.Lab
	h, err := l.Holders()
	if err != nil {
		return err
	}
	if slices.Contains(h, name) {
		return fmt.Errorf("%s still serves the VIP (holders %v)", name, h)
	}
	if s.noAgent[name] {
		return nil
	}
	n := &corev1.Node{}
	if err := l.WorkloadClient.Get(ctx, client.ObjectKey{Name: name}, n); err != nil {
		return client.IgnoreNotFound(err)
	}
	st, err := agentv1.ParseAgentStatus(n.Annotations[agentv1.AgentStatusAnnotation])
	if err != nil {
		return fmt.Errorf("%s: agent report: %w", name, err)
	}
	if st.InDataPlane || st.Holding {
		return fmt.Errorf("%s: agent reports in data plane %v, holding %v", name, st.InDataPlane, st.Holding)
	}
	return nil
}

// disableAndEnable takes the member that serves the VIP out with the disabled annotation on its
// Machine and brings it back.
func (s *Scenario) disableAndEnable(ctx context.Context) error {
	l := s.Lab
	h, err := l.Holders()
	if err != nil || len(h) == 0 {
		return fmt.Errorf("no VIP holder before disabling (%v)", err)
	}
	name := h[0]
	m := &clusterv1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: l.Namespace, Name: name}}
	reason := "maintenance"
	s.step("annotate Machine %s %s=%s", name, lbv1.DisabledAnnotation, reason)
	s.leaving(name)
	if err := l.Mgmt.Annotate(ctx, m, lbv1.DisabledAnnotation, &reason); err != nil {
		return err
	}
	if err := s.waitTarget(ctx, name, lbv1.TargetDisabled, activeTimeout); err != nil {
		return err
	}
	if err := s.waitHolders(ctx, name+" no longer serves the VIP", func(h []string) bool {
		return len(h) > 0 && !slices.Contains(h, name)
	}); err != nil {
		return err
	}
	s.step("%s disabled: the VIP moved off it", name)
	if err := l.Mgmt.Annotate(ctx, m, lbv1.DisabledAnnotation, nil); err != nil {
		return err
	}
	if err := s.waitTarget(ctx, name, lbv1.TargetActive, activeTimeout); err != nil {
		return err
	}
	s.back(name)
	s.step("%s enabled again", name)
	return s.checkNoQuiesce(ctx)
}

// failHealth fails the API server health of the member serving the VIP and restores it.
func (s *Scenario) failHealth(ctx context.Context) error {
	l := s.Lab
	h, err := l.Holders()
	if err != nil || len(h) == 0 {
		return fmt.Errorf("no VIP holder before failing health (%v)", err)
	}
	n := l.Node(h[0])
	s.step("fail %s's API server health (/readyz 500)", n.Name)
	s.leaving(n.Name)
	if err := n.SetHealthy(false); err != nil {
		return err
	}
	if err := s.waitHolders(ctx, n.Name+" no longer serves the VIP", func(h []string) bool {
		return len(h) > 0 && !slices.Contains(h, n.Name)
	}); err != nil {
		return err
	}
	s.step("%s unhealthy: the VIP moved off it", n.Name)
	if err := n.SetHealthy(true); err != nil {
		return err
	}
	if err := s.waitTarget(ctx, n.Name, lbv1.TargetActive, activeTimeout); err != nil {
		return err
	}
	s.back(n.Name)
	s.step("%s healthy again", n.Name)
	return nil
}

// checkNoQuiesce verifies that no Node carries a quiesce request any more.
func (s *Scenario) checkNoQuiesce(ctx context.Context) error {
	return harness.Poll(ctx, moveTimeout, "no quiesce annotation left on Nodes", func(ctx context.Context) (bool, string, error) {
		nodes := &corev1.NodeList{}
		if err := s.Lab.WorkloadClient.List(ctx, nodes); err != nil {
			return false, "", err
		}
		var left []string
		for _, n := range nodes.Items {
			if _, ok := n.Annotations[agentv1.QuiesceAnnotation]; ok {
				left = append(left, n.Name)
			}
		}
		return len(left) == 0, strings.Join(left, ","), nil
	})
}

func (s *Scenario) waitTarget(ctx context.Context, name string, want lbv1.TargetState, timeout time.Duration) error {
	return harness.Poll(ctx, timeout, fmt.Sprintf("%s %s", name, want), func(ctx context.Context) (bool, string, error) {
		if err := s.Lab.manager.alive(); err != nil {
			return false, "", err
		}
		lb, err := s.Lab.LB(ctx, s.lbName)
		if err != nil {
			return false, "", err
		}
		return harness.TargetState(lb, name) == want, harness.DescribeLB(lb), nil
	})
}

func (s *Scenario) waitHolders(ctx context.Context, what string, ok func([]string) bool) error {
	var last []string
	return harness.Poll(ctx, activeTimeout, what, func(ctx context.Context) (bool, string, error) {
		h, err := s.Lab.Holders()
		if err != nil {
			return false, "", err
		}
		last = h
		return ok(h), fmt.Sprintf("holders %v", last), nil
	})
}
