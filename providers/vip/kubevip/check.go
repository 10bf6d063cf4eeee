package kubevip

import (
	"fmt"
	"net/netip"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	lbv1 "github.com/caplb/caplb/api/v1alpha1"
)

// Found is what the check read from kube-vip's mirror Pods when it allows the takeover: what the
// later steps (the fence Lease, the retirement) act on.
type Found struct {
	// LeaseNamespace and LeaseName are the Lease kube-vip elects on.
	LeaseNamespace, LeaseName string
	// LeaseDurationSeconds is kube-vip's vip_leaseduration: how long a holder it stops seeing
	// keeps the VIP at most.
	LeaseDurationSeconds int
	// Pods are the kube-vip mirror Pods' names; Nodes the Nodes they run on; both sorted.
	Pods, Nodes []string
	// ServiceVIPs is true when kube-vip also serves Service VIPs (acknowledged in the spec).
	ServiceVIPs bool
}

// Refusal says why caplb will not take the VIP over: Reason is a KubeVIPTakeOverReady reason
// (lbv1.KubeVIP*Reason); Message names the Pods, the setting and the fix.
type Refusal struct {
	Reason, Message string
}

func (r *Refusal) Error() string { return r.Reason + ": " + r.Message }

// Check judges kube-vip's mirror Pods (kube-system's Pods as the workload API returns them; the
// others are ignored) against the LoadBalancer's VIP and spec.backend.arp.takeOver.kubeVIP. It
// answers the first refusal in a fixed order — no Pod, an unreadable setting, Pods that disagree,
// then each setting — so that the condition is stable across reconciles; nil when kube-vip's
// configuration allows a hand-over.
func Check(vip string, want *lbv1.KubeVIPTakeOver, pods []corev1.Pod) (Found, *Refusal) {
	var found Found
	if want == nil {
		want = &lbv1.KubeVIPTakeOver{}
	}
	var all []*settings
	var others []string
	sorted := append([]corev1.Pod{}, pods...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })
	for i := range sorted {
		p := &sorted[i]
		c := container(p)
		if c == nil {
			continue
		}
		if _, mirror := p.Annotations[corev1.MirrorPodAnnotationKey]; !mirror {
			others = append(others, p.Name)
			continue
		}
		s, err := parse(p, c)
		if err != nil {
			return found, &Refusal{Reason: lbv1.KubeVIPConfigUnreadableReason,
				Message: fmt.Sprintf("kube-vip mirror Pod %s: %v", p.Name, err)}
		}
		all = append(all, s)
	}
	if len(all) == 0 {
		msg := "no kube-vip mirror Pod in kube-system of the workload cluster: the takeover is for kube-vip run as a static pod " +
			"(KubeadmControlPlane files); if kube-vip is gone already, remove spec.backend.arp.takeOver"
		if len(others) > 0 {
			msg = fmt.Sprintf("kube-vip runs in Pods that are not static (%s, a DaemonSet?): taking over on the same nodes is not supported; "+
				"run kube-vip as a static pod on the control-plane nodes, or remove spec.backend.arp.takeOver", strings.Join(others, ", "))
		}
		return found, &Refusal{Reason: lbv1.KubeVIPNotFoundReason, Message: msg}
	}
	first := all[0]
	for _, s := range all[1:] {
		a, b := first.compared(), s.compared()
		for i := range a {
			if a[i] != b[i] {
				return found, &Refusal{Reason: lbv1.KubeVIPPodsDisagreeReason, Message: fmt.Sprintf(
					"kube-vip mirror Pods disagree: %s has %s=%q, %s has %s=%q; finish (or undo) the change of kube-vip's manifest on every "+
						"control-plane node first: which configuration would hand over is not known", first.pod, a[i][0], a[i][1], s.pod, b[i][0], b[i][1])}
			}
		}
	}
	if r := judge(vip, want, first, podNames(all)); r != nil {
		return found, r
	}
	found = Found{LeaseNamespace: first.leaseNamespace, LeaseName: first.leaseName,
		LeaseDurationSeconds: first.leaseDuration, ServiceVIPs: first.services}
	for _, s := range all {
		found.Pods = append(found.Pods, s.pod)
		if s.node != "" {
			found.Nodes = append(found.Nodes, s.node)
		}
	}
	sort.Strings(found.Nodes)
	return found, nil
}

func podNames(all []*settings) string {
	names := make([]string, 0, len(all))
	for _, s := range all {
		names = append(names, s.pod)
	}
	return strings.Join(names, ", ")
}

// judge checks the configuration every mirror Pod shares (s) in a fixed order.
func judge(vip string, want *lbv1.KubeVIPTakeOver, s *settings, pods string) *Refusal {
	refuse := func(reason, format string, a ...any) *Refusal {
		return &Refusal{Reason: reason, Message: "kube-vip (" + pods + "): " + fmt.Sprintf(format, a...)}
	}
	if !s.controlPlane {
		return refuse(lbv1.KubeVIPControlPlaneDisabledReason,
			"%s is not true: this kube-vip serves no control-plane VIP, so there is nothing to take over; remove spec.backend.arp.takeOver", envControlPlane)
	}
	if r := matchAddress(vip, s); r != "" {
		return refuse(lbv1.KubeVIPAddressMismatchReason, "%s", r)
	}
	if s.bgp {
		return refuse(lbv1.KubeVIPBGPEnabledReason,
			"%s is true: kube-vip announces the VIP by BGP, and spec.backend.arp takes over an ARP VIP only; a BGP takeover is not supported yet", envBGP)
	}
	if !s.arp {
		return refuse(lbv1.KubeVIPARPDisabledReason,
			"%s is not true: kube-vip does not answer ARP for the VIP, so spec.backend.arp cannot take it over; set %s \"true\" in kube-vip's manifest first, or remove spec.backend.arp.takeOver", envARP, envARP)
	}
	if !s.leaderElection {
		return refuse(lbv1.KubeVIPLeaderElectionDisabledReason,
			"%s is not true: without Lease election there is no Lease to stop kube-vip with; set %s \"true\" in kube-vip's manifest first", envLeaderElect, envLeaderElect)
	}
	if s.electionType != electionKubernetes {
		return refuse(lbv1.KubeVIPEtcdElectionReason,
			"--leaderElectionType is %q: kube-vip elects through etcd, not a Kubernetes Lease, and caplb cannot stop it; not supported: "+
				"switch kube-vip to Lease election (drop --leaderElectionType) first", s.electionType)
	}
	if s.leaseNamespace != want.EffectiveLeaseNamespace() || s.leaseName != want.EffectiveLeaseName() {
		return refuse(lbv1.KubeVIPLeaseMismatchReason,
			"kube-vip elects on the Lease %s/%s (%s, %s), spec.backend.arp.takeOver.kubeVIP names %s/%s: set its leaseNamespace and leaseName to kube-vip's",
			s.leaseNamespace, s.leaseName, envNamespace, envLeaseName, want.EffectiveLeaseNamespace(), want.EffectiveLeaseName())
	}
	if s.preserve {
		return refuse(lbv1.KubeVIPPreserveOnLeadershipLossReason,
			"%s is true: a kube-vip that loses its Lease keeps the VIP on its interface, so two nodes would hold it; not supported: "+
				"set it to \"false\" (or remove it) in kube-vip's manifest first", envPreserve)
	}
	if s.services && !want.AcknowledgeServiceVIPs {
		return refuse(lbv1.KubeVIPServiceVIPsReason,
			"%s is true: kube-vip also serves Service VIPs, and they stop with it (caplb serves the control-plane VIP only); "+
				"move them to a services-only kube-vip (or another Service load balancer) first, or set "+
				"spec.backend.arp.takeOver.kubeVIP.acknowledgeServiceVIPs: true", envServices)
	}
	return nil
}

// matchAddress says why kube-vip's address is not the LoadBalancer's VIP, or "" when it is.
func matchAddress(vip string, s *settings) string {
	want, err := netip.ParseAddr(vip)
	if err != nil {
		return fmt.Sprintf("the LoadBalancer's VIP %q is not an IP address: set spec.endpoint.host to the Cluster's endpoint address", vip)
	}
	switch {
	case s.address == "":
		return fmt.Sprintf("neither %s nor %s is set: kube-vip's VIP is not known; set %s to %s in kube-vip's manifest", envAddress, envVIPAddress, envAddress, vip)
	case strings.Contains(s.address, ","):
		return fmt.Sprintf("%s=%q names several addresses: spec.backend.arp holds one VIP; not supported", s.addressSource, s.address)
	}
	got, err := netip.ParseAddr(s.address)
	if err != nil {
		return fmt.Sprintf("%s=%q is not an IP address: caplb compares addresses; set it to the IP the name resolves to (%s if that is the Cluster's endpoint)",
			s.addressSource, s.address, vip)
	}
	if got.Unmap() != want.Unmap() {
		return fmt.Sprintf("%s=%q is not the LoadBalancer's VIP %s (spec.endpoint.host): the takeover keeps the address kube-vip serves; "+
			"set spec.endpoint.host to %s on a new LoadBalancer (it cannot change), if that is the Cluster's endpoint", s.addressSource, s.address, vip, s.address)
	}
	return ""
}

// Condition is KubeVIPTakeOverReady for Check's answer.
func Condition(found Found, r *Refusal) metav1.Condition {
	if r != nil {
		return metav1.Condition{Type: lbv1.KubeVIPTakeOverReadyCondition, Status: metav1.ConditionFalse,
			Reason: r.Reason, Message: r.Message}
	}
	msg := fmt.Sprintf("kube-vip serves the VIP by ARP with Lease election on %s/%s from %d node(s): %s",
		found.LeaseNamespace, found.LeaseName, len(found.Nodes), strings.Join(found.Nodes, ", "))
	if found.ServiceVIPs {
		msg += "; its Service VIPs stop with it (acknowledged)"
	}
	return metav1.Condition{Type: lbv1.KubeVIPTakeOverReadyCondition, Status: metav1.ConditionTrue,
		Reason: lbv1.KubeVIPTakeOverReadyReason, Message: msg}
}
