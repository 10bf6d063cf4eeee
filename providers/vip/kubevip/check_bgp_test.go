package kubevip

import (
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	lbv1 "github.com/caplb/caplb/api/v1alpha1"
)

// password is in the fixture's bgp_peers; no message may carry it.
const password = "s3cret"

// bgpEnv is the env `kube-vip manifest pod --controlplane --services --bgp --leaderElection
// --bgppeers ...` writes (pkg/kubevip/config_generator.go), with the VIP and two routers filled
// in: vip_arp off, bgp_peeraddress empty, the routers in bgp_peers (the first with a password).
func bgpEnv() []corev1.EnvVar {
	return []corev1.EnvVar{
		{Name: "vip_arp", Value: "false"},
		{Name: "port", Value: "6443"},
		{Name: "vip_interface", Value: "lo"},
		{Name: "vip_cidr", Value: "32"},
		{Name: "cp_enable", Value: "true"},
		{Name: "cp_namespace", Value: "kube-system"},
		{Name: "svc_enable", Value: "true"},
		{Name: "vip_leaderelection", Value: "true"},
		{Name: "vip_leasename", Value: "plndr-cp-lock"},
		{Name: "vip_leaseduration", Value: "5"},
		{Name: "vip_renewdeadline", Value: "3"},
		{Name: "vip_retryperiod", Value: "1"},
		{Name: "bgp_enable", Value: "true"},
		{Name: "bgp_routerid", Value: ""},
		{Name: "bgp_as", Value: "64512"},
		{Name: "bgp_peeraddress", Value: ""},
		{Name: "bgp_peerpass", Value: ""},
		{Name: "bgp_peeras", Value: "65000"},
		{Name: "bgp_peers", Value: "192.0.2.1:64500:" + password + ":false,192.0.2.2:64500::false"},
		{Name: "address", Value: vip},
	}
}

// withBGPEnv returns bgpEnv with each name set to its value ("" removes it).
func withBGPEnv(kv ...string) []corev1.EnvVar {
	env := bgpEnv()
	for i := 0; i+1 < len(kv); i += 2 {
		var out []corev1.EnvVar
		found := false
		for _, e := range env {
			if e.Name == kv[i] {
				found = true
				if kv[i+1] == "" {
					continue
				}
				e.Value = kv[i+1]
			}
			out = append(out, e)
		}
		if !found && kv[i+1] != "" {
			out = append(out, corev1.EnvVar{Name: kv[i], Value: kv[i+1]})
		}
		env = out
	}
	return env
}

// routers are spec.backend.bgp.peers naming the fixture's two routers.
func routers() []lbv1.BGPPeer {
	return []lbv1.BGPPeer{{Address: "192.0.2.1", ASN: 64500}, {Address: "192.0.2.2", ASN: 64500}}
}

func bgpSpec(want *lbv1.KubeVIPTakeOver, peers []lbv1.BGPPeer) Spec {
	return Spec{VIP: vip, Backend: lbv1.BackendBGP, KubeVIP: want, Peers: peers}
}

func TestCheckBGP(t *testing.T) {
	for _, tc := range []struct {
		name string
		spec Spec
		pods []corev1.Pod
		// reason is "" when the takeover is allowed, then elects says whether kube-vip elects;
		// msg are substrings of the refusal's message.
		reason string
		elects bool
		msg    []string
	}{
		{name: "kube-vip's BGP manifest with Lease election", spec: bgpSpec(ack(), routers()), pods: three(bgpEnv()), elects: true},
		{name: "without Lease election: every node announces", spec: bgpSpec(ack(), routers()),
			pods: three(withBGPEnv("vip_leaderelection", "false"))},
		{name: "without election the Lease is not judged", spec: bgpSpec(&lbv1.KubeVIPTakeOver{LeaseName: "other", AcknowledgeServiceVIPs: true}, routers()),
			pods: three(withBGPEnv("vip_leaderelection", "", "vip_leasename", "mine"))},
		{name: "preserve on leadership loss does not matter", spec: bgpSpec(ack(), routers()),
			pods: three(withBGPEnv("vip_preserve_on_leadership_loss", "true")), elects: true},
		{name: "caplb announces to one router more", spec: bgpSpec(ack(), append(routers(), lbv1.BGPPeer{Address: "192.0.2.3", ASN: 64501})),
			pods: three(bgpEnv()), elects: true},
		{name: "one router in bgp_peeraddress, its AS in bgp_peeras", spec: bgpSpec(ack(), routers()[:1]),
			pods: three(withBGPEnv("bgp_peers", "", "bgp_peeraddress", "192.0.2.1", "bgp_peeras", "64500")), elects: true},
		{name: "bgp_peeraddress's AS from the --peerAS flag", spec: bgpSpec(ack(), routers()[:1]),
			pods: three(withBGPEnv("bgp_peers", "", "bgp_peeraddress", "192.0.2.1", "bgp_peeras", ""), "manager", "--peerAS", "64500"), elects: true},
		{name: "bgp_peeraddress adds to bgp_peers", spec: bgpSpec(ack(), routers()),
			pods: three(withBGPEnv("bgp_peers", "192.0.2.1:64500", "bgp_peeraddress", "192.0.2.2", "bgp_peeras", "64500")), elects: true},
		{name: "IPv6 routers in brackets, written differently", spec: Spec{VIP: "fd00::10", Backend: lbv1.BackendBGP, KubeVIP: ack(),
			Peers: []lbv1.BGPPeer{{Address: "fd00::1", ASN: 64500}}},
			pods: three(withBGPEnv("address", "fd00::10", "bgp_peers", "[fd00:0::1]:64500::false")), elects: true},
		{name: "kube-vip v0.9's MP-BGP suffix", spec: bgpSpec(ack(), routers()),
			pods: three(withBGPEnv("bgp_peers", "192.0.2.1:64500/mpbgp_nexthop=auto_sourceif,192.0.2.2:64500")), elects: true},

		{name: "an ARP kube-vip", spec: bgpSpec(ack(), routers()), pods: three(capvEnv()),
			reason: lbv1.KubeVIPBGPDisabledReason, msg: []string{"bgp_enable is not true", "spec.backend.bgp cannot take it over",
				"an arp LoadBalancer (spec.backend.arp.takeOver)"}},
		{name: "ARP and BGP both on", spec: bgpSpec(ack(), routers()), pods: three(withBGPEnv("vip_arp", "true")),
			reason: lbv1.KubeVIPModeAmbiguousReason, msg: []string{"vip_arp and bgp_enable are both true", "v1.x runs in ARP mode only",
				`set vip_arp "false"`}},
		{name: "a router caplb does not announce to", spec: bgpSpec(ack(), routers()[1:]), pods: three(bgpEnv()),
			reason: lbv1.KubeVIPPeersMismatchReason, msg: []string{"kube-vip announces the VIP to 192.0.2.1 (AS 64500) from bgp_peers",
				"spec.backend.bgp.peers does not list", "would lose it when kube-vip withdraws", "add it to spec.backend.bgp.peers"}},
		{name: "two routers caplb does not announce to", spec: bgpSpec(ack(), []lbv1.BGPPeer{{Address: "192.0.2.9", ASN: 64500}}),
			pods: three(bgpEnv()), reason: lbv1.KubeVIPPeersMismatchReason,
			msg: []string{"192.0.2.1 (AS 64500) from bgp_peers; 192.0.2.2 (AS 64500) from bgp_peers"}},
		{name: "a router of another AS", spec: bgpSpec(ack(), []lbv1.BGPPeer{{Address: "192.0.2.1", ASN: 64500}, {Address: "192.0.2.2", ASN: 64501}}),
			pods: three(bgpEnv()), reason: lbv1.KubeVIPPeersMismatchReason,
			msg: []string{"kube-vip peers with the router 192.0.2.2 as AS 64500 (bgp_peers)", "spec.backend.bgp.peers[1] names it with asn 64501",
				"set spec.backend.bgp.peers[1].asn"}},
		{name: "bgp_peeraddress with kube-vip's default AS", spec: bgpSpec(ack(), routers()[:1]),
			pods:   three(withBGPEnv("bgp_peers", "", "bgp_peeraddress", "192.0.2.1", "bgp_peeras", "")),
			reason: lbv1.KubeVIPPeersMismatchReason, msg: []string{"192.0.2.1 as AS 65000 (bgp_peeraddress)"}},
		{name: "no router at all", spec: bgpSpec(ack(), routers()), pods: three(withBGPEnv("bgp_peers", "")),
			reason: lbv1.KubeVIPPeersMismatchReason, msg: []string{"kube-vip names no BGP peer", "ignores the --bgppeers"}},
		{name: "routers only in flags kube-vip's manager ignores", spec: bgpSpec(ack(), routers()),
			pods:   three(withBGPEnv("bgp_peers", ""), "manager", "--bgppeers", "192.0.2.1:64500", "--peerAddress", "192.0.2.1"),
			reason: lbv1.KubeVIPPeersMismatchReason, msg: []string{"kube-vip names no BGP peer"}},
		{name: "an unnumbered router (kube-vip v1.x)", spec: bgpSpec(ack(), routers()), pods: three(withBGPEnv("bgp_peers", "unnumbered:eth1:64500")),
			reason: lbv1.KubeVIPPeersMismatchReason, msg: []string{"kube-vip peers unnumbered on eth1 (AS 64500)", "names routers by address"}},
		{name: "routers from Node annotations", spec: bgpSpec(ack(), routers()), pods: three(withBGPEnv("annotation", "metal.equinix.com")),
			reason: lbv1.KubeVIPConfigUnreadableReason, msg: []string{`annotation="metal.equinix.com"`, "from its Node's annotations", "write them into bgp_peers"}},
		{name: "bgp_peers kube-vip cannot parse", spec: bgpSpec(ack(), routers()), pods: three(withBGPEnv("bgp_peers", "192.0.2.1:"+password)),
			reason: lbv1.KubeVIPConfigUnreadableReason, msg: []string{"bgp_peers: peer 1: its AS is not a number"}},
		{name: "bgp_peers from a Secret", spec: bgpSpec(ack(), routers()), pods: three(append(withBGPEnv("bgp_peers", ""), corev1.EnvVar{Name: "bgp_peers",
			ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{Key: "peers"}}})),
			reason: lbv1.KubeVIPConfigUnreadableReason, msg: []string{"env bgp_peers is set with valueFrom"}},
		{name: "Pods disagree on the routers", spec: bgpSpec(ack(), routers()),
			pods:   []corev1.Pod{mirrorPod("cp-a", bgpEnv()), mirrorPod("cp-b", withBGPEnv("bgp_peers", "192.0.2.1:64500:"+password))},
			reason: lbv1.KubeVIPPodsDisagreeReason, msg: []string{`kube-vip-cp-a has bgp_peers/bgp_peeraddress="192.0.2.1 (AS 64500), 192.0.2.2 (AS 64500)"`}},
		{name: "Lease election through etcd", spec: bgpSpec(ack(), routers()), pods: three(bgpEnv(), "manager", "--leaderElectionType=etcd"),
			reason: lbv1.KubeVIPEtcdElectionReason, msg: []string{`--leaderElectionType is "etcd"`}},
		{name: "another Lease", spec: bgpSpec(ack(), routers()), pods: three(withBGPEnv("vip_leasename", "my-cp-lock")),
			reason: lbv1.KubeVIPLeaseMismatchReason, msg: []string{"kube-system/my-cp-lock", "spec.backend.bgp.takeOver.kubeVIP names kube-system/plndr-cp-lock"}},
		{name: "Service VIPs not acknowledged", spec: bgpSpec(&lbv1.KubeVIPTakeOver{}, routers()), pods: three(bgpEnv()),
			reason: lbv1.KubeVIPServiceVIPsReason, msg: []string{"spec.backend.bgp.takeOver.kubeVIP.acknowledgeServiceVIPs: true"}},
		{name: "control plane off", spec: bgpSpec(ack(), routers()), pods: three(withBGPEnv("cp_enable", "false")),
			reason: lbv1.KubeVIPControlPlaneDisabledReason, msg: []string{"remove spec.backend.bgp.takeOver"}},
		{name: "another VIP", spec: Spec{VIP: "10.0.0.99", Backend: lbv1.BackendBGP, KubeVIP: ack(), Peers: routers()}, pods: three(bgpEnv()),
			reason: lbv1.KubeVIPAddressMismatchReason, msg: []string{`address="10.0.0.10" is not the LoadBalancer's VIP 10.0.0.99`}},
		{name: "no Pod", spec: bgpSpec(ack(), routers()), reason: lbv1.KubeVIPNotFoundReason, msg: []string{"remove spec.backend.bgp.takeOver"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			found, r := Check(tc.spec, tc.pods)
			if tc.reason == "" {
				g.Expect(r).To(BeNil())
				g.Expect(found.Backend).To(Equal(lbv1.BackendBGP))
				g.Expect(found.Elects).To(Equal(tc.elects))
				g.Expect(found.Nodes).To(Equal([]string{"cp-a", "cp-b", "cp-c"}))
				g.Expect(found.Peers).NotTo(BeEmpty())
				if tc.elects {
					g.Expect(found.LeaseNamespace + "/" + found.LeaseName).To(Equal("kube-system/plndr-cp-lock"))
				} else {
					g.Expect(found.LeaseName).To(BeEmpty(), "no Lease without election")
				}
				return
			}
			g.Expect(r).NotTo(BeNil(), "the takeover was allowed")
			g.Expect(r.Reason).To(Equal(tc.reason), r.Message)
			for _, m := range tc.msg {
				g.Expect(r.Message).To(ContainSubstring(m))
			}
			g.Expect(r.Message).NotTo(ContainSubstring(password), "a BGP password in a condition")
			g.Expect(found).To(BeZero())
		})
	}
}

// What an allowed BGP takeover reports: with election the Lease, without it the overlap; both
// name kube-vip's routers.
func TestCheckFoundBGP(t *testing.T) {
	g := NewWithT(t)
	found, r := Check(bgpSpec(ack(), routers()), three(bgpEnv()))
	g.Expect(r).To(BeNil())
	g.Expect(found).To(Equal(Found{Backend: lbv1.BackendBGP, Elects: true, LeaseNamespace: "kube-system", LeaseName: "plndr-cp-lock",
		LeaseDurationSeconds: 5, Pods: []string{"kube-vip-cp-a", "kube-vip-cp-b", "kube-vip-cp-c"}, Nodes: []string{"cp-a", "cp-b", "cp-c"},
		ServiceVIPs: true, Peers: []string{"192.0.2.1 (AS 64500)", "192.0.2.2 (AS 64500)"}}))
	c := Condition(found, nil)
	g.Expect(c.Status).To(Equal(metav1.ConditionTrue))
	g.Expect(c.Reason).To(Equal(lbv1.KubeVIPTakeOverReadyReason))
	g.Expect(c.Message).To(ContainSubstring("kube-vip announces the VIP by BGP to 192.0.2.1 (AS 64500), 192.0.2.2 (AS 64500), " +
		"its leader elected on the Lease kube-system/plndr-cp-lock, from 3 node(s): cp-a, cp-b, cp-c"))
	g.Expect(c.Message).NotTo(ContainSubstring(password))

	found, r = Check(bgpSpec(ack(), routers()), three(withBGPEnv("vip_leaderelection", "false")))
	g.Expect(r).To(BeNil())
	c = Condition(found, nil)
	g.Expect(c.Message).To(ContainSubstring("without Lease election, from each of 3 node(s): cp-a, cp-b, cp-c"))
	g.Expect(c.Message).To(ContainSubstring("each node withdraws as its Machine goes"))
}

// parsePeers reads what kube-vip's ParseBGPPeerConfig accepts, and never quotes the value.
func TestParsePeers(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []peer
		err  string
	}{
		{in: "10.0.0.1:65000", want: []peer{{address: "10.0.0.1", asn: 65000, source: envBGPPeers}}},
		{in: "10.0.0.1:65000:pw:true:1179,,10.0.0.2:65001", want: []peer{{address: "10.0.0.1", asn: 65000, source: envBGPPeers},
			{address: "10.0.0.2", asn: 65001, source: envBGPPeers}}},
		{in: "[fd00::1]:65000:pw", want: []peer{{address: "fd00::1", asn: 65000, source: envBGPPeers}}},
		{in: "unnumbered:eth0", want: []peer{{iface: "eth0", source: envBGPPeers}}},
		{in: "10.0.0.1", err: "peer 1: no AS"},
		{in: "10.0.0.1:pw", err: "peer 1: its AS is not a number"},
		{in: "[fd00::1:65000", err: "peer 1: no ']'"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			g := NewWithT(t)
			got, err := parsePeers(tc.in)
			if tc.err != "" {
				g.Expect(err).To(MatchError(ContainSubstring(tc.err)))
				g.Expect(err.Error()).NotTo(ContainSubstring("pw"))
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(got).To(Equal(tc.want))
		})
	}
}
