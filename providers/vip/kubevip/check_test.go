package kubevip

import (
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	lbv1 "github.com/caplb/caplb/api/v1alpha1"
)

const vip = "10.0.0.10"

// capvEnv is the env of CAPV's kube-vip static pod (internal/kubevip/kube-vip.yaml), with
// ${CONTROL_PLANE_ENDPOINT_IP} filled in: ARP, Lease election on kube-system/plndr-cp-lock, and
// svc_enable "true".
func capvEnv() []corev1.EnvVar {
	return []corev1.EnvVar{
		{Name: "vip_arp", Value: "true"},
		{Name: "port", Value: "6443"},
		{Name: "vip_interface", Value: ""},
		{Name: "vip_cidr", Value: "32"},
		{Name: "cp_enable", Value: "true"},
		{Name: "cp_namespace", Value: "kube-system"},
		{Name: "vip_ddns", Value: "false"},
		{Name: "svc_enable", Value: "true"},
		{Name: "svc_leasename", Value: "plndr-svcs-lock"},
		{Name: "svc_election", Value: "true"},
		{Name: "vip_leaderelection", Value: "true"},
		{Name: "vip_leasename", Value: "plndr-cp-lock"},
		{Name: "vip_leaseduration", Value: "15"},
		{Name: "vip_renewdeadline", Value: "10"},
		{Name: "vip_retryperiod", Value: "2"},
		{Name: "address", Value: vip},
		{Name: "prometheus_server", Value: ":2112"},
	}
}

// mirrorPod is the Pod the kubelet mirrors for kube-vip's static pod on node, as the API returns
// it: kube-system/kube-vip-<node>, the mirror annotation, owned by the Node.
func mirrorPod(node string, env []corev1.EnvVar, args ...string) corev1.Pod {
	if len(args) == 0 {
		args = []string{"manager"}
	}
	return corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: "kube-system", Name: "kube-vip-" + node,
			Annotations: map[string]string{
				corev1.MirrorPodAnnotationKey: "2f1bd5c3d6a1b5e1c0f3e4a5b6c7d8e9",
				"kubernetes.io/config.hash":   "2f1bd5c3d6a1b5e1c0f3e4a5b6c7d8e9",
				"kubernetes.io/config.source": "file",
			},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: node, UID: types.UID("uid-" + node)}},
		},
		Spec: corev1.PodSpec{
			NodeName:    node,
			HostNetwork: true,
			Containers: []corev1.Container{{
				Name: "kube-vip", Image: "ghcr.io/kube-vip/kube-vip:v0.8.7", Args: args, Env: env,
				SecurityContext: &corev1.SecurityContext{Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"NET_ADMIN", "NET_RAW"}}},
				VolumeMounts:    []corev1.VolumeMount{{Name: "kubeconfig", MountPath: "/etc/kubernetes/admin.conf"}},
			}},
		},
	}
}

// otherMirrorPod is another control-plane static pod in kube-system, which the check ignores.
func otherMirrorPod(name, node string) corev1.Pod {
	p := mirrorPod(node, nil)
	p.Name = name + "-" + node
	p.Spec.Containers = []corev1.Container{{Name: name, Image: "registry.k8s.io/" + name + ":v1.33.0"}}
	return p
}

// withEnv returns CAPV's env with name set to value ("" removes it).
func withEnv(name, value string) []corev1.EnvVar {
	var out []corev1.EnvVar
	found := false
	for _, e := range capvEnv() {
		if e.Name == name {
			found = true
			if value == "" {
				continue
			}
			e.Value = value
		}
		out = append(out, e)
	}
	if !found && value != "" {
		out = append(out, corev1.EnvVar{Name: name, Value: value})
	}
	return out
}

func three(env []corev1.EnvVar, args ...string) []corev1.Pod {
	return []corev1.Pod{
		otherMirrorPod("kube-apiserver", "cp-b"), mirrorPod("cp-c", env, args...),
		mirrorPod("cp-a", env, args...), otherMirrorPod("etcd", "cp-a"), mirrorPod("cp-b", env, args...),
	}
}

func ack() *lbv1.KubeVIPTakeOver { return &lbv1.KubeVIPTakeOver{AcknowledgeServiceVIPs: true} }

func TestCheck(t *testing.T) {
	flagsOnly := []corev1.EnvVar{{Name: "vip_interface", Value: "eth0"}}
	for _, tc := range []struct {
		name string
		vip  string
		want *lbv1.KubeVIPTakeOver
		pods []corev1.Pod
		// reason is "" when the takeover is allowed; msg are substrings of the refusal's message.
		reason string
		msg    []string
	}{
		{"CAPV's template, Service VIPs acknowledged", vip, ack(), three(capvEnv()), "", nil},
		{"CAPV's template: svc_enable without acknowledgement", vip, &lbv1.KubeVIPTakeOver{}, three(capvEnv()),
			lbv1.KubeVIPServiceVIPsReason, []string{"kube-vip (kube-vip-cp-a, kube-vip-cp-b, kube-vip-cp-c)", "svc_enable is true",
				"services-only kube-vip", "spec.backend.arp.takeOver.kubeVIP.acknowledgeServiceVIPs: true"}},
		{"no Service VIPs, nothing to acknowledge", vip, &lbv1.KubeVIPTakeOver{}, three(withEnv("svc_enable", "false")), "", nil},
		{"another VIP", "10.0.0.99", ack(), three(capvEnv()),
			lbv1.KubeVIPAddressMismatchReason, []string{`address="10.0.0.10" is not the LoadBalancer's VIP 10.0.0.99 (spec.endpoint.host)`}},
		{"legacy vip_address", vip, ack(), three(append(withEnv("address", ""), corev1.EnvVar{Name: "vip_address", Value: vip})), "", nil},
		{"address wins over vip_address", vip, ack(), three(append(withEnv("address", "10.0.0.11"), corev1.EnvVar{Name: "vip_address", Value: vip})),
			lbv1.KubeVIPAddressMismatchReason, []string{`address="10.0.0.11"`}},
		{"address a DNS name", vip, ack(), three(withEnv("address", "api.example.com")),
			lbv1.KubeVIPAddressMismatchReason, []string{`address="api.example.com" is not an IP address`}},
		{"no address", vip, ack(), three(withEnv("address", "")),
			lbv1.KubeVIPAddressMismatchReason, []string{"neither address nor vip_address is set"}},
		{"dual-stack addresses", vip, ack(), three(withEnv("address", vip+",fd00::10")),
			lbv1.KubeVIPAddressMismatchReason, []string{"names several addresses"}},
		{"IPv6 VIP written differently", "fd00::10", ack(), three(withEnv("address", "fd00:0:0::10")), "", nil},
		{"ARP off", vip, ack(), three(withEnv("vip_arp", "false")),
			lbv1.KubeVIPARPDisabledReason, []string{"vip_arp is not true", `set vip_arp "true"`}},
		{"ARP unset (kube-vip's default is off)", vip, ack(), three(withEnv("vip_arp", "")),
			lbv1.KubeVIPARPDisabledReason, []string{"vip_arp is not true"}},
		{"Lease election off", vip, ack(), three(withEnv("vip_leaderelection", "false")),
			lbv1.KubeVIPLeaderElectionDisabledReason, []string{"vip_leaderelection is not true", "no Lease"}},
		{"etcd election", vip, ack(), three(capvEnv(), "manager", "--leaderElectionType=etcd", "--etcdEndpoints", "https://127.0.0.1:2379"),
			lbv1.KubeVIPEtcdElectionReason, []string{`--leaderElectionType is "etcd"`, "not supported"}},
		{"etcd election, flag and value apart", vip, ack(), three(capvEnv(), "manager", "--leaderElectionType", "etcd"),
			lbv1.KubeVIPEtcdElectionReason, nil},
		{"preserve on leadership loss", vip, ack(), three(withEnv("vip_preserve_on_leadership_loss", "true")),
			lbv1.KubeVIPPreserveOnLeadershipLossReason, []string{"vip_preserve_on_leadership_loss is true", "two nodes would hold it"}},
		{"preserve explicitly false", vip, ack(), three(withEnv("vip_preserve_on_leadership_loss", "false")), "", nil},
		{"another Lease name", vip, ack(), three(withEnv("vip_leasename", "my-cp-lock")),
			lbv1.KubeVIPLeaseMismatchReason, []string{"kube-vip elects on the Lease kube-system/my-cp-lock",
				"spec.backend.arp.takeOver.kubeVIP names kube-system/plndr-cp-lock", "set its leaseNamespace and leaseName"}},
		{"another Lease name, named in the spec", vip, &lbv1.KubeVIPTakeOver{LeaseName: "my-cp-lock", AcknowledgeServiceVIPs: true},
			three(withEnv("vip_leasename", "my-cp-lock")), "", nil},
		{"another Lease namespace", vip, ack(), three(withEnv("cp_namespace", "kube-vip")),
			lbv1.KubeVIPLeaseMismatchReason, []string{"kube-vip/plndr-cp-lock"}},
		{"namespace/name in the lease name", vip, &lbv1.KubeVIPTakeOver{LeaseNamespace: "vip", AcknowledgeServiceVIPs: true},
			three(withEnv("vip_leasename", "vip/plndr-cp-lock")), "", nil},
		{"BGP", vip, ack(), three(withEnv("bgp_enable", "true")),
			lbv1.KubeVIPBGPEnabledReason, []string{"bgp_enable is true", "spec.backend.arp takes over an ARP VIP only",
				"a bgp LoadBalancer instead (spec.backend.bgp.takeOver)"}},
		{"BGP settings of an ARP kube-vip are not read", vip, ack(), three(append(withEnv("bgp_peers", "not:a:peer:list"),
			corev1.EnvVar{Name: "annotation", Value: "metal.equinix.com"})), "", nil},
		{"control plane off", vip, ack(), three(withEnv("cp_enable", "false")),
			lbv1.KubeVIPControlPlaneDisabledReason, []string{"cp_enable is not true", "remove spec.backend.arp.takeOver"}},
		{"no Pod at all", vip, ack(), nil, lbv1.KubeVIPNotFoundReason, []string{"no kube-vip mirror Pod"}},
		{"only other static pods", vip, ack(), []corev1.Pod{otherMirrorPod("etcd", "cp-a"), otherMirrorPod("kube-apiserver", "cp-a")},
			lbv1.KubeVIPNotFoundReason, []string{"no kube-vip mirror Pod"}},
		{"a DaemonSet's Pods", vip, ack(), func() []corev1.Pod {
			p := mirrorPod("cp-a", capvEnv())
			p.Name, p.Annotations = "kube-vip-ds-x7k2p", nil
			return []corev1.Pod{p}
		}(), lbv1.KubeVIPNotFoundReason, []string{"kube-vip-ds-x7k2p", "not static", "not supported"}},
		{"Pods disagree", vip, ack(), []corev1.Pod{mirrorPod("cp-a", capvEnv()), mirrorPod("cp-b", withEnv("vip_arp", "false"))},
			lbv1.KubeVIPPodsDisagreeReason, []string{`kube-vip-cp-a has vip_arp="true", kube-vip-cp-b has vip_arp="false"`}},
		{"Pods disagree on the Lease duration only", vip, ack(), []corev1.Pod{mirrorPod("cp-a", capvEnv()), mirrorPod("cp-b", withEnv("vip_leaseduration", "30"))},
			"", nil},
		{"address from a ConfigMap", vip, ack(), three(append(withEnv("address", ""), corev1.EnvVar{Name: "address",
			ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{Key: "vip"}}})),
			lbv1.KubeVIPConfigUnreadableReason, []string{"kube-vip mirror Pod kube-vip-cp-a", "env address is set with valueFrom"}},
		{"a boolean kube-vip cannot parse", vip, ack(), three(withEnv("vip_arp", "yes")),
			lbv1.KubeVIPConfigUnreadableReason, []string{`vip_arp="yes" is not a boolean`}},
		{"a configuration file", vip, ack(), three(withEnv("config_file", "/etc/kube-vip/config.yaml")),
			lbv1.KubeVIPConfigUnreadableReason, []string{"env config_file names a configuration file on the node"}},
		{"flags only", vip, ack(), three(flagsOnly, "manager", "--controlplane", "--arp", "--leaderElection", "--address", vip, "-n", "kube-system"), "", nil},
		{"flags only, Lease name by flag", vip, ack(), three(flagsOnly, "manager", "--controlplane", "--arp=true", "--leaderElection",
			"--address="+vip, "--leaseName", "other"), lbv1.KubeVIPLeaseMismatchReason, []string{"kube-system/other"}},
		{"the env overrides a flag, as in kube-vip", vip, ack(), three(withEnv("vip_arp", "false"), "manager", "--arp"),
			lbv1.KubeVIPARPDisabledReason, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			found, r := Check(Spec{VIP: tc.vip, Backend: lbv1.BackendARP, KubeVIP: tc.want}, tc.pods)
			if tc.reason == "" {
				g.Expect(r).To(BeNil())
				g.Expect(found.Elects).To(BeTrue(), "an ARP kube-vip always elects")
				g.Expect(found.Pods).To(Equal([]string{"kube-vip-cp-a", "kube-vip-cp-b", "kube-vip-cp-c"}[:len(found.Pods)]))
				g.Expect(found.Nodes).NotTo(BeEmpty())
				g.Expect(found.LeaseName).To(Equal(tc.want.EffectiveLeaseName()))
				g.Expect(found.LeaseNamespace).To(Equal(tc.want.EffectiveLeaseNamespace()))
				return
			}
			g.Expect(r).NotTo(BeNil(), "the takeover was allowed")
			g.Expect(r.Reason).To(Equal(tc.reason), r.Message)
			for _, m := range tc.msg {
				g.Expect(r.Message).To(ContainSubstring(m))
			}
			g.Expect(found).To(BeZero(), "a refusal reports nothing found")
		})
	}
}

// What an allowed takeover reports: the Lease, its duration, the Pods and Nodes in order, and
// whether Service VIPs go; and the condition it becomes.
func TestCheckFound(t *testing.T) {
	g := NewWithT(t)
	found, r := Check(Spec{VIP: vip, Backend: lbv1.BackendARP, KubeVIP: ack()}, three(withEnv("vip_leaseduration", "20")))
	g.Expect(r).To(BeNil())
	g.Expect(found).To(Equal(Found{Backend: lbv1.BackendARP, Elects: true, LeaseNamespace: "kube-system", LeaseName: "plndr-cp-lock", LeaseDurationSeconds: 20,
		Pods: []string{"kube-vip-cp-a", "kube-vip-cp-b", "kube-vip-cp-c"}, Nodes: []string{"cp-a", "cp-b", "cp-c"}, ServiceVIPs: true}))

	c := Condition(found, nil)
	g.Expect(c.Type).To(Equal(lbv1.KubeVIPTakeOverReadyCondition))
	g.Expect(c.Status).To(Equal(metav1.ConditionTrue))
	g.Expect(c.Reason).To(Equal(lbv1.KubeVIPTakeOverReadyReason))
	g.Expect(c.Message).To(ContainSubstring("kube-system/plndr-cp-lock from 3 node(s): cp-a, cp-b, cp-c"))
	g.Expect(c.Message).To(ContainSubstring("Service VIPs stop with it"))

	_, r = Check(Spec{VIP: vip, Backend: lbv1.BackendARP, KubeVIP: &lbv1.KubeVIPTakeOver{}}, three(capvEnv()))
	c = Condition(Found{}, r)
	g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
	g.Expect(c.Reason).To(Equal(lbv1.KubeVIPServiceVIPsReason))
	g.Expect(c.Message).To(Equal(r.Message))
}

// The kube-vip container is found by name or by image, whatever the other containers are.
func TestContainer(t *testing.T) {
	g := NewWithT(t)
	p := mirrorPod("cp-a", capvEnv())
	p.Spec.Containers[0].Name = "vip"
	p.Spec.Containers[0].Image = "registry.example.com/mirror/kube-vip@sha256:0123"
	p.Spec.Containers = append([]corev1.Container{{Name: "sidecar", Image: "busybox"}}, p.Spec.Containers...)
	g.Expect(container(&p)).To(HaveField("Name", "vip"))
	p.Spec.Containers[1].Image = "plndr/kube-vip:0.3.1"
	g.Expect(container(&p)).To(HaveField("Name", "vip"))
	p.Spec.Containers[1].Image = "ghcr.io/kube-vip/kube-vip-cloud-provider:v0.0.10"
	g.Expect(container(&p)).To(BeNil())
}
