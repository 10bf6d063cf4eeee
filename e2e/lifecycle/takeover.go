//go:build linux

package lifecycle

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"
	"time"

	coordv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lbv1 "github.com/caplb/caplb/api/v1alpha1"
	"github.com/caplb/caplb/e2e/harness"
)

// TakeOverScenario is a kube-vip cluster's move onto caplb, as a platform team runs it: a
// control plane of Replicas Machines serving kube-vip's VIP, the clients on that VIP, then the
// LoadBalancer that takes it over and a rolling replacement whose new Machines boot with caplb's
// files (KubeadmControlPlane's files swapped, as CAPV's migration does) — the manager's fence
// moves kube-vip's Lease, the first caplb member claims only once the VIP is silent, caplb's
// hook holds each kube-vip Machine until a caplb member holds the VIP — and kube-vip retired.
// Under BGP (a BGP lab) caplb's members announce beside kube-vip: a kube-vip that elects is
// fenced once the first is active (its leader withdraws), one that does not withdraws node by
// node as its Machines go (overlap).
type TakeOverScenario struct {
	Lab      *Lab
	Recorder Recorder
	// Replicas is the control plane's size (default 3).
	Replicas int
	// AfterBootstrap runs once kube-vip on the first Machine holds the VIP.
	AfterBootstrap func() error
	// Unguarded runs the control: the LoadBalancer without takeOver (no fence, no standby, no
	// hold), the swap as CAPV's migration describes it. It checks nothing of the hand-over and
	// ends when the last kube-vip Machine is gone.
	Unguarded bool
	// RollBack (BGP with kube-vip's election): once caplb's first member announces alone, takeOver
	// is removed — the manager deletes the fence and kube-vip elects a leader that announces
	// again — and then set again, and the takeover goes on.
	RollBack bool

	// KubeVIPMachines are the Machines that ran kube-vip; CaplbMachines the ones that replaced
	// them; HandOver is when caplb first held the VIP alone (zero if never).
	KubeVIPMachines, CaplbMachines []string
	HandOver                       time.Time
	// Fenced is when the scenario saw the manager's fence (KubeVIPTakeOver Fenced).
	Fenced time.Time
	// Started is when the takeover began (the LoadBalancer created): before it, kube-vip alone
	// served the VIP.
	Started time.Time

	seq  int
	life Scenario
}

// overlap: kube-vip announces by BGP from every node (no election): caplb's members announce
// beside it, nothing is fenced, and each kube-vip node withdraws as its Machine goes.
func (s *TakeOverScenario) overlap() bool {
	return s.Lab.opts.Backend == BGP && s.Lab.opts.KubeVIP.NoElection
}

// takeOverTimeout bounds the hand-over once the fence is written: kube-vip's leader steps down
// after its renew deadline (10 s), then caplb claims once the VIP is silent.
const takeOverTimeout = 90 * time.Second

// Run runs the takeover.
func (s *TakeOverScenario) Run(ctx context.Context) (Report, error) {
	var rep Report
	if s.Replicas == 0 {
		s.Replicas = 3
	}
	l := s.Lab
	s.life = Scenario{Lab: l, Recorder: s.Recorder, noAgent: map[string]bool{}, unchecked: map[string]bool{}}
	s.life.step("create the Cluster with kube-vip's VIP as its endpoint (kube-vip %s as a static pod)", l.opts.KubeVIP.Version)
	vip, err := l.CreateKubeVIPCluster(ctx)
	if err != nil {
		return rep, err
	}
	for len(s.KubeVIPMachines) < s.Replicas {
		name, err := s.addKubeVIPMachine(ctx)
		if err != nil {
			return rep, err
		}
		if len(s.KubeVIPMachines) == 1 {
			if err := s.life.waitHolders(ctx, "kube-vip on "+name+" holds "+vip.String(), func(h []string) bool {
				return slices.Equal(h, []string{name})
			}); err != nil {
				return rep, err
			}
			if err := s.waitReachable(ctx); err != nil {
				return rep, err
			}
			if s.AfterBootstrap != nil {
				if err := s.AfterBootstrap(); err != nil {
					return rep, err
				}
			}
		}
	}
	s.life.step("control plane at %d Machines running kube-vip", s.Replicas)

	if s.Unguarded {
		s.life.step("create a LoadBalancer for %s WITHOUT takeOver (the control: nothing orders kube-vip and caplb)", vip)
	} else {
		s.life.step("create the LoadBalancer that takes %s over from kube-vip", vip)
	}
	// The guarded takeover first names another Lease than kube-vip's: the manager must refuse
	// on kube-vip's real mirror Pods, fence nothing, and proceed once the spec is corrected.
	// (A kube-vip that does not elect has no Lease to name: nothing to refuse.)
	wrongLease := ""
	if !s.Unguarded && !s.overlap() {
		wrongLease = "kube-vip-cp"
	}
	s.Started = time.Now()
	lb, err := l.CreateTakeOverLB(ctx, s.Unguarded, wrongLease)
	if err != nil {
		return rep, err
	}
	s.life.lbName = lb.Name
	if wrongLease != "" {
		if err := s.refusedThenCorrected(ctx); err != nil {
			return rep, err
		}
	} else if !s.Unguarded {
		if err := s.waitCondition(ctx, lbv1.KubeVIPTakeOverReadyCondition, lbv1.KubeVIPTakeOverReadyReason, endpointTimeout); err != nil {
			return rep, err
		}
		s.life.step("KubeVIPTakeOverReady: the manager read kube-vip's mirror Pods and allows the hand-over")
	}

	for round := 1; round <= s.Replicas; round++ {
		start := time.Now()
		if s.Recorder != nil {
			s.Recorder.ReplacementStart(round)
		}
		s.life.step("rollout %d/%d: create a Machine with caplb's files", round, s.Replicas)
		name, err := s.life.addMachine(ctx)
		if err != nil {
			return rep, err
		}
		s.CaplbMachines = append(s.CaplbMachines, name)
		if round == 1 && !s.Unguarded && !s.overlap() {
			if err := s.waitHandOver(ctx, name); err != nil {
				return rep, err
			}
			if s.RollBack {
				if err := s.rollBackAndAgain(ctx, name); err != nil {
					return rep, err
				}
			}
		}
		if round == 1 && s.overlap() {
			if err := s.waitCondition(ctx, lbv1.KubeVIPTakeOverCondition, lbv1.KubeVIPOverlappingReason, takeOverTimeout); err != nil {
				return rep, err
			}
			if err := s.life.waitHolders(ctx, name+" announces beside kube-vip", func(h []string) bool {
				return slices.Contains(h, name) && len(h) > 1
			}); err != nil {
				return rep, err
			}
			s.life.step("KubeVIPTakeOver Overlapping: %s (caplb) announces the VIP beside kube-vip's nodes", name)
		}
		oldest := s.KubeVIPMachines[round-1]
		s.life.step("rollout %d/%d: delete %s (kube-vip)", round, s.Replicas, oldest)
		hold, err := s.life.deleteMachine(ctx, oldest)
		if err != nil {
			return rep, err
		}
		rep.HookHolds = append(rep.HookHolds, hold)
		rep.Replacements = append(rep.Replacements, time.Since(start))
		if s.Recorder != nil {
			s.Recorder.ReplacementEnd(round)
		}
		s.life.step("rollout %d/%d: %s gone after %.1fs (hook held %.1fs)", round, s.Replicas, oldest, time.Since(start).Seconds(), hold.Seconds())
	}
	if s.Unguarded {
		return rep, nil
	}
	if err := s.waitCondition(ctx, lbv1.KubeVIPTakeOverCondition, lbv1.KubeVIPRetiredReason, 2*time.Minute); err != nil {
		return rep, err
	}
	if err := s.checkFenceGone(ctx); err != nil {
		return rep, err
	}
	s.life.step("kube-vip retired: no mirror Pod left, the fence Lease deleted")
	return rep, nil
}

// refusedThenCorrected waits for the manager to refuse the takeover for its wrong Lease name
// (KubeVIPLeaseMismatch, read from kube-vip's mirror Pods) with no fence written, corrects the
// name and waits for KubeVIPTakeOverReady.
func (s *TakeOverScenario) refusedThenCorrected(ctx context.Context) error {
	if err := s.waitCondition(ctx, lbv1.KubeVIPTakeOverReadyCondition, lbv1.KubeVIPLeaseMismatchReason, endpointTimeout); err != nil {
		return err
	}
	if err := s.waitCondition(ctx, lbv1.KubeVIPTakeOverCondition, lbv1.KubeVIPFencePendingReason, endpointTimeout); err != nil {
		return err
	}
	lease := &coordv1.Lease{}
	if err := s.Lab.WorkloadClient.Get(ctx, client.ObjectKey{Namespace: "kube-system", Name: kubeVIPLeaseName}, lease); err != nil {
		return fmt.Errorf("kube-vip's Lease: %w", err)
	}
	if h := ptrString(lease.Spec.HolderIdentity); !slices.Contains(s.KubeVIPMachines, h) {
		return fmt.Errorf("kube-vip's Lease is held by %s while the takeover is refused, not by kube-vip", h)
	}
	s.life.step("refused (KubeVIPLeaseMismatch: the spec names kube-system/kube-vip-cp), nothing fenced: kube-vip on %s keeps its Lease", ptrString(lease.Spec.HolderIdentity))
	if err := s.updateLB(ctx, "correct the Lease name", func(lb *lbv1.LoadBalancer) {
		lb.Spec.Backend.TakeOver().KubeVIP.LeaseName = kubeVIPLeaseName
	}); err != nil {
		return err
	}
	if err := s.waitCondition(ctx, lbv1.KubeVIPTakeOverReadyCondition, lbv1.KubeVIPTakeOverReadyReason, endpointTimeout); err != nil {
		return err
	}
	s.life.step("leaseName corrected: KubeVIPTakeOverReady, the manager read kube-vip's mirror Pods and allows the hand-over")
	return nil
}

// rollBackAndAgain removes takeOver (rollback): the manager deletes its fence, kube-vip elects a
// leader that takes the Lease and announces the VIP again beside first (BGP: both paths are the
// cluster's API servers). Then takeOver is set again: fenced anew, kube-vip's leader withdraws
// and first announces alone.
func (s *TakeOverScenario) rollBackAndAgain(ctx context.Context, first string) error {
	if s.Lab.opts.Backend != BGP {
		return fmt.Errorf("the rollback is shown with BGP (under ARP a caplb member that holds the VIP keeps it: roll the KubeadmControlPlane back too)")
	}
	var saved *lbv1.TakeOver
	if err := s.updateLB(ctx, "remove takeOver", func(lb *lbv1.LoadBalancer) {
		saved, lb.Spec.Backend.BGP.TakeOver = lb.Spec.Backend.BGP.TakeOver, nil
	}); err != nil {
		return err
	}
	s.life.step("rollback: takeOver removed")
	var leader string
	if err := harness.Poll(ctx, takeOverTimeout, "kube-vip leads again", func(ctx context.Context) (bool, string, error) {
		lease := &coordv1.Lease{}
		err := s.Lab.WorkloadClient.Get(ctx, client.ObjectKey{Namespace: "kube-system", Name: kubeVIPLeaseName}, lease)
		if err != nil {
			return false, err.Error(), nil
		}
		leader = ptrString(lease.Spec.HolderIdentity)
		return slices.Contains(s.KubeVIPMachines, leader), "Lease held by " + leader, nil
	}); err != nil {
		return err
	}
	if err := s.life.waitHolders(ctx, "kube-vip on "+leader+" announces again", func(h []string) bool {
		return slices.Contains(h, leader)
	}); err != nil {
		return err
	}
	s.life.step("rollback: the fence deleted, kube-vip on %s took its Lease and announces the VIP again (beside %s)", leader, first)
	if err := s.updateLB(ctx, "set takeOver again", func(lb *lbv1.LoadBalancer) { lb.Spec.Backend.BGP.TakeOver = saved }); err != nil {
		return err
	}
	s.life.step("takeOver set again")
	return s.waitHandOver(ctx, first)
}

// updateLB changes the LoadBalancer's spec, again on a conflict.
func (s *TakeOverScenario) updateLB(ctx context.Context, what string, change func(*lbv1.LoadBalancer)) error {
	return harness.Poll(ctx, endpointTimeout, what, func(ctx context.Context) (bool, string, error) {
		lb, err := s.Lab.LB(ctx, s.life.lbName)
		if err != nil {
			return false, "", err
		}
		change(lb)
		if err := s.Lab.Mgmt.Client.Update(ctx, lb); err != nil {
			return false, err.Error(), nil // a conflict with the controller's status: again
		}
		return true, "", nil
	})
}

// Teardown is the life's: the LoadBalancer deleted, nothing of caplb's left.
func (s *TakeOverScenario) Teardown(ctx context.Context) error { return s.life.Teardown(ctx) }

// addKubeVIPMachine creates the next Machine with kube-vip's files and waits until its Node is
// registered with kube-vip's mirror Pod.
func (s *TakeOverScenario) addKubeVIPMachine(ctx context.Context) (string, error) {
	l := s.Lab
	s.seq++
	name := fmt.Sprintf("%s-kv-%d", l.ClusterName, s.seq)
	if _, err := l.CreateKubeVIPMachine(ctx, name); err != nil {
		return "", err
	}
	s.life.step("Machine %s created (kube-vip)", name)
	err := harness.Poll(ctx, activeTimeout, name+" booted", func(ctx context.Context) (bool, string, error) {
		n := l.Node(name)
		return n != nil && n.cp != nil && n.cp.apiserver != nil && n.stopKubeVIP != nil, "booting", nil
	})
	if err != nil {
		return "", err
	}
	s.KubeVIPMachines = append(s.KubeVIPMachines, name)
	s.life.noAgent[name] = true
	if s.Unguarded || s.overlap() {
		// Nothing holds a kube-vip Machine until the VIP left it (a kube-vip that does not
		// elect announces until its machine goes): its release is not checked.
		s.life.unchecked[name] = true
	}
	s.life.step("%s runs kube-vip", name)
	return name, nil
}

// waitReachable waits until a TCP connection from the client's namespace to the VIP succeeds:
// the cluster is in use only once its endpoint answers. kube-vip announces the VIP with one
// gratuitous ARP, then every few seconds; a client whose neighbour entry failed while nobody held
// the VIP (the management side dials it from the same namespace) gets "no route to host" until
// the next.
func (s *TakeOverScenario) waitReachable(ctx context.Context) error {
	addr := net.JoinHostPort(s.Lab.VIP().String(), strconv.Itoa(apiPort))
	return harness.Poll(ctx, endpointTimeout, addr+" reachable from the client", func(ctx context.Context) (bool, string, error) {
		dctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		c, err := s.Lab.DialClient(dctx, "tcp", addr)
		if err != nil {
			return false, err.Error(), nil
		}
		return true, "", c.Close()
	})
}

// waitHandOver waits until first, the first caplb member, holds the VIP alone: the manager
// fenced kube-vip's Lease, kube-vip's leader stepped down and dropped the VIP, and first claimed
// the silent VIP.
func (s *TakeOverScenario) waitHandOver(ctx context.Context, first string) error {
	if err := s.waitCondition(ctx, lbv1.KubeVIPTakeOverCondition, lbv1.KubeVIPFencedReason, takeOverTimeout); err != nil {
		return err
	}
	s.Fenced = time.Now()
	s.life.step("KubeVIPTakeOver Fenced: caplb holds kube-vip's Lease")
	if err := harness.Poll(ctx, takeOverTimeout, first+" holds the VIP alone", func(ctx context.Context) (bool, string, error) {
		h, err := s.Lab.Holders()
		if err != nil {
			return false, "", err
		}
		return slices.Equal(h, []string{first}), fmt.Sprintf("holders %v", h), nil
	}); err != nil {
		return err
	}
	s.HandOver = time.Now()
	s.life.step("%s (caplb) holds the VIP: kube-vip let go", first)
	return nil
}

func (s *TakeOverScenario) waitCondition(ctx context.Context, cond, reason string, timeout time.Duration) error {
	err := harness.Poll(ctx, timeout, cond+" "+reason, func(ctx context.Context) (bool, string, error) {
		lb, err := s.Lab.LB(ctx, s.life.lbName)
		if err != nil {
			return false, "", err
		}
		c := meta.FindStatusCondition(lb.Status.Conditions, cond)
		if c == nil {
			return false, "no condition", nil
		}
		return c.Reason == reason, fmt.Sprintf("%s %s: %s", c.Status, c.Reason, c.Message), nil
	})
	if err != nil {
		// Poll's own error may be the deadline's: say where it stood.
		if lb, gerr := s.Lab.LB(context.Background(), s.life.lbName); gerr == nil {
			err = fmt.Errorf("%w (conditions: %s)", err, harness.DescribeLB(lb))
		}
	}
	return err
}

// checkFenceGone checks that kube-vip's Lease no longer exists in the workload cluster.
func (s *TakeOverScenario) checkFenceGone(ctx context.Context) error {
	lease := &coordv1.Lease{}
	err := s.Lab.WorkloadClient.Get(ctx, client.ObjectKey{Namespace: "kube-system", Name: kubeVIPLeaseName}, lease)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	return fmt.Errorf("kube-vip's Lease is still there, held by %v", ptrString(lease.Spec.HolderIdentity))
}

func ptrString(p *string) string {
	if p == nil {
		return "nobody"
	}
	return *p
}

// RunTakeOverObserved runs the takeover with the clients and samplers of RunObserved; the
// scenario's record (which Machines ran kube-vip, when caplb took over) comes back with it.
func RunTakeOverObserved(ctx context.Context, l *Lab, unguarded bool, log func(string)) (Observed, *TakeOverScenario, error) {
	var s *TakeOverScenario
	obs, err := runObserved(ctx, l, log, func(rec Recorder, afterBootstrap func() error) lifeRunner {
		s = &TakeOverScenario{Lab: l, Recorder: rec, AfterBootstrap: afterBootstrap, Unguarded: unguarded,
			// A BGP kube-vip that elects is rolled back once and taken over again.
			RollBack: !unguarded && l.opts.Backend == BGP && !l.opts.KubeVIP.NoElection}
		return s
	})
	return obs, s, err
}
