//go:build linux

package lifecycle

import (
	"context"
	"fmt"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// runKCPCleanup plays KubeadmControlPlane's pre-terminate step for a real control plane until
// ctx ends: a deleting Machine whose only pre-terminate hook left is KCP's, and on which the
// Machine controller waits for it (drained, caplb's pre-drain hook long released), loses its
// etcd member — through KCP's own code and etcd client, by port-forward through the endpoint
// (kubelet.go) —; then KCP's hook goes and the Machine controller deletes the infrastructure.
// Errors go to report and are retried.
func (l *Lab) runKCPCleanup(ctx context.Context, report func(error)) {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	done := map[string]bool{}
	kcp := l.newKCPEtcd()
	for {
		if err := l.kcpCleanupOnce(ctx, kcp, done); err != nil && ctx.Err() == nil {
			report(err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (l *Lab) kcpCleanupOnce(ctx context.Context, kcp *kcpEtcd, done map[string]bool) error {
	ms, err := l.Machines(ctx)
	if err != nil {
		return err
	}
	for i := range ms {
		m := &ms[i]
		if m.DeletionTimestamp == nil {
			continue
		}
		if _, ok := m.Annotations[kcpCleanupHook]; !ok || otherPreTerminateHooks(m) || !waitingForPreTerminate(m) {
			continue
		}
		if !done[m.Name] {
			if n := l.Node(m.Name); n != nil && n.cp != nil {
				if err := kcp.removeMember(ctx, n); err != nil {
					return fmt.Errorf("removing %s's etcd member: %w", m.Name, err)
				}
			}
			done[m.Name] = true
		}
		patch := client.MergeFrom(m.DeepCopy())
		delete(m.Annotations, kcpCleanupHook)
		if err := l.Mgmt.Client.Patch(ctx, m, patch); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("releasing KCP's pre-terminate hook on %s: %w", m.Name, err)
		}
	}
	return nil
}

// otherPreTerminateHooks: KCP's hook runs last (KCP waits for the others, e.g. caplb's optional
// one, so that the member leaves while its etcd still runs).
func otherPreTerminateHooks(m *clusterv1.Machine) bool {
	for k := range m.Annotations {
		if strings.HasPrefix(k, clusterv1.PreTerminateDeleteHookAnnotationPrefix) && k != kcpCleanupHook {
			return true
		}
	}
	return false
}

func waitingForPreTerminate(m *clusterv1.Machine) bool {
	for _, c := range m.Status.Conditions {
		if c.Type == clusterv1.MachineDeletingCondition {
			return c.Status == metav1.ConditionTrue && c.Reason == clusterv1.MachineDeletingWaitingForPreTerminateHookReason
		}
	}
	return false
}

// reportKCP logs an error of the KCP step to the lab's kcp.log (the step retries).
func (l *Lab) reportKCP(err error) { l.net.Logf("kcp", "%v", err) }
