package vip

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lbv1 "github.com/caplb/caplb/api/v1alpha1"
	"github.com/caplb/caplb/providers/vip/kubevip"
)

// kubeVIPNamespace is where kube-vip's static pod manifests put it (CAPV's, kube-vip's own
// generator), and so where the kubelet creates its mirror Pods.
const kubeVIPNamespace = "kube-system"

// uncachedClients is what CAPI's ClusterCache offers besides GetClient: a live client. The
// takeover check lists kube-system's Pods through it, because a cached List would start an
// informer on every Pod of every workload cluster that takes over.
type uncachedClients interface {
	GetUncachedClient(ctx context.Context, cluster client.ObjectKey) (client.Client, error)
}

// takeOverCondition is KubeVIPTakeOverReady for an arp LoadBalancer with
// spec.backend.arp.takeOver.kubeVIP, nil for every other. It reads kube-vip's mirror Pods in the
// workload cluster through the same connection as the Nodes (the ClusterCache, behind the
// kubeconfig guard) and judges them with kubevip.Check; Unknown while they cannot be read.
func (b *Backend) takeOverCondition(ctx context.Context, lb *lbv1.LoadBalancer, vip string) *metav1.Condition {
	a := lb.Spec.Backend.ARP
	if a == nil || a.TakeOver == nil || a.TakeOver.KubeVIP == nil {
		return nil
	}
	pods, err := b.kubeVIPPods(ctx, lb)
	if err != nil {
		return &metav1.Condition{Type: lbv1.KubeVIPTakeOverReadyCondition, Status: metav1.ConditionUnknown,
			Reason: lbv1.KubeVIPPodsUnreadableReason, Message: err.Error()}
	}
	c := kubevip.Condition(kubevip.Check(vip, a.TakeOver.KubeVIP, pods))
	return &c
}

func (b *Backend) kubeVIPPods(ctx context.Context, lb *lbv1.LoadBalancer) ([]corev1.Pod, error) {
	if b.opts.Workload == nil || lb.Spec.ClusterName == "" {
		return nil, fmt.Errorf("no workload cluster to read kube-vip's Pods in")
	}
	key := client.ObjectKey{Namespace: lb.Namespace, Name: lb.Spec.ClusterName}
	var (
		c   client.Client
		err error
	)
	if u, ok := b.opts.Workload.(uncachedClients); ok {
		c, err = u.GetUncachedClient(ctx, key)
	} else {
		c, err = b.opts.Workload.GetClient(ctx, key)
	}
	if err != nil {
		return nil, fmt.Errorf("workload cluster %s/%s: %w", lb.Namespace, lb.Spec.ClusterName, err)
	}
	var list corev1.PodList
	if err := c.List(ctx, &list, client.InNamespace(kubeVIPNamespace)); err != nil {
		return nil, fmt.Errorf("listing Pods in %s of workload cluster %s/%s: %w", kubeVIPNamespace, lb.Namespace, lb.Spec.ClusterName, err)
	}
	return list.Items, nil
}
