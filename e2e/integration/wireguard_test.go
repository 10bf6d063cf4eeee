package integration

import (
	"encoding/json"
	"io/fs"
	"testing"
	"time"

	wgapi "github.com/caplb/caplb/api/wireguard/v1alpha1"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	agentv1 "github.com/caplb/caplb/api/agent/v1alpha1"
	lbv1 "github.com/caplb/caplb/api/v1alpha1"
	"github.com/caplb/caplb/config/samples"
	"github.com/caplb/caplb/e2e/harness"
	wgp "github.com/caplb/caplb/providers/wireguard"
)

// TestWireGuard runs the wireguard backend's management-side flows on a control plane of its
// own (go test -run WireGuard): admission, and the endpoint, Secrets and quiesce driven by the
// gateways' reports, played by the test as a gateway would write them.
func TestWireGuard(t *testing.T) {
	if testing.Short() {
		t.Skip("integration suite: needs the test control plane (make testbin); skipped with -short")
	}
	s := startSuite(t)
	t.Run("flows", func(t *testing.T) {
		for _, f := range []struct {
			name string
			run  func(*testing.T, *suite)
		}{
			{"Admission", testWireGuardAdmission},
			{"EndpointSecretsQuiesce", testWireGuardFlow},
			{"RealGatewayAndMember", testWireGuardRealGateway},
			{"SampleValid", testWireGuardSample},
			{"PortConflict", testWireGuardPortConflict},
		} {
			t.Run(f.name, func(t *testing.T) {
				t.Parallel()
				f.run(t, s)
			})
		}
	})
}

// The wireguard sample is accepted object by object (server-side dry run: schema, CEL, and
// CAPI's KubeadmControlPlane CRD); TestIntegration/flows/SamplesValid checks every sample too.
func testWireGuardSample(t *testing.T, s *suite) {
	g := NewWithT(t)
	data, err := fs.ReadFile(samples.FS, "cluster_kubeadm_wireguard.yaml")
	g.Expect(err).NotTo(HaveOccurred())
	objs, err := harness.Decode(data)
	g.Expect(err).NotTo(HaveOccurred())
	kinds := map[string]bool{}
	for _, o := range objs {
		err := s.env.Client.Create(t.Context(), o, client.DryRunAll, client.FieldValidation("Strict"))
		if meta.IsNoMatchError(err) && thirdPartyKinds[o.GetKind()] {
			continue
		}
		g.Expect(err).To(Succeed(), "%s %s", o.GetKind(), o.GetName())
		kinds[o.GetKind()] = true
	}
	g.Expect(kinds).To(HaveKey("LoadBalancer"))
	g.Expect(kinds).To(HaveKey("KubeadmControlPlane"))
}

func wgSpec() map[string]any {
	return map[string]any{
		"clusterName": "c",
		"endpoint":    map[string]any{"host": "api.edge.example.com", "port": int64(7443)},
		"backend": map[string]any{"wireguard": map[string]any{"gateways": []any{
			map[string]any{"name": "gw-1", "address": "203.0.113.10"},
			map[string]any{"name": "gw-2", "address": "203.0.113.11"},
		}}},
	}
}

func wgBackend(s map[string]any) map[string]any {
	return s["backend"].(map[string]any)["wireguard"].(map[string]any)
}

// Bad wireguard manifests are rejected with messages that name the field and the fix.
func testWireGuardAdmission(t *testing.T, s *suite) {
	ctx := t.Context()
	ns, err := s.env.CreateNamespace(ctx, "wg-admission")
	if err != nil {
		t.Fatal(err)
	}
	creates := []struct {
		name   string
		mutate func(spec map[string]any)
		want   []string
	}{
		{"no clusterName", func(s map[string]any) { delete(s, "clusterName") },
			[]string{"spec.clusterName is required with spec.backend.wireguard"}},
		{"two gateways without a host", func(s map[string]any) { delete(s, "endpoint") },
			[]string{"spec.endpoint.host is required with more than one gateway"}},
		{"no gateways", func(s map[string]any) { wgBackend(s)["gateways"] = []any{} },
			[]string{"spec.backend.wireguard.gateways"}},
		{"gateway name not a label", func(s map[string]any) {
			wgBackend(s)["gateways"] = []any{map[string]any{"name": "GW_1", "address": "203.0.113.10"}}
		}, []string{"spec.backend.wireguard.gateways[].name must be a DNS label"}},
		{"gateway address with port", func(s map[string]any) {
			wgBackend(s)["gateways"] = []any{map[string]any{"name": "gw-1", "address": "203.0.113.10:51820"}}
		}, []string{"spec.backend.wireguard.gateways[].address must be an IP address"}},
		{"same address and port twice", func(s map[string]any) {
			wgBackend(s)["gateways"] = []any{map[string]any{"name": "gw-1", "address": "203.0.113.10"},
				map[string]any{"name": "gw-2", "address": "203.0.113.10"}}
		}, []string{"address and port must be unique"}},
		{"public key not a key", func(s map[string]any) {
			wgBackend(s)["gateways"] = []any{map[string]any{"name": "gw-1", "address": "203.0.113.10", "publicKey": "not-a-key"}}
		}, []string{"spec.backend.wireguard.gateways[].publicKey must be a WireGuard public key"}},
		{"prefix of the other family", func(s map[string]any) {
			wgBackend(s)["tunnel"] = map[string]any{"family": "IPv4", "prefix": "fd00:1::/64"}
		}, []string{"spec.backend.wireguard.tunnel.prefix must match tunnel.family"}},
		{"prefix with host bits", func(s map[string]any) {
			wgBackend(s)["tunnel"] = map[string]any{"family": "IPv4", "prefix": "10.1.2.3/16"}
		}, []string{"spec.backend.wireguard.tunnel.prefix must be a network prefix without host bits"}},
		{"IPv4 prefix too small", func(s map[string]any) {
			wgBackend(s)["tunnel"] = map[string]any{"family": "IPv4", "prefix": "10.1.2.0/28"}
		}, []string{"an IPv4 prefix of /8 to /24"}},
		{"unknown family", func(s map[string]any) { wgBackend(s)["tunnel"] = map[string]any{"family": "IPX"} },
			[]string{"spec.backend.wireguard.tunnel.family"}},
		{"unknown tunnel device", func(s map[string]any) { wgBackend(s)["device"] = "kernel" },
			[]string{"spec.backend.wireguard.device", "supported values", "netstack", "tun"}},
		{"keepalive in milliseconds", func(s map[string]any) { wgBackend(s)["persistentKeepalive"] = "1500ms" },
			[]string{"spec.backend.wireguard.persistentKeepalive must be whole seconds"}},
		{"health interval too short", func(s map[string]any) { wgBackend(s)["health"] = map[string]any{"interval": "1ms"} },
			[]string{"spec.backend.wireguard.health.interval must be between 50ms and 1m"}},
		{"no drain", func(s map[string]any) { s["quiesce"] = map[string]any{"drainPeriod": "0s"} },
			[]string{"spec.quiesce.drainPeriod must be positive with spec.backend.wireguard"}},
	}
	for _, tc := range creates {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			spec := wgSpec()
			tc.mutate(spec)
			err := s.env.Client.Create(ctx, lbObject(ns, "bad", spec), client.FieldValidation("Strict"))
			g.Expect(err).To(HaveOccurred(), "the API server accepted it")
			g.Expect(apierrors.IsInvalid(err) || apierrors.IsBadRequest(err)).To(BeTrue(), "%v", err)
			for _, w := range tc.want {
				g.Expect(err.Error()).To(ContainSubstring(w))
			}
		})
	}

	g := NewWithT(t)
	// Other gateway addresses than the flows' (the same ones would be a port conflict with them).
	spec := wgSpec()
	wgBackend(spec)["gateways"] = []any{map[string]any{"name": "gw-1", "address": "198.51.100.10"},
		map[string]any{"name": "gw-2", "address": "198.51.100.11"}}
	good := lbObject(ns, "good", spec)
	g.Expect(s.env.Client.Create(ctx, good)).To(Succeed())
	updates := []struct {
		name   string
		mutate func(spec map[string]any)
		want   string
	}{
		{"tunnel family", func(s map[string]any) { wgBackend(s)["tunnel"] = map[string]any{"family": "IPv4"} },
			"spec.backend.wireguard.tunnel cannot change"},
		{"backend kind", func(s map[string]any) { s["backend"] = map[string]any{"static": map[string]any{}} },
			"spec.backend kind cannot change"},
	}
	for _, tc := range updates {
		t.Run("update "+tc.name, func(t *testing.T) {
			g := NewWithT(t)
			err := updateLBSpec(ctx, s, ns, "good", tc.mutate)
			g.Expect(err).To(HaveOccurred(), "the API server accepted it")
			g.Expect(err.Error()).To(ContainSubstring(tc.want))
		})
	}
}

// report plays gateway gw: it writes the report ConfigMap a gateway keeps current.
func (f *fixture) report(g Gomega, gw string, quiesced []string, members ...wgapi.MemberStatus) {
	r := wgapi.Report{Time: time.Now(), QuiescedNodes: quiesced, Status: wgapi.Status{Name: gw, Members: members}}
	if r.QuiescedNodes == nil {
		r.QuiescedNodes = []string{}
	}
	b, err := json.Marshal(r)
	g.Expect(err).NotTo(HaveOccurred())
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: f.cluster.Name + wgp.GatewaySecretSuffix + "-" + gw}}
	err = f.s.env.Client.Get(f.ctx, client.ObjectKeyFromObject(cm), cm)
	cm.Data = map[string]string{wgapi.ReportKey: string(b)}
	if apierrors.IsNotFound(err) {
		g.Expect(f.s.env.Client.Create(f.ctx, cm)).To(Succeed())
		return
	}
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(f.s.env.Client.Update(f.ctx, cm)).To(Succeed())
}

func (f *fixture) secret(g Gomega, name string) *corev1.Secret {
	sec := &corev1.Secret{}
	g.Expect(f.s.env.Client.Get(f.ctx, types.NamespacedName{Namespace: f.ns, Name: name}, sec)).To(Succeed())
	return sec
}

// A wireguard LoadBalancer publishes its endpoint before any Machine and before any gateway
// reports; renders the join token, bootstrap and gateway Secrets (files the member and gateway
// accept); puts a member into rotation only when a gateway reports it healthy; and releases a
// disabled member only once every gateway reports it quiesced with no open connection.
func testWireGuardFlow(t *testing.T, s *suite) {
	g := NewWithT(t)
	f := newFixture(t, s, harness.ClusterOptions{})
	drain := 3 * time.Second
	lb := f.createLB(t, "api.edge.example.com", 7443, withDrain(drain), func(lb *lbv1.LoadBalancer) {
		lb.Spec.Backend = lbv1.Backend{WireGuard: &lbv1.WireGuardBackend{Gateways: []lbv1.WireGuardGateway{
			{Name: "gw-1", Address: "203.0.113.10"}, {Name: "gw-2", Address: "203.0.113.11", Port: 51830}}}}
	})

	f.waitLB(t, "endpoint published, gateways silent", func(lb *lbv1.LoadBalancer) bool {
		return lb.Status.Endpoint == lbv1.APIEndpoint{Host: "api.edge.example.com", Port: 7443} &&
			harness.ConditionIs(lb, lbv1.ClusterEndpointCondition, metav1.ConditionTrue) &&
			harness.ConditionIs(lb, lbv1.GatewaysReadyCondition, metav1.ConditionFalse) &&
			harness.Condition(lb, lbv1.GatewaysReadyCondition).Reason == lbv1.WaitingForGatewaysReason
	})
	c := &clusterv1.Cluster{}
	g.Expect(s.env.Client.Get(f.ctx, client.ObjectKeyFromObject(f.cluster), c)).To(Succeed())
	g.Expect(c.Spec.ControlPlaneEndpoint).To(Equal(clusterv1.APIEndpoint{Host: "api.edge.example.com", Port: 7443}))
	var machines clusterv1.MachineList
	g.Expect(s.env.Client.List(f.ctx, &machines, client.InNamespace(f.ns))).To(Succeed())
	g.Expect(machines.Items).To(BeEmpty(), "the endpoint must be published before any Machine exists")

	// The Secrets: one token, copied into what members and gateways read.
	tokSec := f.secret(g, "c"+wgp.TokenSecretSuffix)
	g.Expect(metav1.IsControlledBy(tokSec, lb)).To(BeTrue())
	token := tokSec.Data[wgp.TokenKey]
	g.Expect(len(token)).To(BeNumerically(">=", 32))
	boot := f.secret(g, "c-caplb-agent")
	g.Expect(metav1.IsControlledBy(boot, lb)).To(BeTrue())
	g.Expect(boot.Data[wgp.TokenKey]).To(Equal(token))
	mc, err := wgapi.ParseMember(boot.Data[wgp.MemberConfigKey])
	g.Expect(err).NotTo(HaveOccurred(), "the member must accept its file:\n%s", boot.Data[wgp.MemberConfigKey])
	g.Expect(mc.Gateways).To(Equal([]wgapi.MemberGateway{
		{Endpoint: "203.0.113.10:51820", Registration: "203.0.113.10:51821"},
		{Endpoint: "203.0.113.11:51830", Registration: "203.0.113.11:51831"}}))
	g.Expect(mc.TokenFile).To(Equal(wgp.MemberTokenPath))
	g.Expect(mc.Upstream).To(Equal("127.0.0.1:6443"))
	g.Expect(mc.TunnelPrefix).To(Equal(lbv1.DefaultWireGuardPrefixIPv6))
	pod := &corev1.Pod{}
	g.Expect(yaml.UnmarshalStrict(boot.Data[agentv1.SecretManifestKey], pod)).To(Succeed())
	g.Expect(pod.Spec.Containers[0].Command).To(Equal([]string{"caplb-agent", "wireguard", "--config", wgp.MemberConfigPath}))
	g.Expect(pod.Spec.Containers[0].Image).To(Equal(harness.AgentImage))

	gws := f.secret(g, "c"+wgp.GatewaySecretSuffix)
	g.Expect(metav1.IsControlledBy(gws, lb)).To(BeTrue())
	g.Expect(gws.Data[wgp.TokenKey]).To(Equal(token))
	g.Expect(string(gws.Data[wgp.QuiescedKey])).To(Equal("[]"))
	for name, port := range map[string]int{"gw-1": 51820, "gw-2": 51830} {
		gc, err := wgapi.ParseGateway(gws.Data[wgp.GatewayConfigKey(name)])
		g.Expect(err).NotTo(HaveOccurred(), "gateway %s must accept its file", name)
		g.Expect(gc.Name).To(Equal(name))
		g.Expect(gc.Listen).To(Equal(":7443"))
		g.Expect(gc.WireGuard.ListenPort).To(Equal(port))
		g.Expect(gc.DrainTimeout.Duration).To(Equal(drain))
	}

	// Gateways report (no member yet): the endpoint is available.
	f.report(g, "gw-1", nil)
	f.report(g, "gw-2", nil)
	f.waitLB(t, "gateways report", func(lb *lbv1.LoadBalancer) bool {
		return harness.ConditionIs(lb, lbv1.GatewaysReadyCondition, metav1.ConditionTrue) &&
			harness.ConditionIs(lb, lbv1.EndpointAvailableCondition, metav1.ConditionTrue)
	})

	// A member: adding until a gateway reports its node healthy and active.
	ms := f.addMachines(t, 1)
	node := f.machine(g, ms[0].Name).Status.NodeRef.Name
	g.Expect(node).NotTo(BeEmpty())
	f.waitLB(t, "member adding", func(lb *lbv1.LoadBalancer) bool { return harness.TargetState(lb, ms[0].Name) == lbv1.TargetAdding })
	g.Consistently(func() lbv1.TargetState {
		lb, err := s.env.GetLB(f.ctx, f.ns, "lb")
		g.Expect(err).NotTo(HaveOccurred())
		return harness.TargetState(lb, ms[0].Name)
	}, 2*time.Second, 200*time.Millisecond).Should(Equal(lbv1.TargetAdding), "no gateway reports the member: it must not be active")
	active := wgapi.MemberStatus{Node: node, PublicKey: "k1", State: "active", Healthy: true, Connections: 2}
	f.report(g, "gw-1", nil, active)
	f.report(g, "gw-2", nil, wgapi.MemberStatus{Node: node, PublicKey: "k1", State: "active", Healthy: false})
	f.waitLB(t, "member active", allActive(ms[0].Name))

	// Disabled: the gateways are told, and the quiesce waits for them, not for a timer.
	g.Expect(s.env.Annotate(f.ctx, f.machine(g, ms[0].Name), lbv1.DisabledAnnotation, ptrTo("maintenance"))).To(Succeed())
	g.Eventually(func(g Gomega) {
		var q []string
		g.Expect(json.Unmarshal(f.secret(g, "c"+wgp.GatewaySecretSuffix).Data[wgp.QuiescedKey], &q)).To(Succeed())
		g.Expect(q).To(Equal([]string{node}))
	}, flowTimeout).Should(Succeed())
	stillActive := func() {
		// Both gateways keep reporting (fresh), neither has applied the quiesce yet.
		f.report(g, "gw-1", nil, active)
		f.report(g, "gw-2", []string{node}, wgapi.MemberStatus{Node: node, PublicKey: "k1", State: "quiesced"})
	}
	stillActive()
	f.waitLB(t, "member disabling", func(lb *lbv1.LoadBalancer) bool { return harness.TargetState(lb, ms[0].Name) == lbv1.TargetDisabling })
	g.Consistently(func() lbv1.TargetState {
		stillActive()
		lb, err := s.env.GetLB(f.ctx, f.ns, "lb")
		g.Expect(err).NotTo(HaveOccurred())
		return harness.TargetState(lb, ms[0].Name)
	}, drain+2*time.Second, 500*time.Millisecond).Should(Equal(lbv1.TargetDisabling),
		"gw-1 still has the member in rotation: the drain period alone must not release it")
	// gw-1 applies it; its connections drain to zero: disabled.
	f.report(g, "gw-1", []string{node}, wgapi.MemberStatus{Node: node, PublicKey: "k1", State: "quiesced", Connections: 0})
	f.waitLB(t, "member disabled", func(lb *lbv1.LoadBalancer) bool { return harness.TargetState(lb, ms[0].Name) == lbv1.TargetDisabled })

	// Enabled again: off the quiesced list, active once a gateway reports it healthy.
	g.Expect(s.env.Annotate(f.ctx, f.machine(g, ms[0].Name), lbv1.DisabledAnnotation, nil)).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(string(f.secret(g, "c"+wgp.GatewaySecretSuffix).Data[wgp.QuiescedKey])).To(Equal("[]"))
	}, flowTimeout).Should(Succeed())
	f.report(g, "gw-1", nil, active)
	f.waitLB(t, "member active again", allActive(ms[0].Name))
}

// Two clusters on the same gateways: the second LoadBalancer asks for a port the first holds on
// a shared address, so it publishes nothing and says which port and whose; with its own ports it
// publishes.
func testWireGuardPortConflict(t *testing.T, s *suite) {
	g := NewWithT(t)
	gateways := func(port int32) lbOption {
		return func(lb *lbv1.LoadBalancer) {
			lb.Spec.Backend = lbv1.Backend{WireGuard: &lbv1.WireGuardBackend{Gateways: []lbv1.WireGuardGateway{
				{Name: "gw-1", Address: "192.0.2.77", Port: port}}}}
		}
	}
	first := newFixture(t, s, harness.ClusterOptions{})
	first.createLB(t, "", 6443, gateways(51900))
	first.waitLB(t, "first publishes", func(lb *lbv1.LoadBalancer) bool {
		return lb.Status.Endpoint == lbv1.APIEndpoint{Host: "192.0.2.77", Port: 6443}
	})

	second := newFixture(t, s, harness.ClusterOptions{})
	lb := second.createLB(t, "", 6444, gateways(51901)) // UDP 51901 is free, but TCP 51901 is the first's registration port
	second.waitLB(t, "second refused", func(lb *lbv1.LoadBalancer) bool {
		c := harness.Condition(lb, lbv1.GatewaysReadyCondition)
		return c != nil && c.Reason == lbv1.GatewayPortConflictReason && lb.Status.Endpoint.Host == ""
	})
	got, err := s.env.GetLB(second.ctx, second.ns, "lb")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(harness.Condition(got, lbv1.GatewaysReadyCondition).Message).To(ContainSubstring(
		"gateway address 192.0.2.77: TCP 51901 is taken by LoadBalancer " + first.ns + "/lb"))
	c := &clusterv1.Cluster{}
	g.Expect(s.env.Client.Get(second.ctx, client.ObjectKeyFromObject(second.cluster), c)).To(Succeed())
	g.Expect(c.Spec.ControlPlaneEndpoint.Host).To(BeEmpty(), "a contested port must not be baked into the Cluster")

	// The endpoint port cannot change once set, but it was never published: the gateway port can.
	g.Expect(updateLBSpec(second.ctx, s, second.ns, lb.Name, func(spec map[string]any) {
		wgBackend(spec)["gateways"] = []any{map[string]any{"name": "gw-1", "address": "192.0.2.77", "port": int64(51910)}}
	})).To(Succeed())
	second.waitLB(t, "second publishes on its own ports", func(lb *lbv1.LoadBalancer) bool {
		return lb.Status.Endpoint == lbv1.APIEndpoint{Host: "192.0.2.77", Port: 6444}
	})
}
