// Package providers holds the management-side backends of a LoadBalancer behind one small
// interface, and the registry the controller picks them from.
package providers

import (
	"context"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	lbv1 "github.com/caplb/caplb/api/v1alpha1"
)

// Member is one selected target as the controller hands it to a backend.
type Member struct {
	// Name of the member object (Machine or Node).
	Name string
	// NodeName is the name of the member's Node in the cluster it belongs to: the Machine's
	// status.nodeRef (never assumed equal to the Machine's name), or the Node's own name for
	// Node members. Empty while a Machine has no Node yet.
	NodeName string
	// Address the backend should use for the member, chosen by the controller from the
	// member's addresses; empty when the member has none yet.
	Address string
	// Addresses lists every address of the member by type (InternalIP, ExternalIP, ...), for
	// backends that prefer another type than the controller's choice.
	Addresses map[string]string
	// Ready is the member's own readiness (Machine Ready / Node Ready condition).
	Ready bool
	// State is the member's current life-cycle state; Since is when it entered it.
	State lbv1.TargetState
	Since time.Time
}

// EndpointStatus is what a backend reports after Ensure.
type EndpointStatus struct {
	// Endpoint the backend serves; Host is empty while it has none.
	Endpoint lbv1.APIEndpoint
	// Available is true when the endpoint is set and, where the backend probes it, answers.
	Available bool
	// Reason and Message explain Available (condition reason constants from api/v1alpha1).
	Reason, Message string
	// InRotation lists the members the backend has put into rotation. The controller moves a
	// member from adding to active only when the backend lists it here.
	InRotation map[string]bool
	// RotationUnknown says the backend could not tell which members are in rotation this time
	// (e.g. the workload cluster, where the agents report, is unreachable): members keep their
	// adding / active states instead of all dropping to adding.
	RotationUnknown bool
	// Conditions are backend-specific conditions (e.g. AddressAllocated, AgentsReady) the
	// controller sets on the LoadBalancer as given. A backend reports the same types on every
	// successful Ensure.
	Conditions []metav1.Condition
	// Events are notable changes (e.g. the published member moved) the controller turns into
	// Kubernetes events on the LoadBalancer.
	Events []Event
	// RequeueAfter asks for another Ensure after this long (e.g. the next probe); 0 for none.
	RequeueAfter time.Duration
	// VIPOwner is the member (its Node name) whose agent reports holding the endpoint, for a
	// backend with one owner at a time (arp); empty for the others and while nobody is known to
	// hold it. The controller shows it in status.vipOwner.
	VIPOwner string
}

// Event is a notable change a backend reports.
type Event struct {
	// Warning marks events a person should act on or at least notice.
	Warning bool
	// Reason is CamelCase; Message is a sentence.
	Reason, Message string
}

// QuiesceStatus is what a backend reports for one member leaving or rejoining rotation.
type QuiesceStatus struct {
	// Done is true once the change has taken effect (for Quiesce: traffic moved away and the
	// drain period passed).
	Done bool
	// RequeueAfter asks to be called again after this long while not Done.
	RequeueAfter time.Duration
}

// Backend is the management-side half of a LoadBalancer backend. The controller calls it from
// its reconcile loop, for one LoadBalancer at a time, possibly concurrently for different
// LoadBalancers. Every method must be idempotent and keep no state that a manager restart would
// lose: whatever must survive is derived from the LoadBalancer and its members (the Member.Since
// times, lb.Status.Endpoint).
type Backend interface {
	// Kind is the name of the field under spec.backend this backend serves ("static").
	Kind() string

	// Validate checks the backend's part of the spec with no I/O and returns errors that name
	// the field and the fix. It is called on every reconcile (and by a webhook, if one runs)
	// before any other method; the others may assume a valid spec.
	Validate(lb *lbv1.LoadBalancer) field.ErrorList

	// Ensure makes the endpoint serve the members whose State is in rotation and reports the
	// endpoint. Called on every reconcile of a LoadBalancer that is not being deleted, with every
	// selected member (members out of rotation included, so a backend can see why one is not
	// eligible). It must tolerate an empty member list and members without an address.
	Ensure(ctx context.Context, lb *lbv1.LoadBalancer, members []Member) (EndpointStatus, error)

	// Quiesce takes one member out of rotation: called repeatedly while the member is disabling
	// or removing, until it reports Done. The controller bounds the wait with
	// spec.quiesce.timeout, so Quiesce need not.
	Quiesce(ctx context.Context, lb *lbv1.LoadBalancer, member Member) (QuiesceStatus, error)

	// Restore puts a quiesced member back into rotation (the user removed the disabled
	// annotation). Called repeatedly until it reports Done.
	Restore(ctx context.Context, lb *lbv1.LoadBalancer, member Member) (QuiesceStatus, error)

	// Release frees everything the backend holds for the LoadBalancer. Called once the
	// LoadBalancer is being deleted, after members were released; called again on error. It must
	// tolerate a LoadBalancer that was never ensured.
	Release(ctx context.Context, lb *lbv1.LoadBalancer) error
}
