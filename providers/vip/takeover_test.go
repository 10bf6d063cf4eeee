package vip

import (
	"context"
	"errors"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	lbv1 "github.com/caplb/caplb/api/v1alpha1"
)

// kubeVIPMirrorPod is CAPV's kube-vip static pod as the kubelet mirrors it on node, in ns.
func kubeVIPMirrorPod(ns, node, address string) *corev1.Pod {
	env := []corev1.EnvVar{}
	for _, kv := range [][2]string{{"vip_arp", "true"}, {"port", "6443"}, {"cp_enable", "true"}, {"cp_namespace", "kube-system"},
		{"svc_enable", "true"}, {"svc_leasename", "plndr-svcs-lock"}, {"vip_leaderelection", "true"}, {"vip_leasename", "plndr-cp-lock"},
		{"vip_leaseduration", "15"}, {"vip_renewdeadline", "10"}, {"vip_retryperiod", "2"}, {"address", address}} {
		env = append(env, corev1.EnvVar{Name: kv[0], Value: kv[1]})
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "kube-vip-" + node,
			Annotations: map[string]string{corev1.MirrorPodAnnotationKey: "hash", "kubernetes.io/config.source": "file"}},
		Spec: corev1.PodSpec{NodeName: node, HostNetwork: true, Containers: []corev1.Container{{
			Name: "kube-vip", Image: "ghcr.io/kube-vip/kube-vip:v0.8.7", Args: []string{"manager"}, Env: env}}},
	}
}

// liveOnly serves a workload client only through GetUncachedClient, as a ClusterCache whose
// cached client must not be used for Pods.
type liveOnly struct{ c client.Client }

func (l liveOnly) GetClient(context.Context, client.ObjectKey) (client.Client, error) {
	return nil, errors.New("the cached client must not list Pods")
}

func (l liveOnly) GetUncachedClient(context.Context, client.ObjectKey) (client.Client, error) {
	return l.c, nil
}

type unreachable struct{}

func (unreachable) GetClient(context.Context, client.ObjectKey) (client.Client, error) {
	return nil, errors.New("cluster is not connected")
}

// Ensure reads kube-vip's mirror Pods in kube-system of the workload cluster and reports
// KubeVIPTakeOverReady; Pods of other namespaces do not count.
func TestEnsureReportsKubeVIPTakeOver(t *testing.T) {
	takeOver := func(ack bool) *lbv1.LoadBalancer {
		lb := arpLB()
		lb.Spec.Backend.ARP.TakeOver = &lbv1.TakeOver{KubeVIP: &lbv1.KubeVIPTakeOver{AcknowledgeServiceVIPs: ack}}
		return lb
	}
	for _, tc := range []struct {
		name     string
		lb       *lbv1.LoadBalancer
		workload func(client.Client) WorkloadClients
		status   metav1.ConditionStatus
		reason   string
		msg      string
	}{
		{"acknowledged", takeOver(true), func(c client.Client) WorkloadClients { return liveOnly{c} },
			metav1.ConditionTrue, lbv1.KubeVIPTakeOverReadyReason, "kube-system/plndr-cp-lock from 2 node(s): cp-a, cp-b"},
		{"Service VIPs not acknowledged", takeOver(false), func(c client.Client) WorkloadClients { return sameCluster{c} },
			metav1.ConditionFalse, lbv1.KubeVIPServiceVIPsReason, "svc_enable is true"},
		{"workload cluster unreachable", takeOver(true), func(client.Client) WorkloadClients { return unreachable{} },
			metav1.ConditionUnknown, lbv1.KubeVIPPodsUnreadableReason, "workload cluster ns/c: cluster is not connected"},
		{"no takeover", arpLB(), func(c client.Client) WorkloadClients { return sameCluster{c} }, "", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			c := fake.NewClientBuilder().WithScheme(newScheme(t)).WithObjects(tc.lb,
				kubeVIPMirrorPod("kube-system", "cp-b", "192.0.2.10"), kubeVIPMirrorPod("kube-system", "cp-a", "192.0.2.10"),
				kubeVIPMirrorPod("default", "cp-a", "192.0.2.99")).Build()
			b := NewARP(Options{Client: c, Workload: tc.workload(c), AgentImage: "img"})
			st, err := b.Ensure(context.Background(), tc.lb, nil)
			g.Expect(err).NotTo(HaveOccurred())
			got := meta.FindStatusCondition(st.Conditions, lbv1.KubeVIPTakeOverReadyCondition)
			if tc.status == "" {
				g.Expect(got).To(BeNil())
				return
			}
			g.Expect(got).NotTo(BeNil())
			g.Expect(got.Status).To(Equal(tc.status))
			g.Expect(got.Reason).To(Equal(tc.reason))
			g.Expect(got.Message).To(ContainSubstring(tc.msg))
		})
	}
}
