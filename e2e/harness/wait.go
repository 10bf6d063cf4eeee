package harness

import (
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lbv1 "github.com/caplb/caplb/api/v1alpha1"
)

// PollInterval is how often the wait helpers look.
const PollInterval = 100 * time.Millisecond

// Poll calls cond every PollInterval until it reports done, returns an error, or timeout
// passes. The timeout error says what was awaited and what cond last reported (its status
// string), so a failure explains itself.
func Poll(ctx context.Context, timeout time.Duration, what string,
	cond func(ctx context.Context) (done bool, status string, err error)) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	t := time.NewTicker(PollInterval)
	defer t.Stop()
	var last string
	for {
		done, status, err := cond(ctx)
		if err != nil && ctx.Err() == nil {
			return fmt.Errorf("waiting for %s: %w", what, err)
		}
		if done {
			return nil
		}
		last = status
		select {
		case <-ctx.Done():
			return fmt.Errorf("timed out after %s waiting for %s; last seen: %s", timeout, what, last)
		case <-t.C:
		}
	}
}

// GetLB reads a LoadBalancer.
func (e *Env) GetLB(ctx context.Context, namespace, name string) (*lbv1.LoadBalancer, error) {
	lb := &lbv1.LoadBalancer{}
	if err := e.Client.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, lb); err != nil {
		return nil, err
	}
	return lb, nil
}

// WaitLB polls a LoadBalancer until pred holds and returns it.
func (e *Env) WaitLB(ctx context.Context, namespace, name string, timeout time.Duration, what string,
	pred func(*lbv1.LoadBalancer) bool) (*lbv1.LoadBalancer, error) {
	var got *lbv1.LoadBalancer
	err := Poll(ctx, timeout, fmt.Sprintf("LoadBalancer %s/%s: %s", namespace, name, what),
		func(ctx context.Context) (bool, string, error) {
			lb, err := e.GetLB(ctx, namespace, name)
			if apierrors.IsNotFound(err) {
				return false, "not found", nil
			}
			if err != nil {
				return false, "", err
			}
			got = lb
			return pred(lb), DescribeLB(lb), nil
		})
	return got, err
}

// WaitMachinesReady waits until CAPI reports every named Machine Ready with a nodeRef.
func (e *Env) WaitMachinesReady(ctx context.Context, namespace string, names []string, timeout time.Duration) error {
	return Poll(ctx, timeout, fmt.Sprintf("Machines %v in %s to be Ready with a nodeRef", names, namespace),
		func(ctx context.Context) (bool, string, error) {
			notReady := []string{}
			for _, n := range names {
				m := &clusterv1.Machine{}
				if err := e.Client.Get(ctx, types.NamespacedName{Namespace: namespace, Name: n}, m); err != nil {
					return false, "", err
				}
				if !MachineReady(m) {
					notReady = append(notReady, n)
				}
			}
			return len(notReady) == 0, fmt.Sprintf("not ready: %v", notReady), nil
		})
}

// WaitGone waits until obj no longer exists.
func (e *Env) WaitGone(ctx context.Context, obj client.Object, timeout time.Duration) error {
	key := client.ObjectKeyFromObject(obj)
	return Poll(ctx, timeout, fmt.Sprintf("%T %s to be gone", obj, key), func(ctx context.Context) (bool, string, error) {
		err := e.Client.Get(ctx, key, obj)
		if apierrors.IsNotFound(err) {
			return true, "", nil
		}
		if err != nil {
			return false, "", err
		}
		return false, fmt.Sprintf("still there (finalizers %v, annotations %v)", obj.GetFinalizers(), obj.GetAnnotations()), nil
	})
}

// Target returns the status entry for a member, or nil.
func Target(lb *lbv1.LoadBalancer, name string) *lbv1.Target {
	for i := range lb.Status.Targets {
		if lb.Status.Targets[i].Name == name {
			return &lb.Status.Targets[i]
		}
	}
	return nil
}

// TargetState returns a member's state, or "" when it is not listed.
func TargetState(lb *lbv1.LoadBalancer, name string) lbv1.TargetState {
	if t := Target(lb, name); t != nil {
		return t.State
	}
	return ""
}

// Condition returns a condition of the LoadBalancer, or nil.
func Condition(lb *lbv1.LoadBalancer, typ string) *metav1.Condition {
	for i := range lb.Status.Conditions {
		if lb.Status.Conditions[i].Type == typ {
			return &lb.Status.Conditions[i]
		}
	}
	return nil
}

// ConditionIs reports whether the condition has the given status.
func ConditionIs(lb *lbv1.LoadBalancer, typ string, status metav1.ConditionStatus) bool {
	c := Condition(lb, typ)
	return c != nil && c.Status == status
}

// DescribeLB renders the parts of a LoadBalancer's status a failing wait should show.
func DescribeLB(lb *lbv1.LoadBalancer) string {
	s := fmt.Sprintf("gen=%d observed=%d endpoint=%s:%d active=%d/%d targets=[",
		lb.Generation, lb.Status.ObservedGeneration, lb.Status.Endpoint.Host, lb.Status.Endpoint.Port,
		lb.Status.ActiveTargets, lb.Status.TotalTargets)
	for i, t := range lb.Status.Targets {
		if i > 0 {
			s += " "
		}
		s += fmt.Sprintf("%s=%s(ready=%t,%s)", t.Name, t.State, t.Ready, t.Address)
	}
	s += "] conditions=["
	for i, c := range lb.Status.Conditions {
		if i > 0 {
			s += " "
		}
		s += fmt.Sprintf("%s=%s/%s", c.Type, c.Status, c.Reason)
	}
	return s + "]"
}

// Events lists the events in namespace about the object named name (of kind, when not empty),
// oldest first. Events written through either the core/v1 or the events.k8s.io/v1 API are
// found: the API server stores them as one resource.
func (e *Env) Events(ctx context.Context, namespace, kind, name string) ([]corev1.Event, error) {
	list := &corev1.EventList{}
	if err := e.Client.List(ctx, list, client.InNamespace(namespace)); err != nil {
		return nil, fmt.Errorf("listing events in %s: %w", namespace, err)
	}
	var out []corev1.Event
	for _, ev := range list.Items {
		if ev.InvolvedObject.Name == name && (kind == "" || ev.InvolvedObject.Kind == kind) {
			out = append(out, ev)
		}
	}
	slices.SortFunc(out, func(a, b corev1.Event) int { return eventTime(a).Compare(eventTime(b)) })
	return out, nil
}

func eventTime(ev corev1.Event) time.Time {
	switch {
	case !ev.EventTime.IsZero():
		return ev.EventTime.Time
	case !ev.LastTimestamp.IsZero():
		return ev.LastTimestamp.Time
	default:
		return ev.CreationTimestamp.Time
	}
}

// WaitEvent waits for an event of type typ ("Normal", "Warning") about the object, whose reason
// is reason (any when empty), and returns it.
func (e *Env) WaitEvent(ctx context.Context, namespace, kind, name, typ, reason string, timeout time.Duration) (*corev1.Event, error) {
	var found *corev1.Event
	err := Poll(ctx, timeout, fmt.Sprintf("%s event %q about %s %s/%s", typ, reason, kind, namespace, name),
		func(ctx context.Context) (bool, string, error) {
			evs, err := e.Events(ctx, namespace, kind, name)
			if err != nil {
				return false, "", err
			}
			seen := []string{}
			for i := range evs {
				if evs[i].Type == typ && (reason == "" || evs[i].Reason == reason) {
					found = &evs[i]
					return true, "", nil
				}
				seen = append(seen, evs[i].Type+"/"+evs[i].Reason)
			}
			return false, fmt.Sprintf("events: %v", seen), nil
		})
	return found, err
}

// Annotate sets (value non-nil) or removes (nil) one annotation with a merge patch, which
// leaves every other annotation alone, as `kubectl annotate` does.
func (e *Env) Annotate(ctx context.Context, obj client.Object, key string, value *string) error {
	return AnnotateWith(ctx, e.Client, obj, key, value)
}

// AnnotateWith is Annotate through another cluster's client (a workload cluster's).
func AnnotateWith(ctx context.Context, c client.Client, obj client.Object, key string, value *string) error {
	var patch []byte
	if value == nil {
		patch = fmt.Appendf(nil, `{"metadata":{"annotations":{%q:null}}}`, key)
	} else {
		patch = fmt.Appendf(nil, `{"metadata":{"annotations":{%q:%q}}}`, key, *value)
	}
	if err := c.Patch(ctx, obj, client.RawPatch(types.MergePatchType, patch)); err != nil {
		return fmt.Errorf("annotating %T %s: %w", obj, client.ObjectKeyFromObject(obj), err)
	}
	return nil
}
