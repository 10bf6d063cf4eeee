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
}

type eventGroup struct {
	warning        bool
	reason, action string
	related        client.Object
	notes          []string
}

func (b *eventBatch) add(related client.Object, warning bool, reason, action, note string) {
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
}
