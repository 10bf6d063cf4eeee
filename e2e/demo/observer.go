package main

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lbv1 "github.com/caplb/caplb/api/v1alpha1"
	"github.com/caplb/caplb/e2e/harness"
)

// observer polls the demo's objects and prints every change a person would want to see, so the
// timeline shows what the controllers did between the demo's steps.
type observer struct {
	// mu serialises polls: the demo polls too, before it reports a step done, so that what
	// led to the outcome is printed before it.
	mu                    sync.Mutex
	env                   *harness.Env
	tl                    *timeline
	ns, cluster, lb, hook string

	clusterEndpoint string
	lbSeen          bool
	lbEndpoint      string
	lbConds         map[string]string
	targets         map[string]lbv1.TargetState
	machines        map[string]machineSnap
	events          map[string]bool
}

type machineSnap struct {
	nodeRef, status, deletingReason       string
	ready, hook, deleting, waiting, drain bool
}

func newObserver(env *harness.Env, tl *timeline, ns, cluster, lb string) *observer {
	return &observer{
		env: env, tl: tl, ns: ns, cluster: cluster, lb: lb, hook: lbv1.PreDrainHookAnnotation(lb),
		lbConds: map[string]string{}, targets: map[string]lbv1.TargetState{},
		machines: map[string]machineSnap{}, events: map[string]bool{},
	}
}

// run polls until ctx ends. Read errors are transient (the control plane is busy) and skipped.
func (o *observer) run(ctx context.Context) {
	t := time.NewTicker(harness.PollInterval)
	defer t.Stop()
	for {
		o.poll(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (o *observer) poll(ctx context.Context) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.pollCluster(ctx)
	o.pollLB(ctx)
	o.pollMachines(ctx)
	o.pollEvents(ctx)
}

func (o *observer) pollCluster(ctx context.Context) {
	c := &clusterv1.Cluster{}
	if err := o.env.Client.Get(ctx, client.ObjectKey{Namespace: o.ns, Name: o.cluster}, c); err != nil {
		return
	}
	if ep := endpointString(c.Spec.ControlPlaneEndpoint.Host, c.Spec.ControlPlaneEndpoint.Port); ep != o.clusterEndpoint {
		o.clusterEndpoint = ep
		o.tl.seen("Cluster %s: spec.controlPlaneEndpoint = %s", o.cluster, ep)
	}
}

func (o *observer) pollLB(ctx context.Context) {
	lb, err := o.env.GetLB(ctx, o.ns, o.lb)
	if err != nil {
		if apierrors.IsNotFound(err) && o.lbSeen {
			o.lbSeen = false
			o.tl.seen("LoadBalancer %s: gone", o.lb)
		}
		return
	}
	o.lbSeen = true
	if ep := endpointString(lb.Status.Endpoint.Host, lb.Status.Endpoint.Port); ep != o.lbEndpoint {
		o.lbEndpoint = ep
		o.tl.seen("LoadBalancer %s: status.endpoint = %s", o.lb, ep)
	}
	for _, typ := range []string{lbv1.EndpointAvailableCondition, lbv1.ClusterEndpointCondition,
		lbv1.TargetsAvailableCondition, lbv1.ReadyCondition, lbv1.PausedCondition} {
		c := harness.Condition(lb, typ)
		if c == nil {
			continue
		}
		if v := string(c.Status) + "/" + c.Reason; v != o.lbConds[typ] {
			o.lbConds[typ] = v
			o.tl.seen("LoadBalancer %s: %s=%s (%s: %s)", o.lb, typ, c.Status, c.Reason, c.Message)
		}
	}
	present := map[string]bool{}
	for _, t := range lb.Status.Targets {
		present[t.Name] = true
		if prev, ok := o.targets[t.Name]; !ok || prev != t.State {
			from := string(prev)
			if !ok {
				from = "new"
			}
			o.targets[t.Name] = t.State
			o.tl.seen("LoadBalancer %s: member %s %s -> %s (active %d/%d)", o.lb, t.Name, from, t.State,
				lb.Status.ActiveTargets, lb.Status.TotalTargets)
		}
	}
	for name := range o.targets {
		if !present[name] {
			delete(o.targets, name)
			o.tl.seen("LoadBalancer %s: member %s left the targets (active %d/%d)", o.lb, name,
				lb.Status.ActiveTargets, lb.Status.TotalTargets)
		}
	}
}

func (o *observer) pollMachines(ctx context.Context) {
	list := &clusterv1.MachineList{}
	if err := o.env.Client.List(ctx, list, client.InNamespace(o.ns)); err != nil {
		return
	}
	present := map[string]bool{}
	for i := range list.Items {
		m := &list.Items[i]
		present[m.Name] = true
		now := snapMachine(m, o.hook)
		prev, known := o.machines[m.Name]
		o.machines[m.Name] = now
		if !known {
			o.tl.seen("Machine %s: created", m.Name)
		}
		o.diffMachine(m.Name, prev, now)
	}
	names := make([]string, 0, len(o.machines))
	for name := range o.machines {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if !present[name] {
			delete(o.machines, name)
			o.tl.seen("Machine %s: gone (CAPI finished deleting it)", name)
		}
	}
}

func snapMachine(m *clusterv1.Machine, hook string) machineSnap {
	s := machineSnap{
		nodeRef:  m.Status.NodeRef.Name,
		ready:    harness.MachineReady(m),
		status:   m.Annotations[lbv1.StatusAnnotation],
		deleting: !m.DeletionTimestamp.IsZero(),
		waiting:  m.Status.Deletion != nil && !m.Status.Deletion.WaitForPreDrainHookStartTime.IsZero(),
		drain:    m.Status.Deletion != nil && !m.Status.Deletion.NodeDrainStartTime.IsZero(),
	}
	_, s.hook = m.Annotations[hook]
	for _, c := range m.Status.Conditions {
		if c.Type == clusterv1.MachineDeletingCondition && c.Status == metav1.ConditionTrue {
			s.deletingReason = c.Reason
		}
	}
	return s
}

func (o *observer) diffMachine(name string, prev, now machineSnap) {
	if now.nodeRef != prev.nodeRef && now.nodeRef != "" {
		o.tl.seen("Machine %s: CAPI set status.nodeRef = Node %s", name, now.nodeRef)
	}
	if now.ready != prev.ready {
		o.tl.seen("Machine %s: Ready=%t", name, now.ready)
	}
	if now.hook != prev.hook {
		if now.hook {
			o.tl.seen("Machine %s: caplb placed its pre-drain hook %s", name, o.hook)
		} else {
			o.tl.seen("Machine %s: caplb released its pre-drain hook", name)
		}
	}
	if now.status != prev.status {
		o.tl.seen("Machine %s: annotation %s=%q", name, lbv1.StatusAnnotation, now.status)
	}
	if now.deleting && !prev.deleting {
		o.tl.seen("Machine %s: deletion requested", name)
	}
	if now.waiting && !prev.waiting {
		o.tl.seen("Machine %s: CAPI is waiting for pre-drain hooks (status.deletion.waitForPreDrainHookStartTime set)", name)
	}
	if now.drain && !prev.drain {
		o.tl.seen("Machine %s: CAPI started draining Node %s (status.deletion.nodeDrainStartTime set)", name, now.nodeRef)
	}
	if now.deletingReason != prev.deletingReason && now.deletingReason != "" {
		o.tl.seen("Machine %s: CAPI Deleting condition: %s", name, now.deletingReason)
	}
}

func (o *observer) pollEvents(ctx context.Context) {
	evs, err := o.env.Events(ctx, o.ns, "LoadBalancer", o.lb)
	if err != nil {
		return
	}
	for _, ev := range evs {
		if o.events[string(ev.UID)] {
			continue
		}
		o.events[string(ev.UID)] = true
		o.tl.seen("event on LoadBalancer %s: %s %s: %s", o.lb, eventType(ev), ev.Reason, ev.Message)
	}
}

func eventType(ev corev1.Event) string {
	if ev.Type == corev1.EventTypeWarning {
		return "Warning"
	}
	return "Normal"
}

func endpointString(host string, port int32) string {
	if host == "" && port == 0 {
		return "(none)"
	}
	return fmt.Sprintf("%s:%d", host, port)
}
