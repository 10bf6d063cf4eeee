package vip

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/yaml"

	agentv1 "github.com/caplb/caplb/api/agent/v1alpha1"
	lbv1 "github.com/caplb/caplb/api/v1alpha1"
)

func arpLB() *lbv1.LoadBalancer {
	return &lbv1.LoadBalancer{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "lb", UID: "uid-1"},
		Spec: lbv1.LoadBalancerSpec{
			ClusterName: "c",
			Endpoint:    lbv1.APIEndpoint{Host: "192.0.2.10"},
			TargetPort:  6443,
			Backend:     lbv1.Backend{ARP: &lbv1.ARPBackend{}},
		},
	}
}

func bgpLB() *lbv1.LoadBalancer {
	lb := arpLB()
	lb.Spec.Backend = lbv1.Backend{BGP: &lbv1.BGPBackend{
		ASN: 64512,
		Peers: []lbv1.BGPPeer{
			{Address: "192.0.2.1", ASN: 64500, PasswordSecretRef: &lbv1.SecretKeyReference{Name: "bgp", Key: "password"}},
			{Address: "192.0.2.2", ASN: 64500, HoldTime: &lbv1.Duration{Duration: 3 * time.Second},
				BFD: &lbv1.BFDSettings{MinTx: &lbv1.Duration{Duration: 200 * time.Millisecond}, Multiplier: 4}},
		},
		Communities: []string{"64512:100", "no-export"},
	}}
	lb.Spec.Backend.BGP.ExtraPorts = []int32{9345}
	return lb
}

func TestRenderedConfigPerFlavor(t *testing.T) {
	for flavor, fl := range Flavors {
		t.Run(flavor, func(t *testing.T) {
			g := NewWithT(t)
			lb := arpLB()
			lb.Spec.Backend.ARP.Agent.Flavor = flavor
			lb.Spec.Backend.ARP.Agent.Timers = &lbv1.AgentTimers{Drain: &lbv1.Duration{Duration: time.Second},
				BusyDrain: &lbv1.Duration{Duration: 25 * time.Second}}
			m := agentv1.Membership{Version: 3, Members: []agentv1.MemberConfig{{Name: "n1", Address: "10.0.0.1"}}}
			c := renderConfig(lb, renderInput{vip: "192.0.2.10", membership: m})
			g.Expect(c.NodeName).To(BeEmpty(), "the node name is the hostname, known only on the node")
			g.Expect(validateRendered(c)).To(Succeed())
			b, err := marshalConfig(c)
			g.Expect(err).NotTo(HaveOccurred())
			parsed, err := agentv1.Parse(b)
			g.Expect(err).NotTo(HaveOccurred(), "%s", b)
			g.Expect(parsed.NodeAPI.Kubeconfig).To(Equal(fl.Kubeconfig))
			g.Expect(parsed.Health.CAFile).To(Equal(fl.CAFile))
			g.Expect(parsed.Health.ServerName).To(Equal("kubernetes"))
			g.Expect(parsed.Membership).To(Equal(agentv1.MembershipConfig{Dynamic: true, Version: 3, StateFile: agentv1.DefaultStateFile}))
			g.Expect(parsed.Members).To(Equal(m.Members))
			g.Expect(parsed.Quiesce.Drain.Duration).To(Equal(time.Second))
			g.Expect(parsed.Quiesce.BusyDrain.Duration).To(Equal(25*time.Second), "busyDrain reaches the agent")
			g.Expect(parsed.Election.Label).To(Equal("ns/lb"))
			g.Expect(parsed.LoadBalancer).To(Equal(agentv1.LoadBalancerIdentity{Namespace: "ns", Name: "lb", Cluster: lb.Spec.ClusterName}),
				"caplb_agent_info names the LoadBalancer")
			g.Expect(string(b)).NotTo(ContainSubstring("0s"), "zero values are left to the agent's defaults")

			man, err := renderManifest(lb, "img:1")
			g.Expect(err).NotTo(HaveOccurred())
			pod := &corev1.Pod{}
			g.Expect(yaml.UnmarshalStrict(man, pod)).To(Succeed())
			g.Expect(pod.Spec.HostNetwork).To(BeTrue())
			g.Expect(pod.Spec.PriorityClassName).To(Equal("system-node-critical"))
			ctr := pod.Spec.Containers[0]
			g.Expect(ctr.Image).To(Equal("img:1"))
			g.Expect(ctr.Command).To(Equal([]string{"caplb-agent", "--config", "/etc/caplb/agent.yaml"}))
			g.Expect(ctr.SecurityContext.Capabilities.Add).To(ConsistOf(corev1.Capability("NET_ADMIN"), corev1.Capability("NET_RAW")))
			g.Expect(ctr.SecurityContext.Capabilities.Drop).To(ConsistOf(corev1.Capability("ALL")))
			g.Expect(*ctr.SecurityContext.AllowPrivilegeEscalation).To(BeFalse())
			g.Expect(ctr.Resources.Requests.Cpu().IsZero()).To(BeFalse())
			paths := map[string]bool{}
			for _, v := range pod.Spec.Volumes {
				paths[v.HostPath.Path] = true
			}
			runDir := "/run/caplb" // the control socket's directory (the root filesystem is read-only)
			for _, p := range append([]string{ConfigDir, StateDir, runDir, fl.CAFile, fl.Kubeconfig}, append(fl.KubeletFiles, fl.KubeletDirs...)...) {
				g.Expect(paths).To(HaveKey(p))
			}
			g.Expect(paths).To(HaveLen(5+len(fl.KubeletFiles)+len(fl.KubeletDirs)), "only what the agent needs")
			for _, vm := range ctr.VolumeMounts {
				g.Expect(vm.ReadOnly).To(Equal(vm.MountPath != StateDir && vm.MountPath != runDir), "mount %s", vm.MountPath)
			}
		})
	}
}

func TestRenderedBGP(t *testing.T) {
	g := NewWithT(t)
	lb := bgpLB()
	c := renderConfig(lb, renderInput{vip: "192.0.2.10", membership: agentv1.Membership{}, passwords: map[int]bool{0: true}})
	b, err := marshalConfig(c)
	g.Expect(err).NotTo(HaveOccurred())
	parsed, err := agentv1.Parse(b)
	g.Expect(err).NotTo(HaveOccurred(), "%s", b)
	g.Expect(parsed.Mode).To(Equal(agentv1.ModeBGP))
	g.Expect(parsed.ExtraPorts).To(Equal([]int{9345}))
	g.Expect(parsed.BGP.ASN).To(Equal(uint32(64512)))
	g.Expect(parsed.BGP.Peers[0].PasswordFile).To(Equal("/etc/caplb/bgp-0.password"))
	g.Expect(parsed.BGP.Peers[1].PasswordFile).To(BeEmpty())
	g.Expect(parsed.BGP.Peers[1].HoldTime.Duration).To(Equal(3 * time.Second))
	g.Expect(parsed.BGP.Peers[0].BFD).To(BeNil(), "BFD off unless set")
	minRx, minTx, mult := parsed.BGP.Peers[1].BFD.Timers()
	g.Expect([]any{minRx, minTx, mult}).To(Equal([]any{300 * time.Millisecond, 200 * time.Millisecond, uint8(4)}))
	g.Expect(parsed.BGP.Communities).To(Equal([]string{"64512:100", "no-export"}))
}

// TestRenderedSpread: spec.backend.arp.loadBalancing reaches the agent's arp.loadBalancing;
// unset, the agent's default (single) applies.
func TestRenderedSpread(t *testing.T) {
	for _, mode := range []string{"", lbv1.ARPLoadBalancingSingle, lbv1.ARPLoadBalancingSpread} {
		g := NewWithT(t)
		lb := arpLB()
		lb.Spec.Backend.ARP.LoadBalancing = mode
		c := renderConfig(lb, renderInput{vip: "192.0.2.10", membership: agentv1.Membership{}})
		b, err := marshalConfig(c)
		g.Expect(err).NotTo(HaveOccurred())
		parsed, err := agentv1.Parse(b)
		g.Expect(err).NotTo(HaveOccurred(), "%s", b)
		g.Expect(parsed.ARP.LoadBalancing).To(Equal(mode))
	}
}

// A kube-vip takeover makes ARP agents claim only a silent VIP (arp.claimWhenSilent); BGP agents
// never wait: they announce beside kube-vip's nodes as soon as they are healthy members.
func TestRenderedClaimWhenSilent(t *testing.T) {
	withTakeOver := func(lb *lbv1.LoadBalancer) *lbv1.LoadBalancer {
		t := &lbv1.TakeOver{KubeVIP: &lbv1.KubeVIPTakeOver{}}
		if lb.Spec.Backend.ARP != nil {
			lb.Spec.Backend.ARP.TakeOver = t
		} else {
			lb.Spec.Backend.BGP.TakeOver = t
		}
		return lb
	}
	for _, tc := range []struct {
		name string
		lb   *lbv1.LoadBalancer
		want bool
	}{
		{"arp", arpLB(), false},
		{"arp taking over from kube-vip", withTakeOver(arpLB()), true},
		{"bgp", bgpLB(), false},
		{"bgp taking over from kube-vip", withTakeOver(bgpLB()), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			c := renderConfig(tc.lb, renderInput{vip: "192.0.2.10", membership: agentv1.Membership{}, passwords: map[int]bool{0: true}})
			g.Expect(validateRendered(c)).To(Succeed())
			g.Expect(c.ARP.ClaimWhenSilent).To(Equal(tc.want))
		})
	}
}

func TestValidateNamesFields(t *testing.T) {
	b := NewARP(Options{AgentImage: "img"})
	bb := NewBGP(Options{AgentImage: "img"})
	for _, tc := range []struct {
		name   string
		be     *Backend
		mutate func(*lbv1.LoadBalancer)
		want   string // "" for valid
	}{
		{"valid arp", b, func(*lbv1.LoadBalancer) {}, ""},
		{"valid bgp", bb, func(lb *lbv1.LoadBalancer) { lb.Spec.Backend = bgpLB().Spec.Backend }, ""},
		{"no VIP source", b, func(lb *lbv1.LoadBalancer) { lb.Spec.Endpoint.Host = "" }, "spec.endpoint.host"},
		{"both sources", b, func(lb *lbv1.LoadBalancer) {
			lb.Spec.Backend.ARP.AddressFrom = &lbv1.AddressFrom{PoolRef: lbv1.IPPoolReference{APIGroup: "g", Kind: "K", Name: "n"}}
		}, "spec.endpoint.host"},
		{"DNS host", b, func(lb *lbv1.LoadBalancer) { lb.Spec.Endpoint.Host = "api.example.com" }, "spec.endpoint.host"},
		{"port translation", b, func(lb *lbv1.LoadBalancer) { lb.Spec.Endpoint.Port = 443 }, "spec.endpoint.port"},
		{"no image", NewARP(Options{}), func(*lbv1.LoadBalancer) {}, "spec.backend.arp.agent.image"},
		{"bad flavor", b, func(lb *lbv1.LoadBalancer) { lb.Spec.Backend.ARP.Agent.Flavor = "talos" }, "spec.backend.arp.agent.flavor"},
		{"probe timeout", b, func(lb *lbv1.LoadBalancer) {
			lb.Spec.Backend.ARP.Agent.Timers = &lbv1.AgentTimers{ProbeTimeout: &lbv1.Duration{Duration: time.Second}}
		}, "spec.backend.arp.agent.timers.probeTimeout"},
		{"extra port equals target", b, func(lb *lbv1.LoadBalancer) { lb.Spec.Backend.ARP.ExtraPorts = []int32{6443} }, "spec.backend.arp.extraPorts[0]"},
		{"bgp hold time", bb, func(lb *lbv1.LoadBalancer) {
			lb.Spec.Backend = bgpLB().Spec.Backend
			lb.Spec.Backend.BGP.Peers[1].HoldTime = &lbv1.Duration{Duration: 1500 * time.Millisecond}
		}, "spec.backend.bgp.peers[1].holdTime"},
		{"bgp community", bb, func(lb *lbv1.LoadBalancer) {
			lb.Spec.Backend = bgpLB().Spec.Backend
			lb.Spec.Backend.BGP.Communities = []string{"70000:1"}
		}, "spec.backend.bgp.communities[0]"},
		{"bgp BFD to an IPv6 router", bb, func(lb *lbv1.LoadBalancer) {
			lb.Spec.Backend = bgpLB().Spec.Backend
			lb.Spec.Backend.BGP.Peers[1].Address = "fd00::2"
		}, "spec.backend.bgp.peers[1].bfd"},
		{"bgp BFD interval", bb, func(lb *lbv1.LoadBalancer) {
			lb.Spec.Backend = bgpLB().Spec.Backend
			lb.Spec.Backend.BGP.Peers[1].BFD.MinRx = &lbv1.Duration{Duration: time.Millisecond}
		}, "spec.backend.bgp.peers[1].bfd.minRx"},
		{"busyDrain within the quiesce timeout", b, func(lb *lbv1.LoadBalancer) {
			lb.Spec.Backend.ARP.Agent.Timers = &lbv1.AgentTimers{Drain: &lbv1.Duration{Duration: 5 * time.Second},
				BusyDrain: &lbv1.Duration{Duration: 30 * time.Second}}
		}, ""},
		{"busyDrain reaching the quiesce timeout", b, func(lb *lbv1.LoadBalancer) {
			lb.Spec.Backend.ARP.Agent.Timers = &lbv1.AgentTimers{Drain: &lbv1.Duration{Duration: 5 * time.Second},
				BusyDrain: &lbv1.Duration{Duration: 2 * time.Minute}}
		}, "spec.backend.arp.agent.timers.busyDrain: Invalid value: \"2m0s\": drain + busyDrain (2m5s) must be shorter than spec.quiesce.timeout (2m0s)"},
		{"busyDrain with spread", b, func(lb *lbv1.LoadBalancer) {
			lb.Spec.Backend.ARP.LoadBalancing = lbv1.ARPLoadBalancingSpread
			lb.Spec.Backend.ARP.Agent.Timers = &lbv1.AgentTimers{BusyDrain: &lbv1.Duration{Duration: 30 * time.Second}}
		}, "spec.backend.arp.agent.timers.busyDrain: Invalid value: \"30s\": cannot be used with spec.backend.arp.loadBalancing spread"},
		{"busyDrain 0s with spread", b, func(lb *lbv1.LoadBalancer) {
			lb.Spec.Backend.ARP.LoadBalancing = lbv1.ARPLoadBalancingSpread
			lb.Spec.Backend.ARP.Agent.Timers = &lbv1.AgentTimers{BusyDrain: &lbv1.Duration{}}
		}, ""},
		{"negative busyDrain", b, func(lb *lbv1.LoadBalancer) {
			lb.Spec.Backend.ARP.Agent.Timers = &lbv1.AgentTimers{BusyDrain: &lbv1.Duration{Duration: -time.Second}}
		}, "spec.backend.arp.agent.timers.busyDrain"},
		{"kube-vip takeover", b, func(lb *lbv1.LoadBalancer) {
			lb.Spec.Backend.ARP.TakeOver = &lbv1.TakeOver{KubeVIP: &lbv1.KubeVIPTakeOver{LeaseName: "plndr-cp-lock"}}
		}, ""},
		{"takeover names no VIP manager", b, func(lb *lbv1.LoadBalancer) {
			lb.Spec.Backend.ARP.TakeOver = &lbv1.TakeOver{}
		}, "spec.backend.arp.takeOver.kubeVIP: Required value"},
		{"takeover from a pool", b, func(lb *lbv1.LoadBalancer) {
			lb.Spec.Endpoint.Host = ""
			lb.Spec.Backend.ARP.AddressFrom = &lbv1.AddressFrom{PoolRef: lbv1.IPPoolReference{APIGroup: "g", Kind: "K", Name: "n"}}
			lb.Spec.Backend.ARP.TakeOver = &lbv1.TakeOver{KubeVIP: &lbv1.KubeVIPTakeOver{}}
		}, "spec.endpoint.host: Required value: must be set to the VIP with spec.backend.arp.takeOver"},
		{"takeover without a Cluster", b, func(lb *lbv1.LoadBalancer) {
			lb.Spec.ClusterName = ""
			lb.Spec.TargetKind = lbv1.TargetKind{Kind: lbv1.NodeKind}
			lb.Spec.Backend.ARP.TakeOver = &lbv1.TakeOver{KubeVIP: &lbv1.KubeVIPTakeOver{}}
		}, "spec.clusterName: Required value: required with spec.backend.arp.takeOver"},
		{"takeover lease name", b, func(lb *lbv1.LoadBalancer) {
			lb.Spec.Backend.ARP.TakeOver = &lbv1.TakeOver{KubeVIP: &lbv1.KubeVIPTakeOver{LeaseName: "Plndr_CP"}}
		}, "spec.backend.arp.takeOver.kubeVIP.leaseName"},
		{"takeover lease namespace", b, func(lb *lbv1.LoadBalancer) {
			lb.Spec.Backend.ARP.TakeOver = &lbv1.TakeOver{KubeVIP: &lbv1.KubeVIPTakeOver{LeaseNamespace: "kube.system"}}
		}, "spec.backend.arp.takeOver.kubeVIP.leaseNamespace"},
		{"bgp multihop on iBGP", bb, func(lb *lbv1.LoadBalancer) {
			lb.Spec.Backend = bgpLB().Spec.Backend
			lb.Spec.Backend.BGP.Peers[0].ASN = 64512
			lb.Spec.Backend.BGP.Peers[0].EBGPMultihop = 2
		}, "spec.backend.bgp.peers[0].ebgpMultihop"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			lb := arpLB()
			tc.mutate(lb)
			errs := tc.be.Validate(lb)
			if tc.want == "" {
				g.Expect(errs).To(BeEmpty())
				return
			}
			g.Expect(errs.ToAggregate()).To(HaveOccurred())
			g.Expect(errs.ToAggregate().Error()).To(ContainSubstring(tc.want))
		})
	}
}

func newScheme(t *testing.T) *runtime.Scheme {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, ipamv1.AddToScheme, lbv1.AddToScheme} {
		if err := add(s); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// The bootstrap Secret: created once with a gossip key that stays across reconciles; the BGP
// password is copied in as a file key; neither ever appears in the logs.
func TestEnsureSecretKeepsKeyAndLogsNoSecret(t *testing.T) {
	g := NewWithT(t)
	lb := bgpLB()
	pw := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "bgp"}, Data: map[string][]byte{"password": []byte("s3cr3t-md5")}}
	c := fake.NewClientBuilder().WithScheme(newScheme(t)).WithObjects(lb, pw).Build()
	var logs strings.Builder
	log := funcr.New(func(prefix, args string) { logs.WriteString(prefix + " " + args + "\n") }, funcr.Options{Verbosity: 10})
	ctx := ctrl.LoggerInto(context.Background(), log)
	b := NewBGP(Options{Client: c, AgentImage: "img"})

	st, err := b.Ensure(ctx, lb, nil)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(st.Endpoint).To(Equal(lbv1.APIEndpoint{Host: "192.0.2.10", Port: 6443}))
	sec := &corev1.Secret{}
	g.Expect(c.Get(ctx, client.ObjectKey{Namespace: "ns", Name: "c-caplb-agent"}, sec)).To(Succeed())
	key := string(sec.Data[agentv1.SecretGossipKeyKey])
	g.Expect(key).To(HaveLen(44))
	g.Expect(string(sec.Data["bgp-0.password"])).To(Equal("s3cr3t-md5"))
	g.Expect(metav1.IsControlledBy(sec, lb)).To(BeTrue())

	_, err = b.Ensure(ctx, lb, nil)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(c.Get(ctx, client.ObjectKey{Namespace: "ns", Name: "c-caplb-agent"}, sec)).To(Succeed())
	g.Expect(string(sec.Data[agentv1.SecretGossipKeyKey])).To(Equal(key), "the gossip key is generated once")

	g.Expect(b.Release(ctx, lb)).To(Succeed())
	g.Expect(c.Get(ctx, client.ObjectKey{Namespace: "ns", Name: "c-caplb-agent"}, sec)).NotTo(Succeed())
	g.Expect(logs.String()).NotTo(ContainSubstring(key))
	g.Expect(logs.String()).NotTo(ContainSubstring("s3cr3t-md5"))
}

// A damaged membership record is an error, never a silent restart from version 0 (agents would
// ignore every version up to the one they already run).
func TestEnsureRefusesDamagedMembership(t *testing.T) {
	g := NewWithT(t)
	lb := arpLB()
	c := fake.NewClientBuilder().WithScheme(newScheme(t)).WithObjects(lb).Build()
	b := NewARP(Options{Client: c, AgentImage: "img"})
	_, err := b.Ensure(context.Background(), lb, nil)
	g.Expect(err).NotTo(HaveOccurred())
	sec := &corev1.Secret{}
	g.Expect(c.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: "c-caplb-agent"}, sec)).To(Succeed())
	sec.Data[agentv1.SecretMembershipKey] = []byte("{broken")
	g.Expect(c.Update(context.Background(), sec)).To(Succeed())
	_, err = b.Ensure(context.Background(), lb, nil)
	g.Expect(err).To(MatchError(ContainSubstring(agentv1.SecretMembershipKey)))
}

// The exported renderers are what the manager writes: a lab that boots machines from them (e2e/realcp)
// runs the agent files a user's node gets.
func TestRenderAgentFilesAreTheSecrets(t *testing.T) {
	g := NewWithT(t)
	lb := arpLB()
	lb.Spec.Backend.ARP.Agent.Timers = &lbv1.AgentTimers{Drain: &lbv1.Duration{Duration: 5 * time.Second}}
	c := fake.NewClientBuilder().WithScheme(newScheme(t)).WithObjects(lb).Build()
	_, err := NewARP(Options{Client: c, AgentImage: "img:1"}).Ensure(context.Background(), lb, nil)
	g.Expect(err).NotTo(HaveOccurred())
	sec := &corev1.Secret{}
	g.Expect(c.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: SecretName(lb)}, sec)).To(Succeed())

	cfg, err := RenderAgentConfig(lb, "192.0.2.10", agentv1.Membership{Members: []agentv1.MemberConfig{}}, nil)
	g.Expect(err).NotTo(HaveOccurred())
	b, err := MarshalConfig(cfg)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(b)).To(Equal(string(sec.Data[agentv1.SecretConfigKey])))
	man, err := RenderAgentManifest(lb, "img:1")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(man)).To(Equal(string(sec.Data[agentv1.SecretManifestKey])))

	lb.Spec.Backend.ARP.Agent.Timers.ProbeInterval = &lbv1.Duration{Duration: -time.Second}
	_, err = RenderAgentConfig(lb, "192.0.2.10", agentv1.Membership{}, nil)
	g.Expect(err).To(MatchError(ContainSubstring("rendered agent configuration is invalid")), "never a file the agent refuses")
}
