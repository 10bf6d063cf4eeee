package controllers

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lbv1 "github.com/caplb/caplb/api/v1alpha1"
)

// event records an event regarding the LoadBalancer, related to obj (a member, the Cluster, the
// control plane) when one is involved. Event notes are capped by the API at 1 kB.
func (r *LoadBalancerReconciler) event(lb *lbv1.LoadBalancer, related client.Object, warning bool, reason, action, format string, args ...any) {
	if r.Recorder == nil {
		return
	}
	typ := corev1.EventTypeNormal
	if warning {
		typ = corev1.EventTypeWarning
	}
	note := fmt.Sprintf(format, args...)
	if len(note) > 1000 {
		note = note[:997] + "..."
	}
	var rel runtime.Object
	if related != nil {
		rel = related
	}
	r.Recorder.Eventf(lb, rel, typ, reason, action, "%s", note)
}

// eventBatch collects events of one reconcile so that several members changing the same way
// produce one event (one API write) instead of one each: creating a LoadBalancer for three
// Machines then costs one TargetActive event, not six.
type eventBatch struct {
	groups []*eventGroup
	// onMembers are the same events regarding the member itself, so that `kubectl describe
	// machine` (or node) tells the member's story. Only transitions a person looking at one
	// member cares about go there (see memberEventReasons); a member joining does not, which keeps
	// creating thousands of LoadBalancers from doubling the event writes.
	onMembers []memberEvent
}

type memberEvent struct {
	obj            client.Object
	warning        bool
	reason, action string
	note           string
}

// memberEventReasons are the reasons also recorded regarding the member.
var memberEventReasons = map[string]bool{
	lbv1.EventTargetLeftRotation: true, lbv1.EventTargetDisabling: true, lbv1.EventTargetDisabled: true,
	lbv1.EventTargetEnabled: true, lbv1.EventTargetRemoving: true, lbv1.EventTargetRemoved: true,
	lbv1.EventTargetReleased: true, lbv1.EventQuiesceTimeout: true,
}

type eventGroup struct {
	warning        bool
	reason, action string
	related        client.Object
	notes          []string
}

func (b *eventBatch) add(related client.Object, warning bool, reason, action, note string) {
	if related != nil && memberEventReasons[reason] {
		b.onMembers = append(b.onMembers, memberEvent{obj: related, warning: warning, reason: reason, action: action, note: note})
	}
	for _, g := range b.groups {
		if g.reason == reason && g.warning == warning {
			g.notes = append(g.notes, note)
			g.related = nil
			return
		}
	}
	b.groups = append(b.groups, &eventGroup{warning: warning, reason: reason, action: action, related: related, notes: []string{note}})
}

// flush records the batch's events.
func (r *LoadBalancerReconciler) flush(lb *lbv1.LoadBalancer, b *eventBatch) {
	for _, g := range b.groups {
		r.event(lb, g.related, g.warning, g.reason, g.action, "%s", strings.Join(g.notes, "; "))
	}
	if r.Recorder == nil {
		return
	}
	for _, e := range b.onMembers {
		typ := corev1.EventTypeNormal
		if e.warning {
			typ = corev1.EventTypeWarning
		}
		r.Recorder.Eventf(e.obj, lb, typ, e.reason, e.action, "LoadBalancer %s: %s", lb.Name, e.note)
	}
}
