//go:build linux

package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lbv1 "github.com/caplb/caplb/api/v1alpha1"
	"github.com/caplb/caplb/e2e/harness"
	"github.com/caplb/caplb/e2e/lab/kubeadm"
	"github.com/caplb/caplb/e2e/lifecycle/observe"
	"github.com/caplb/caplb/e2e/lifecycle/observe/clients"
)

// MemberMoveScenario is a pre-addressed cluster whose endpoint is its first machine's own
// address — a static LoadBalancer with spec.endpoint.host empty and onPublishedMemberLeave
// MoveEndpoint (the VIP LoadBalancer beside it is an additional endpoint) — losing that machine,
// as a rolling replacement deletes the oldest: caplb moves the Cluster to the next member's
// address with the endpoint move's steps while the leaving Machine's pre-drain hook holds, then
// a new control-plane Machine joins through the new address with kubeadm's discovery and CAPI
// reaches the cluster through it. Clients of the leaving address lose it by design (a member's
// address is not highly available); client-go on the new one counts failures throughout.
type MemberMoveScenario struct {
	Lab *Lab
	Log func(string)

	// Steps are the move's steps as status.endpointMove.step showed them, in order.
	Steps []string
	// Violations are moments the leaving Machine's hook was gone while the Cluster still named it.
	Violations []string
	// First and Next are the leaving member's and the new endpoint's addresses; Joined is the
	// Machine that joined through Next.
	First, Next netip.Addr
	Joined      string
	// E2 is what client-go saw through the new endpoint.
	E2 *clients.Result
	// VIP is the second move's new endpoint (member address → VIP), VIPSteps its steps and
	// VIPClients what client-go saw through it.
	VIP        netip.Addr
	VIPSteps   []string
	VIPClients *clients.Result

	life  *Scenario
	lb    string
	vipLB string
}

func (s *MemberMoveScenario) step(format string, args ...any) {
	if s.Log != nil {
		s.Log(fmt.Sprintf(format, args...))
	}
}

// Run runs the scenario; the clients on the new endpoint are stopped before it returns.
func (s *MemberMoveScenario) Run(ctx context.Context) (err error) {
	l := s.Lab
	s.step("create the Cluster, its VIP LoadBalancer as an additional endpoint, and a static LoadBalancer publishing a member's address (onPublishedMemberLeave: MoveEndpoint)")
	vipLB, err := l.createCluster(ctx, false)
	if err != nil {
		return err
	}
	s.vipLB = vipLB.Name
	s.lb = l.ClusterName + "-edge"
	drain := lbv1.Duration{Duration: labDrainPeriod}
	edge := &lbv1.LoadBalancer{
		ObjectMeta: metav1.ObjectMeta{Namespace: l.Namespace, Name: s.lb},
		Spec: lbv1.LoadBalancerSpec{ClusterName: l.ClusterName,
			Backend: lbv1.Backend{Static: &lbv1.StaticBackend{OnPublishedMemberLeave: lbv1.MemberLeaveMoveEndpoint}},
			Quiesce: lbv1.Quiesce{DrainPeriod: &drain}},
	}
	if err := l.Mgmt.Client.Create(ctx, edge); err != nil {
		return fmt.Errorf("creating LoadBalancer %s: %w", s.lb, err)
	}
	// Pre-addressed: the first machine's address is the endpoint its kubeadm init names.
	s.First = nodeAddr(1)
	l.vip = s.First
	if err := l.setUpRealCP(ctx); err != nil {
		return err
	}
	s.life = &Scenario{Lab: l, Recorder: stepLogger{observe.NewRecorder(), s.Log}, lbName: s.lb}
	first, err := s.life.addMachine(ctx)
	if err != nil {
		return err
	}
	if err := s.waitClusterEndpoint(ctx, s.First); err != nil {
		return err
	}
	s.step("the Cluster's endpoint is %s's address, %s:6443", first, s.First)
	second, err := s.life.addMachine(ctx)
	if err != nil {
		return err
	}
	s.Next = l.Node(second).Addr
	e2 := netip.AddrPortFrom(s.Next, apiPort)
	run, err := l.startClientsAt(ctx, e2.String(), "member-clients")
	if err != nil {
		return fmt.Errorf("client-go on %s: %w", e2, err)
	}
	defer func() {
		res := run.Stop(30 * time.Second)
		s.E2 = &res
	}()
	s.step("client-go on %s (%s's address, the next to publish)", e2, second)
	// The VIP (an additional endpoint until the second move) has clients from here on too.
	vipObj, err := l.LB(ctx, s.vipLB)
	if err != nil {
		return err
	}
	if s.VIP, err = netip.ParseAddr(vipObj.Status.Endpoint.Host); err != nil {
		return fmt.Errorf("LoadBalancer %s's VIP %q: %w", s.vipLB, vipObj.Status.Endpoint.Host, err)
	}
	vipRun, err := l.startClientsAt(ctx, netip.AddrPortFrom(s.VIP, apiPort).String(), "member-clients-vip")
	if err != nil {
		return fmt.Errorf("client-go on the VIP: %w", err)
	}
	defer func() {
		res := vipRun.Stop(30 * time.Second)
		s.VIPClients = &res
	}()
	s.step("client-go on the VIP %s too", s.VIP)

	if err := s.deleteWatched(ctx, first); err != nil {
		return err
	}
	if err := s.waitMoved(ctx); err != nil {
		return err
	}
	s.step("the Cluster moved to %s through %v", e2, s.Steps)
	if err := l.checkEndpointCopies(ctx, s.First, e2); err != nil {
		return err
	}
	s.step("cluster-info (re-signed), kubeadm-config, kube-proxy and the kubeconfig Secret name %s", e2)
	if s.Joined, err = s.life.addMachine(ctx); err != nil {
		return fmt.Errorf("a Machine joining through %s: %w", e2, err)
	}
	n := l.Node(s.Joined)
	if srv, err := kubeadm.ServerOf(n.cp.Machine, kubeadm.AdminConfPath); err != nil || srv != "https://"+e2.String() {
		return fmt.Errorf("%s's admin.conf names %q (%v), not %s", s.Joined, srv, err, e2)
	}
	// CAPI's Machine controller finds the new Node through its ClusterCache: after the first
	// machine went, only through the rewritten kubeconfig Secret.
	if err := harness.Poll(ctx, activeTimeout, s.Joined+"'s nodeRef", func(ctx context.Context) (bool, string, error) {
		m := &clusterv1.Machine{}
		if err := l.Mgmt.Client.Get(ctx, client.ObjectKey{Namespace: l.Namespace, Name: s.Joined}, m); err != nil {
			return false, "", err
		}
		return m.Status.NodeRef.IsDefined(), m.Status.Phase, nil
	}); err != nil {
		return err
	}
	s.step("%s joined through %s with kubeadm's discovery; CAPI set its nodeRef through the moved kubeconfig", s.Joined, e2)
	return s.moveToVIP(ctx)
}

// moveToVIP is the second move, member address → VIP: the VIP LoadBalancer, an additional
// endpoint whose agents run on the machines since they booted, takes the Cluster over from the
// static one (spec.takeOverEndpointFrom), with client-go on both (since before the first move).
func (s *MemberMoveScenario) moveToVIP(ctx context.Context) error {
	l := s.Lab
	lb, err := l.LB(ctx, s.vipLB)
	if err != nil {
		return err
	}
	vip := s.VIP
	ep := netip.AddrPortFrom(vip, apiPort)
	orig := lb.DeepCopy()
	lb.Spec.TakeOverEndpointFrom = &lbv1.EndpointTakeOver{Name: s.lb}
	if err := l.Mgmt.Client.Patch(ctx, lb, client.MergeFrom(orig)); err != nil {
		return fmt.Errorf("setting %s spec.takeOverEndpointFrom: %w", s.vipLB, err)
	}
	s.step("LoadBalancer %s (the VIP %s) takes the endpoint over from %s", s.vipLB, ep, s.lb)
	if err := harness.Poll(ctx, moveDoneTimeout, "EndpointMove Switched on "+s.vipLB, func(ctx context.Context) (bool, string, error) {
		cur, err := l.LB(ctx, s.vipLB)
		if err != nil {
			return false, "", err
		}
		if st := cur.Status.EndpointMove; st != nil && st.Step != "" && (len(s.VIPSteps) == 0 || s.VIPSteps[len(s.VIPSteps)-1] != string(st.Step)) {
			s.VIPSteps = append(s.VIPSteps, string(st.Step))
			s.step("endpoint move to the VIP: step %s", st.Step)
		}
		c := meta.FindStatusCondition(cur.Status.Conditions, lbv1.EndpointMoveCondition)
		if c == nil {
			return false, "no EndpointMove condition", nil
		}
		if c.Reason == lbv1.EndpointMoveRefusedReason {
			return false, "", errors.New("the move was refused: " + c.Message)
		}
		return c.Reason == lbv1.SwitchedReason, c.Reason + ": " + c.Message, nil
	}); err != nil {
		return err
	}
	if err := s.waitClusterEndpoint(ctx, vip); err != nil {
		return err
	}
	if err := l.checkEndpointCopies(ctx, s.Next, ep); err != nil {
		return err
	}
	edge, err := l.LB(ctx, s.lb)
	if err != nil {
		return err
	}
	if edge.Spec.PublishesClusterEndpoint() {
		return fmt.Errorf("LoadBalancer %s still publishes after the move to the VIP", s.lb)
	}
	s.step("the Cluster is on the VIP %s; every copy of the endpoint names it", ep)
	return nil
}

// deleteWatched deletes the Machine and watches it go: its pre-drain hook of the publishing
// LoadBalancer must hold while the Cluster names its address.
func (s *MemberMoveScenario) deleteWatched(ctx context.Context, name string) error {
	l := s.Lab
	hook := lbv1.PreDrainHookAnnotation(s.lb)
	m := &clusterv1.Machine{}
	if err := l.Mgmt.Client.Get(ctx, client.ObjectKey{Namespace: l.Namespace, Name: name}, m); err != nil {
		return err
	}
	if _, ok := m.Annotations[hook]; !ok {
		return fmt.Errorf("machine %s has no pre-drain hook of %s", name, s.lb)
	}
	s.step("delete %s, whose address the Cluster names", name)
	if err := l.Mgmt.Client.Delete(ctx, m); err != nil {
		return err
	}
	return harness.Poll(ctx, goneTimeout, "machine "+name+" gone", func(ctx context.Context) (bool, string, error) {
		s.noteStep(ctx)
		cluster := &clusterv1.Cluster{}
		if err := l.Mgmt.Client.Get(ctx, client.ObjectKey{Namespace: l.Namespace, Name: l.ClusterName}, cluster); err != nil {
			return false, "", err
		}
		cur := &clusterv1.Machine{}
		err := l.Mgmt.Client.Get(ctx, client.ObjectKeyFromObject(m), cur)
		if client.IgnoreNotFound(err) != nil {
			return false, "", err
		}
		if err != nil {
			return true, "", nil
		}
		if _, held := cur.Annotations[hook]; !held && cluster.Spec.ControlPlaneEndpoint.Host == s.First.String() {
			s.Violations = append(s.Violations, fmt.Sprintf("%s: hook gone while the Cluster names %s", time.Now().UTC().Format("15:04:05.000"), s.First))
		}
		return false, fmt.Sprintf("Cluster at %s", cluster.Spec.ControlPlaneEndpoint.Host), nil
	})
}

// noteStep records the move's step when it changed.
func (s *MemberMoveScenario) noteStep(ctx context.Context) {
	lb, err := s.Lab.LB(ctx, s.lb)
	if err != nil || lb.Status.EndpointMove == nil {
		return
	}
	if st := string(lb.Status.EndpointMove.Step); st != "" && (len(s.Steps) == 0 || s.Steps[len(s.Steps)-1] != st) {
		s.Steps = append(s.Steps, st)
		s.step("endpoint move: step %s", st)
	}
}

// waitMoved waits for the EndpointMove condition's Switched and the Cluster on the next address.
func (s *MemberMoveScenario) waitMoved(ctx context.Context) error {
	if err := harness.Poll(ctx, moveDoneTimeout, "EndpointMove Switched", func(ctx context.Context) (bool, string, error) {
		s.noteStep(ctx)
		lb, err := s.Lab.LB(ctx, s.lb)
		if err != nil {
			return false, "", err
		}
		c := meta.FindStatusCondition(lb.Status.Conditions, lbv1.EndpointMoveCondition)
		if c == nil {
			return false, "no EndpointMove condition", nil
		}
		if c.Reason == lbv1.EndpointMoveRefusedReason {
			return false, "", errors.New("the move was refused: " + c.Message)
		}
		return c.Reason == lbv1.SwitchedReason, c.Reason + ": " + c.Message, nil
	}); err != nil {
		return err
	}
	return s.waitClusterEndpoint(ctx, s.Next)
}

func (s *MemberMoveScenario) waitClusterEndpoint(ctx context.Context, host netip.Addr) error {
	l := s.Lab
	return harness.Poll(ctx, activeTimeout, "the Cluster's endpoint at "+host.String(), func(ctx context.Context) (bool, string, error) {
		c := &clusterv1.Cluster{}
		if err := l.Mgmt.Client.Get(ctx, client.ObjectKey{Namespace: l.Namespace, Name: l.ClusterName}, c); err != nil {
			return false, "", err
		}
		ep := c.Spec.ControlPlaneEndpoint
		return ep.Host == host.String() && ep.Port == apiPort, fmt.Sprintf("%s:%d", ep.Host, ep.Port), nil
	})
}
