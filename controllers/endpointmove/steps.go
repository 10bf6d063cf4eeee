package endpointmove

import (
	"fmt"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	lbv1 "github.com/caplb/caplb/api/v1alpha1"
)

// order lists the steps; a move only goes forward in it.
var order = []lbv1.EndpointMoveStep{
	lbv1.MoveStepServe, lbv1.MoveStepCertSANs,
	lbv1.MoveStepClusterInfo, lbv1.MoveStepKubeadmConfig, lbv1.MoveStepKubeProxy, lbv1.MoveStepKubeconfigSecret,
	lbv1.MoveStepReleaseOld, lbv1.MoveStepClusterEndpoint, lbv1.MoveStepPublish, lbv1.MoveStepDone,
}

func index(s lbv1.EndpointMoveStep) int { return slices.Index(order, s) }

// before reports whether step a comes before step b.
func before(a, b lbv1.EndpointMoveStep) bool { return index(a) < index(b) }

// MemberCert is one member's serving-certificate check: does a TLS handshake with server name
// E2 verify against the cluster CA (or does the member's agent report E2 among its SANs)?
type MemberCert struct {
	Name     string
	Verified bool
	// Detail says why not (the handshake's error, the SANs found); shown in the condition.
	Detail string
}

// OldLB is what the reconciler observed of the LoadBalancer named by spec.takeOverEndpointFrom.
type OldLB struct {
	// Exists is false when it is not found.
	Exists bool
	// Publishes: spec.publishClusterEndpoint (true when unset).
	Publishes bool
	// Endpoint is its status.endpoint.
	Endpoint lbv1.APIEndpoint
	// Refusal is ValidateTakeOver's aggregated message, "" when it may hand over.
	Refusal string
}

// Observed is everything the step machine decides from. The reconciler fills it from the
// LoadBalancer, the old LoadBalancer, the Cluster, the members and the control plane.
type Observed struct {
	// Status is the persisted status.endpointMove; nil when no move has started.
	Status *lbv1.EndpointMoveStatus
	// From is spec.takeOverEndpointFrom.name; "" when the field is absent.
	From string
	// Policy is spec.takeOverEndpointFrom.certSANs, defaulted.
	Policy lbv1.CertSANsPolicy
	// Publishes: this LoadBalancer's spec.publishClusterEndpoint (true once Publish was written).
	Publishes bool
	// Ready: this LoadBalancer's Ready condition is True; Endpoint is its status.endpoint (E2).
	Ready    bool
	Endpoint lbv1.APIEndpoint
	Old      OldLB
	// ClusterEndpoint is the Cluster's spec.controlPlaneEndpoint.
	ClusterEndpoint lbv1.APIEndpoint
	// Members are the serving-certificate checks, one per member.
	Members []MemberCert
	// ControlPlaneCertSANs is the control plane's apiServer.certSANs (KubeadmControlPlane), and
	// ControlPlaneKnown whether it could be read (another control-plane kind, or none).
	ControlPlaneCertSANs []string
	ControlPlaneKnown    bool
	// Machines are the Cluster's Machines now, recorded when the Cluster switches.
	Machines []string
	// Self is this LoadBalancer's name. A move whose From is Self is a member move: a static
	// LoadBalancer publishing a member's address (onPublishedMemberLeave MoveEndpoint) moves the
	// Cluster from a leaving member's address to another's. It has no old LoadBalancer to release
	// and no publisher to flip (ReleaseOld and Publish are passed), and only the member carrying
	// the new address must verify as it (Members holds that one).
	Self string
}

// Decision is what to do now.
type Decision struct {
	// Status is what status.endpointMove must say before Do is done (nil: no move, clear it).
	Status *lbv1.EndpointMoveStatus
	// Do is the step whose write to make now ("" when waiting, refused or done). It is always a
	// rewrite or publisher step; the caller makes it (idempotently), then calls Advance.
	Do lbv1.EndpointMoveStep
	// AddCertSANs are hosts to add to the control plane's certSANs now (policy
	// AddToControlPlane only).
	AddCertSANs []string
	// Condition is the EndpointMove condition to set; nil means remove it (no move).
	Condition *metav1.Condition
}

// Next decides the move's next step. Gate steps (Serve, CertSANs) are passed as soon as what
// they wait for is observed; every later step is returned in Do until the caller reports it
// done with Advance, so a step is never skipped and never returns once passed.
func Next(o Observed) Decision {
	st := o.Status
	if st != nil && st.Step == lbv1.MoveStepDone && o.From != "" && o.From != st.From && !o.Publishes {
		// A finished move is a record; a takeover from another LoadBalancer asked for since (the
		// field set again on a LoadBalancer that does not publish) is a new move. The same name
		// is the finished move's own field, left by a Publish patch that failed.
		st = nil
	}
	if st == nil {
		if o.From == "" {
			return Decision{}
		}
		st = &lbv1.EndpointMoveStatus{From: o.From, Step: lbv1.MoveStepServe}
	} else {
		st = st.DeepCopy()
	}
	d := Decision{Status: st}
	refuse := func(format string, a ...any) Decision {
		d.Condition = cond(metav1.ConditionFalse, lbv1.EndpointMoveRefusedReason, fmt.Sprintf(format, a...))
		return d
	}
	member := o.Self != "" && st.From == o.Self
	if st.Step == lbv1.MoveStepDone {
		d.Condition = cond(metav1.ConditionTrue, lbv1.SwitchedReason, switchedMessage(st, member))
		return d
	}
	if index(st.Step) < 0 {
		return refuse("status.endpointMove.step %q is not a step this manager knows; a newer manager wrote it", st.Step)
	}
	if member {
		return nextMemberMove(o, d, refuse)
	}
	switch {
	case o.From == "" && st.Step == lbv1.MoveStepPublish && o.Publishes:
		// The Publish write drops the field: resumed after it, the step is done, not aborted.
	case o.From == "" && !before(lbv1.MoveStepCertSANs, st.Step):
		// Aborted before anything was rewritten: nothing to undo.
		return Decision{}
	case o.From == "":
		return refuse("spec.takeOverEndpointFrom was removed after the rewrites began (step %s): objects already name %s:%d; "+
			"set it again (name %s) to finish the move, or roll back as docs/endpoint-move.md says", st.Step, st.NewEndpoint.Host, st.NewEndpoint.Port, st.From)
	case o.From != st.From:
		return refuse("spec.takeOverEndpointFrom.name is %s but this move started from %s: set it back to %s", o.From, st.From, st.From)
	}

	// Before the old LoadBalancer lets go, it must still be the Cluster's publisher.
	if before(st.Step, lbv1.MoveStepReleaseOld) {
		if o.Old.Refusal != "" {
			return refuse("%s", o.Old.Refusal)
		}
	}
	if before(st.Step, lbv1.MoveStepClusterInfo) {
		// Before the first write: the move starts from the endpoint the old LoadBalancer publishes.
		if st.OldEndpoint.IsZero() {
			st.OldEndpoint = o.ClusterEndpoint
		}
		if o.ClusterEndpoint != st.OldEndpoint || o.Old.Endpoint != st.OldEndpoint {
			return refuse("Cluster's spec.controlPlaneEndpoint is %s and LoadBalancer %s serves %s; a move starts from the endpoint "+
				"the old LoadBalancer publishes (%s)", hp(o.ClusterEndpoint), st.From, hp(o.Old.Endpoint), hp(st.OldEndpoint))
		}
	}

	if st.Step == lbv1.MoveStepServe {
		if !o.Ready || !o.Endpoint.IsValid() {
			d.Condition = cond(metav1.ConditionFalse, lbv1.WaitingForEndpointReason, fmt.Sprintf(
				"waiting for this LoadBalancer to be Ready on its own endpoint before anything moves; the Cluster stays on %s (LoadBalancer %s)",
				hp(st.OldEndpoint), st.From))
			return d
		}
		st.NewEndpoint = o.Endpoint
		if err := (Move{Old: st.OldEndpoint, New: st.NewEndpoint}).Valid(); err != nil {
			return refuse("%v", err)
		}
		st.Step = lbv1.MoveStepCertSANs
	}

	if st.Step == lbv1.MoveStepCertSANs {
		if msg, add := certSANsGate(o, st); msg != "" {
			d.AddCertSANs = add
			d.Condition = cond(metav1.ConditionFalse, lbv1.WaitingForCertSANsReason, msg)
			return d
		}
		st.Step = lbv1.MoveStepClusterInfo
	}

	if st.Step == lbv1.MoveStepPublish && o.ClusterEndpoint != st.NewEndpoint {
		return refuse("Cluster's spec.controlPlaneEndpoint went back to %s after caplb set %s (a GitOps tool holding the Cluster?): "+
			"caplb stops; update the Cluster's source to %s", hp(o.ClusterEndpoint), hp(st.NewEndpoint), hp(st.NewEndpoint))
	}
	return rewrite(o, d, refuse)
}

// rewrite returns d with its writing step to do, once the Cluster is where that step expects it
// (E1 until the Cluster is switched, E1 or E2 at the switch); it refuses otherwise.
func rewrite(o Observed, d Decision, refuse func(string, ...any) Decision) Decision {
	st := d.Status
	switch {
	case before(st.Step, lbv1.MoveStepClusterEndpoint) && o.ClusterEndpoint != st.OldEndpoint:
		return refuse("Cluster's spec.controlPlaneEndpoint changed to %s during the move (expected %s until step %s); "+
			"caplb stops rather than fight another writer (a GitOps tool holding the Cluster?)", hp(o.ClusterEndpoint), hp(st.OldEndpoint), lbv1.MoveStepClusterEndpoint)
	case st.Step == lbv1.MoveStepClusterEndpoint && o.ClusterEndpoint != st.OldEndpoint && o.ClusterEndpoint != st.NewEndpoint:
		return refuse("Cluster's spec.controlPlaneEndpoint is %s, neither %s nor %s; caplb stops", hp(o.ClusterEndpoint), hp(st.OldEndpoint), hp(st.NewEndpoint))
	}
	if st.Step == lbv1.MoveStepClusterEndpoint && st.MachinesBeforeSwitch == nil {
		// Recorded before the Cluster is written: a Machine created after the write gets E2.
		st.MachinesBeforeSwitch = slices.Sorted(slices.Values(o.Machines))
	}
	d.Do = st.Step
	d.Condition = cond(metav1.ConditionFalse, lbv1.SwitchingReason, switchingMessage(st))
	return d
}

// Advance records that step done was made; the status it returns must be persisted before the
// next step's write. now stamps the switch.
func Advance(st *lbv1.EndpointMoveStatus, done lbv1.EndpointMoveStep, now metav1.Time) *lbv1.EndpointMoveStatus {
	out := st.DeepCopy()
	if out.Step != done || done == lbv1.MoveStepDone {
		return out
	}
	if done == lbv1.MoveStepClusterEndpoint && out.SwitchedAt == nil {
		out.SwitchedAt = &now
	}
	out.Step = order[index(done)+1]
	return out
}

// certSANsGate returns why the move waits for certificates ("" when every member verifies as
// E2) and, with AddToControlPlane, the hosts caplb should add to the control plane.
func certSANsGate(o Observed, st *lbv1.EndpointMoveStatus) (string, []string) {
	// New Machines get their SANs from the control plane's certSANs plus the Cluster's
	// endpoint: E2 must be there before the move, E1 after it.
	var missing []string
	for _, h := range []string{st.NewEndpoint.Host, st.OldEndpoint.Host} {
		if !slices.ContainsFunc(o.ControlPlaneCertSANs, func(s string) bool { return sameHost(s, h) }) {
			missing = append(missing, h)
		}
	}
	var failing []string
	for _, m := range o.Members {
		if !m.Verified {
			failing = append(failing, fmt.Sprintf("%s (%s)", m.Name, orElse(m.Detail, "not verified")))
		}
	}
	slices.Sort(failing)
	switch {
	case len(o.Members) == 0:
		return fmt.Sprintf("no member to check for %s in its serving certificate yet", st.NewEndpoint.Host), nil
	case len(failing) == 0 && (len(missing) == 0 || !o.ControlPlaneKnown):
		return "", nil
	}
	var b strings.Builder
	if len(failing) > 0 {
		fmt.Fprintf(&b, "serving certificate does not verify as %s on %d of %d members: %s. ", st.NewEndpoint.Host, len(failing), len(o.Members), strings.Join(failing, ", "))
	} else {
		fmt.Fprintf(&b, "every member's certificate verifies as %s, but the control plane's certSANs lack %s (Machines it creates would not). ",
			st.NewEndpoint.Host, strings.Join(missing, ", "))
	}
	var add []string
	switch {
	case len(missing) > 0 && o.ControlPlaneKnown && o.Policy == lbv1.CertSANsAddToControlPlane:
		add = missing
		fmt.Fprintf(&b, "Adding %s to KubeadmControlPlane spec.kubeadmConfigSpec.clusterConfiguration.apiServer.certSANs; waiting for its rollout", strings.Join(missing, ", "))
	case len(missing) > 0 && o.ControlPlaneKnown:
		fmt.Fprintf(&b, "Add %s to KubeadmControlPlane spec.kubeadmConfigSpec.clusterConfiguration.apiServer.certSANs (a rollout follows), "+
			"or set spec.takeOverEndpointFrom.certSANs: AddToControlPlane to let caplb do it", strings.Join(missing, ", "))
	case len(missing) > 0:
		fmt.Fprintf(&b, "Add %s to the API servers' certificate SANs (the control plane is not a KubeadmControlPlane caplb can read)", strings.Join(missing, ", "))
	default:
		b.WriteString("The control plane's certSANs have both hosts: waiting for its rollout to replace these members")
	}
	return b.String(), add
}

func switchingMessage(st *lbv1.EndpointMoveStatus) string {
	what := map[lbv1.EndpointMoveStep]string{
		lbv1.MoveStepClusterInfo:      "kube-public/cluster-info (the bootstrap signer re-signs it)",
		lbv1.MoveStepKubeadmConfig:    "kube-system/kubeadm-config controlPlaneEndpoint (the old host stays in certSANs)",
		lbv1.MoveStepKubeProxy:        "kube-system/kube-proxy kubeconfig.conf",
		lbv1.MoveStepKubeconfigSecret: "the Cluster's kubeconfig Secret",
		lbv1.MoveStepReleaseOld:       "LoadBalancer " + st.From + " spec.publishClusterEndpoint (to false)",
		lbv1.MoveStepClusterEndpoint:  "Cluster spec.controlPlaneEndpoint",
		lbv1.MoveStepPublish:          "this LoadBalancer's spec.publishClusterEndpoint (to true, dropping spec.takeOverEndpointFrom)",
	}[st.Step]
	return fmt.Sprintf("step %s: pointing %s at %s; %s stays served", st.Step, what, hp(st.NewEndpoint), hp(st.OldEndpoint))
}

func switchedMessage(st *lbv1.EndpointMoveStatus, member bool) string {
	msg := fmt.Sprintf("Cluster moved from %s (LoadBalancer %s) to %s; %s stays served until LoadBalancer %s is deleted",
		hp(st.OldEndpoint), st.From, hp(st.NewEndpoint), hp(st.OldEndpoint), st.From)
	if member {
		msg = fmt.Sprintf("Cluster moved from %s (the address of a member that left) to %s (another member's)",
			hp(st.OldEndpoint), hp(st.NewEndpoint))
	}
	if n := len(st.MachinesBeforeSwitch); n > 0 {
		msg += fmt.Sprintf(". %d Machines created before the switch still name %s in admin.conf or kubelet.conf (%s): "+
			"roll them out (KubeadmControlPlane spec.rollout.after, a MachineDeployment rollout)",
			n, hp(st.OldEndpoint), strings.Join(st.MachinesBeforeSwitch, ", "))
	}
	return msg
}

func cond(status metav1.ConditionStatus, reason, msg string) *metav1.Condition {
	return &metav1.Condition{Type: lbv1.EndpointMoveCondition, Status: status, Reason: reason, Message: msg}
}

func hp(e lbv1.APIEndpoint) string {
	if e.IsZero() {
		return "(none)"
	}
	return fmt.Sprintf("%s:%d", e.Host, e.Port)
}

func orElse(s, d string) string {
	if s == "" {
		return d
	}
	return s
}
