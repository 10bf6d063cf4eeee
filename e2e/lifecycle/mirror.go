//go:build linux

package lifecycle

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// collectPodsOf deletes the Pods bound to a machine that is gone, as kube-controller-manager's
// pod garbage collector does once its Node is deleted (the lab runs no controller manager),
// retrying for up to a minute while the workload API server cannot be reached.
func (l *Lab) collectPodsOf(node string) {
	if l.WorkloadClient == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for ctx.Err() == nil {
		pods := &corev1.PodList{}
		err := l.WorkloadClient.List(ctx, pods, client.InNamespace("kube-system"))
		if err == nil {
			left := 0
			for i := range pods.Items {
				if p := &pods.Items[i]; p.Spec.NodeName == node {
					left++
					// Forcefully, as the pod GC does: no kubelet is left to finish a graceful deletion.
					if derr := l.WorkloadClient.Delete(ctx, p, client.GracePeriodSeconds(0)); client.IgnoreNotFound(derr) != nil {
						err = derr
					} else {
						l.net.Logf("podgc", "%s: deleted Pod %s/%s", node, p.Namespace, p.Name)
					}
				}
			}
			if left == 0 {
				return
			}
		}
		if err != nil {
			l.net.Logf("podgc", "%s: %v", node, err)
		}
		time.Sleep(time.Second)
	}
}
