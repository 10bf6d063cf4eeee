//go:build linux

package lifecycle

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"
)

// The kubelet's annotations on a mirror Pod (k8s.io/kubernetes/pkg/kubelet/types).
const (
	configMirrorAnnotation = "kubernetes.io/config.mirror"
	configHashAnnotation   = "kubernetes.io/config.hash"
	configSourceAnnotation = "kubernetes.io/config.source"
)

// readStaticPod reads a static pod manifest from a machine's disk.
func readStaticPod(path string) (*corev1.Pod, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	pod := &corev1.Pod{}
	if err := yaml.UnmarshalStrict(b, pod); err != nil {
		return nil, fmt.Errorf("static pod %s: %w", path, err)
	}
	h := sha256.Sum256(b)
	if pod.Annotations == nil {
		pod.Annotations = map[string]string{}
	}
	pod.Annotations[configHashAnnotation] = hex.EncodeToString(h[:16])
	return pod, nil
}

// mirrorOf is the mirror Pod the kubelet creates for a static pod on node: named
// <pod>-<node>, bound to the node and owned by it, with the kubelet's config annotations.
func mirrorOf(pod *corev1.Pod, node *corev1.Node) *corev1.Pod {
	m := pod.DeepCopy()
	m.Name = pod.Name + "-" + node.Name
	hash := pod.Annotations[configHashAnnotation]
	m.Annotations[configMirrorAnnotation] = hash
	m.Annotations[configSourceAnnotation] = "file"
	m.Spec.NodeName = node.Name
	m.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID,
		Controller: ptr(true)}}
	m.Status = corev1.PodStatus{}
	return m
}

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
