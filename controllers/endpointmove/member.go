package endpointmove

import (
	"fmt"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	lbv1 "github.com/caplb/caplb/api/v1alpha1"
)

// memberSkipped are the steps a member move passes without a write: there is no old
// LoadBalancer to release and no publisher to flip (the LoadBalancer publishes throughout).
var memberSkipped = []lbv1.EndpointMoveStep{lbv1.MoveStepReleaseOld, lbv1.MoveStepPublish}

// nextMemberMove is Next for a member move (Observed.Self): the same steps and guards, from the
// leaving member's address (the Cluster's endpoint when the move started) to the address the
// LoadBalancer publishes now.
func nextMemberMove(o Observed, d Decision, refuse func(string, ...any) Decision) Decision {
	st := d.Status
	if before(st.Step, lbv1.MoveStepClusterInfo) {
		if st.OldEndpoint.IsZero() {
			st.OldEndpoint = o.ClusterEndpoint
		}
		if o.ClusterEndpoint != st.OldEndpoint {
			return refuse("Cluster's spec.controlPlaneEndpoint is %s, not %s (the leaving member's address this move started from); caplb stops",
				hp(o.ClusterEndpoint), hp(st.OldEndpoint))
		}
	}
	if st.Step == lbv1.MoveStepServe {
		if !o.Ready || !o.Endpoint.IsValid() || o.Endpoint == st.OldEndpoint {
			d.Condition = cond(metav1.ConditionFalse, lbv1.WaitingForEndpointReason, fmt.Sprintf(
				"the member whose address is the Cluster's endpoint (%s) is leaving: waiting for another ready member to publish", hp(st.OldEndpoint)))
			return d
		}
		st.NewEndpoint = o.Endpoint
		if err := (Move{Old: st.OldEndpoint, New: st.NewEndpoint}).Valid(); err != nil {
			return refuse("%v", err)
		}
		st.Step = lbv1.MoveStepCertSANs
	}
	if st.Step == lbv1.MoveStepCertSANs {
		// Clients of a member's address reach that member only: it alone must verify as it
		// (kubeadm puts a machine's own address in its certificate). Machines made after the
		// switch get the new address as the Cluster's endpoint.
		gate := o
		gate.ControlPlaneKnown = false
		if msg, _ := certSANsGate(gate, st); msg != "" {
			d.Condition = cond(metav1.ConditionFalse, lbv1.WaitingForCertSANsReason, msg)
			return d
		}
		st.Step = lbv1.MoveStepClusterInfo
	}
	if slices.Contains(memberSkipped, st.Step) {
		st.Step = order[index(st.Step)+1]
	}
	if st.Step == lbv1.MoveStepDone {
		d.Condition = cond(metav1.ConditionTrue, lbv1.SwitchedReason, switchedMessage(st, true))
		return d
	}
	return rewrite(o, d, refuse)
}

// AdvanceMember is Advance for a member move: the steps it passes without a write are skipped,
// so that its status never names a step that does nothing.
func AdvanceMember(st *lbv1.EndpointMoveStatus, done lbv1.EndpointMoveStep, now metav1.Time) *lbv1.EndpointMoveStatus {
	out := Advance(st, done, now)
	for slices.Contains(memberSkipped, out.Step) {
		out.Step = order[index(out.Step)+1]
	}
	return out
}
