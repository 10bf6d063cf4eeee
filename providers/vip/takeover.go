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
// takeover check lists kube-system's Pods through it, and the fence reads one Lease, because a
// cached read would start an informer on every Pod (Lease) of every workload cluster that takes
// over.
type uncachedClients interface {
	GetUncachedClient(ctx context.Context, cluster client.ObjectKey) (client.Client, error)
}

// takeOver is what Ensure read of kube-vip for a takeover: the KubeVIPTakeOverReady condition and
// what the fence acts on.
type takeOver struct {
	ready metav1.Condition
	// live is the workload cluster's uncached client; nil when kube-vip's Pods could not be read
	// (then nothing below is known).
	live client.Client
	// passed: the check allows the hand-over.
	passed bool
	// podsLeft: at least one kube-vip mirror Pod exists (a refusal other than KubeVIPNotFound
	// still means there are some).
	podsLeft bool
	// nodes are kube-vip's nodes when the check passed: the identities its election uses.
	nodes []string
	// elects: the check passed and kube-vip elects on a Lease, so a fence stops it. A BGP
	// kube-vip without election announces from every node and is never fenced.
	elects bool
}

// kubeVIPTakeOver is lb's spec.backend.<arp|bgp>.takeOver.kubeVIP, nil when lb takes nothing
// over from kube-vip.
func kubeVIPTakeOver(lb *lbv1.LoadBalancer) *lbv1.KubeVIPTakeOver {
	if t := lb.Spec.Backend.TakeOver(); t != nil {
		return t.KubeVIP
	}
	return nil
}

// takeOverField names lb's takeOver field in messages: spec.backend.<kind>.takeOver.
func takeOverField(lb *lbv1.LoadBalancer) string {
	return "spec.backend." + lb.Spec.Backend.Kind() + ".takeOver"
}

// checkTakeOver judges kube-vip for an arp or bgp LoadBalancer with takeOver.kubeVIP, nil for
// every other. It reads kube-vip's mirror Pods in the workload cluster through the same
// connection as the Nodes (the ClusterCache, behind the kubeconfig guard) and judges them with
// kubevip.Check; the condition is Unknown while they cannot be read.
func (b *Backend) checkTakeOver(ctx context.Context, lb *lbv1.LoadBalancer, vip string) *takeOver {
	k := kubeVIPTakeOver(lb)
	if k == nil {
		return nil
	}
	c, pods, err := b.kubeVIPPods(ctx, lb)
	if err != nil {
		return &takeOver{ready: metav1.Condition{Type: lbv1.KubeVIPTakeOverReadyCondition, Status: metav1.ConditionUnknown,
			Reason: lbv1.KubeVIPPodsUnreadableReason, Message: err.Error()}}
	}
	spec := kubevip.Spec{VIP: vip, Backend: lb.Spec.Backend.Kind(), KubeVIP: k}
	if bg := lb.Spec.Backend.BGP; bg != nil {
		spec.Peers = bg.Peers
	}
	found, refusal := kubevip.Check(spec, pods)
	return &takeOver{ready: kubevip.Condition(found, refusal), live: c, passed: refusal == nil,
		podsLeft: refusal == nil || refusal.Reason != lbv1.KubeVIPNotFoundReason, nodes: found.Nodes, elects: found.Elects}
}

// liveWorkload is the workload cluster's uncached client when the ClusterCache offers one, its
// cached client otherwise (a test double, or a future ClusterCache without it).
func (b *Backend) liveWorkload(ctx context.Context, lb *lbv1.LoadBalancer) (client.Client, error) {
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
	return c, nil
}

func (b *Backend) kubeVIPPods(ctx context.Context, lb *lbv1.LoadBalancer) (client.Client, []corev1.Pod, error) {
	c, err := b.liveWorkload(ctx, lb)
	if err != nil {
		return nil, nil, err
	}
	var list corev1.PodList
	if err := c.List(ctx, &list, client.InNamespace(kubeVIPNamespace)); err != nil {
		return nil, nil, fmt.Errorf("listing Pods in %s of workload cluster %s/%s: %w", kubeVIPNamespace, lb.Namespace, lb.Spec.ClusterName, err)
	}
	return c, list.Items, nil
}
