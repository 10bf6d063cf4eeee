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

// Spec is what the LoadBalancer asks of a takeover from kube-vip.
type Spec struct {
	// VIP is the LoadBalancer's address (spec.endpoint.host).
	VIP string
	// Backend is the LoadBalancer's kind, lbv1.BackendARP or lbv1.BackendBGP: the mode kube-vip
	// must run in.
	Backend string
	// KubeVIP is spec.backend.<kind>.takeOver.kubeVIP; nil reads as its defaults.
	KubeVIP *lbv1.KubeVIPTakeOver
	// Peers are spec.backend.bgp.peers (bgp only): every router kube-vip announces to must be one.
	Peers []lbv1.BGPPeer
}

// field is the spec field the takeover is set in, for messages.
func (s Spec) field() string { return "spec.backend." + s.Backend + ".takeOver" }

// Found is what the check read from kube-vip's mirror Pods when it allows the takeover: what the
// later steps (the fence Lease, the retirement) act on.
type Found struct {
	// Backend is the mode kube-vip serves the VIP in (Spec.Backend).
	Backend string
	// Elects: kube-vip elects one announcer on a Kubernetes Lease, so the fence stops it. Always
	// true for ARP; false for a BGP kube-vip that announces from every node.
	Elects bool
	// LeaseNamespace and LeaseName are the Lease kube-vip elects on ("" when it does not).
	LeaseNamespace, LeaseName string
	// LeaseDurationSeconds is kube-vip's vip_leaseduration: how long a holder it stops seeing
	// keeps the VIP at most.
	LeaseDurationSeconds int
	// Pods are the kube-vip mirror Pods' names; Nodes the Nodes they run on; both sorted.
	Pods, Nodes []string
	// ServiceVIPs is true when kube-vip also serves Service VIPs (acknowledged in the spec).
	ServiceVIPs bool
	// Peers are the routers a BGP kube-vip announces to, as "address (AS n)".
	Peers []string
}

// Refusal says why caplb will not take the VIP over: Reason is a KubeVIPTakeOverReady reason
// (lbv1.KubeVIP*Reason); Message names the Pods, the setting and the fix.
type Refusal struct {
	Reason, Message string
}

func (r *Refusal) Error() string { return r.Reason + ": " + r.Message }

// Check judges kube-vip's mirror Pods (kube-system's Pods as the workload API returns them; the
// others are ignored) against the LoadBalancer's spec. It answers the first refusal in a fixed
// order — no Pod, an unreadable setting, Pods that disagree, then each setting — so that the
// condition is stable across reconciles; nil when kube-vip's configuration allows a hand-over.
func Check(spec Spec, pods []corev1.Pod) (Found, *Refusal) {
	var found Found
	if spec.KubeVIP == nil {
		spec.KubeVIP = &lbv1.KubeVIPTakeOver{}
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
			"(KubeadmControlPlane files); if kube-vip is gone already, remove " + spec.field()
		if len(others) > 0 {
			msg = fmt.Sprintf("kube-vip runs in Pods that are not static (%s, a DaemonSet?): taking over on the same nodes is not supported; "+
				"run kube-vip as a static pod on the control-plane nodes, or remove %s", strings.Join(others, ", "), spec.field())
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
	if r := judge(spec, first, podNames(all)); r != nil {
		return found, r
	}
	found = Found{Backend: spec.Backend, Elects: first.leaderElection, LeaseDurationSeconds: first.leaseDuration, ServiceVIPs: first.services}
	if found.Elects {
		found.LeaseNamespace, found.LeaseName = first.leaseNamespace, first.leaseName
	}
	for _, p := range first.peers {
		found.Peers = append(found.Peers, p.String())
	}
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

// judge checks the configuration every mirror Pod shares (s) in a fixed order: what kube-vip
// serves, then its mode (judgeARP, judgeBGP), then its Service VIPs.
func judge(spec Spec, s *settings, pods string) *Refusal {
	refuse := func(reason, format string, a ...any) *Refusal {
		return &Refusal{Reason: reason, Message: "kube-vip (" + pods + "): " + fmt.Sprintf(format, a...)}
	}
	if !s.controlPlane {
		return refuse(lbv1.KubeVIPControlPlaneDisabledReason,
			"%s is not true: this kube-vip serves no control-plane VIP, so there is nothing to take over; remove %s", envControlPlane, spec.field())
	}
	if r := matchAddress(spec, s); r != "" {
		return refuse(lbv1.KubeVIPAddressMismatchReason, "%s", r)
	}
	judgeMode := judgeARP
	if spec.Backend == lbv1.BackendBGP {
		judgeMode = judgeBGP
	}
	if r := judgeMode(spec, s, refuse); r != nil {
		return r
	}
	if s.services && !spec.KubeVIP.AcknowledgeServiceVIPs {
		return refuse(lbv1.KubeVIPServiceVIPsReason,
			"%s is true: kube-vip also serves Service VIPs, and they stop with it (caplb serves the control-plane VIP only); "+
				"move them to a services-only kube-vip (or another Service load balancer) first, or set "+
				"%s.kubeVIP.acknowledgeServiceVIPs: true", envServices, spec.field())
	}
	return nil
}

type refuseFunc func(reason, format string, a ...any) *Refusal

// judgeARP: kube-vip answers ARP with Lease election, and a fence on its Lease makes it drop the
// VIP from its interface.
func judgeARP(spec Spec, s *settings, refuse refuseFunc) *Refusal {
	if s.bgp {
		return refuse(lbv1.KubeVIPBGPEnabledReason,
			"%s is true: kube-vip announces the VIP by BGP, and spec.backend.arp takes over an ARP VIP only; "+
				"take it over with a bgp LoadBalancer instead (spec.backend.bgp.takeOver)", envBGP)
	}
	if !s.arp {
		return refuse(lbv1.KubeVIPARPDisabledReason,
			"%s is not true: kube-vip does not answer ARP for the VIP, so spec.backend.arp cannot take it over; set %s \"true\" in kube-vip's manifest first, or remove spec.backend.arp.takeOver", envARP, envARP)
	}
	if !s.leaderElection {
		return refuse(lbv1.KubeVIPLeaderElectionDisabledReason,
			"%s is not true: without Lease election there is no Lease to stop kube-vip with; set %s \"true\" in kube-vip's manifest first", envLeaderElect, envLeaderElect)
	}
	if r := judgeLease(spec, s, refuse); r != nil {
		return r
	}
	if s.preserve {
		return refuse(lbv1.KubeVIPPreserveOnLeadershipLossReason,
			"%s is true: a kube-vip that loses its Lease keeps the VIP on its interface, so two nodes would hold it; not supported: "+
				"set it to \"false\" (or remove it) in kube-vip's manifest first", envPreserve)
	}
	return nil
}

// judgeBGP: kube-vip announces the VIP by BGP, with Lease election (the leader announces; a fence
// makes it withdraw) or without (every node announces until its Machine goes), to routers caplb
// announces to as well. vip_preserve_on_leadership_loss is not judged: it keeps the address on a
// fenced kube-vip's interface (v1.x only), but the routers follow the announcements, and kube-vip
// withdraws its route when it loses the Lease (it exits, closing its BGP sessions).
func judgeBGP(spec Spec, s *settings, refuse refuseFunc) *Refusal {
	if !s.bgp {
		return refuse(lbv1.KubeVIPBGPDisabledReason,
			"%s is not true: kube-vip does not announce the VIP by BGP, so spec.backend.bgp cannot take it over; "+
				"an ARP kube-vip is taken over by an arp LoadBalancer (spec.backend.arp.takeOver)", envBGP)
	}
	if s.arp {
		return refuse(lbv1.KubeVIPModeAmbiguousReason,
			"%s and %s are both true: kube-vip v0.x announces by BGP and also sends gratuitous ARP for the VIP, v1.x runs in ARP mode only, "+
				"so which one runs is not known from the manifest, and clients that reach the VIP by ARP would lose it with kube-vip; "+
				"set %s \"false\" in kube-vip's manifest first", envARP, envBGP, envARP)
	}
	if s.annotations != "" {
		return refuse(lbv1.KubeVIPConfigUnreadableReason,
			"%s=%q: kube-vip reads its BGP peers from its Node's annotations, which the manager does not read; "+
				"write them into %s in kube-vip's manifest first", envAnnotations, s.annotations, envBGPPeers)
	}
	if s.leaderElection {
		if r := judgeLease(spec, s, refuse); r != nil {
			return r
		}
	}
	if r := matchPeers(spec.Peers, s.peers); r != "" {
		return refuse(lbv1.KubeVIPPeersMismatchReason, "%s", r)
	}
	return nil
}

// judgeLease: kube-vip elects on the Kubernetes Lease the spec names, the one the fence writes.
func judgeLease(spec Spec, s *settings, refuse refuseFunc) *Refusal {
	if s.electionType != electionKubernetes {
		return refuse(lbv1.KubeVIPEtcdElectionReason,
			"--leaderElectionType is %q: kube-vip elects through etcd, not a Kubernetes Lease, and caplb cannot stop it; not supported: "+
				"switch kube-vip to Lease election (drop --leaderElectionType) first", s.electionType)
	}
	want := spec.KubeVIP
	if s.leaseNamespace != want.EffectiveLeaseNamespace() || s.leaseName != want.EffectiveLeaseName() {
		return refuse(lbv1.KubeVIPLeaseMismatchReason,
			"kube-vip elects on the Lease %s/%s (%s, %s), %s.kubeVIP names %s/%s: set its leaseNamespace and leaseName to kube-vip's",
			s.leaseNamespace, s.leaseName, envNamespace, envLeaseName, spec.field(), want.EffectiveLeaseNamespace(), want.EffectiveLeaseName())
	}
	return nil
}

// matchAddress says why kube-vip's address is not the LoadBalancer's VIP, or "" when it is.
func matchAddress(spec Spec, s *settings) string {
	vip := spec.VIP
	want, err := netip.ParseAddr(vip)
	if err != nil {
		return fmt.Sprintf("the LoadBalancer's VIP %q is not an IP address: set spec.endpoint.host to the Cluster's endpoint address", vip)
	}
	switch {
	case s.address == "":
		return fmt.Sprintf("neither %s nor %s is set: kube-vip's VIP is not known; set %s to %s in kube-vip's manifest", envAddress, envVIPAddress, envAddress, vip)
	case strings.Contains(s.address, ","):
		return fmt.Sprintf("%s=%q names several addresses: spec.backend.%s holds one VIP; not supported", s.addressSource, s.address, spec.Backend)
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
	nodes := fmt.Sprintf("%d node(s): %s", len(found.Nodes), strings.Join(found.Nodes, ", "))
	var msg string
	switch {
	case found.Backend != lbv1.BackendBGP:
		msg = fmt.Sprintf("kube-vip serves the VIP by ARP with Lease election on %s/%s from %s", found.LeaseNamespace, found.LeaseName, nodes)
	case found.Elects:
		msg = fmt.Sprintf("kube-vip announces the VIP by BGP to %s, its leader elected on the Lease %s/%s, from %s",
			strings.Join(found.Peers, ", "), found.LeaseNamespace, found.LeaseName, nodes)
	default:
		msg = fmt.Sprintf("kube-vip announces the VIP by BGP to %s without Lease election, from each of %s; "+
			"nothing fences it: each node withdraws as its Machine goes", strings.Join(found.Peers, ", "), nodes)
	}
	if found.ServiceVIPs {
		msg += "; its Service VIPs stop with it (acknowledged)"
	}
	return metav1.Condition{Type: lbv1.KubeVIPTakeOverReadyCondition, Status: metav1.ConditionTrue,
		Reason: lbv1.KubeVIPTakeOverReadyReason, Message: msg}
}
