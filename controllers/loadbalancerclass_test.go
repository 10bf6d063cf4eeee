package controllers

import (
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	lbv1 "github.com/caplb/caplb/api/v1alpha1"
	"github.com/caplb/caplb/providers"
	"github.com/caplb/caplb/providers/static"
)

func pool(name string) *lbv1.AddressFrom {
	return &lbv1.AddressFrom{PoolRef: lbv1.IPPoolReference{APIGroup: "ipam.cluster.x-k8s.io", Kind: "InClusterIPPool", Name: name}}
}

func arpBackend(from *lbv1.AddressFrom) lbv1.Backend {
	return lbv1.Backend{ARP: &lbv1.ARPBackend{VIPBackend: lbv1.VIPBackend{AddressFrom: from}}}
}

func TestMergeTemplate(t *testing.T) {
	drain := &lbv1.Duration{Duration: 3 * time.Second}
	for _, tc := range []struct {
		name       string
		have, want lbv1.LoadBalancerSpec
		// expect is the merged spec; notApplied are substrings of what was left out.
		expect     lbv1.LoadBalancerSpec
		notApplied []string
	}{
		{
			name:   "mutable fields follow the template",
			have:   lbv1.LoadBalancerSpec{ClusterName: "c", TargetPort: 6443, Backend: lbv1.Backend{Static: &lbv1.StaticBackend{}}},
			want:   lbv1.LoadBalancerSpec{ClusterName: "c", TargetPort: 7443, Quiesce: lbv1.Quiesce{DrainPeriod: drain}, Backend: lbv1.Backend{Static: &lbv1.StaticBackend{AddressTypes: []string{"ExternalIP"}}}},
			expect: lbv1.LoadBalancerSpec{ClusterName: "c", TargetPort: 7443, Quiesce: lbv1.Quiesce{DrainPeriod: drain}, Backend: lbv1.Backend{Static: &lbv1.StaticBackend{AddressTypes: []string{"ExternalIP"}}}},
		},
		{
			name:       "backend kind kept",
			have:       lbv1.LoadBalancerSpec{ClusterName: "c", Backend: lbv1.Backend{Static: &lbv1.StaticBackend{}}},
			want:       lbv1.LoadBalancerSpec{ClusterName: "c", Backend: arpBackend(pool("a"))},
			expect:     lbv1.LoadBalancerSpec{ClusterName: "c", Backend: lbv1.Backend{Static: &lbv1.StaticBackend{}}},
			notApplied: []string{"spec.backend is static, the template says arp"},
		},
		{
			name:       "addressFrom kept",
			have:       lbv1.LoadBalancerSpec{ClusterName: "c", Backend: arpBackend(pool("a"))},
			want:       lbv1.LoadBalancerSpec{ClusterName: "c", Backend: arpBackend(pool("b"))},
			expect:     lbv1.LoadBalancerSpec{ClusterName: "c", Backend: arpBackend(pool("a"))},
			notApplied: []string{"spec.backend.arp.addressFrom"},
		},
		{
			name:   "an adopted endpoint is no difference",
			have:   lbv1.LoadBalancerSpec{ClusterName: "c", Endpoint: lbv1.APIEndpoint{Host: "10.0.0.1", Port: 6443}, Backend: lbv1.Backend{Static: &lbv1.StaticBackend{}}},
			want:   lbv1.LoadBalancerSpec{ClusterName: "c", Backend: lbv1.Backend{Static: &lbv1.StaticBackend{}}},
			expect: lbv1.LoadBalancerSpec{ClusterName: "c", Endpoint: lbv1.APIEndpoint{Host: "10.0.0.1", Port: 6443}, Backend: lbv1.Backend{Static: &lbv1.StaticBackend{}}},
		},
		{
			name:       "a set endpoint is kept",
			have:       lbv1.LoadBalancerSpec{ClusterName: "c", Endpoint: lbv1.APIEndpoint{Host: "a.example.com", Port: 6443}, Backend: lbv1.Backend{Static: &lbv1.StaticBackend{}}},
			want:       lbv1.LoadBalancerSpec{ClusterName: "c", Endpoint: lbv1.APIEndpoint{Host: "b.example.com", Port: 443}, Backend: lbv1.Backend{Static: &lbv1.StaticBackend{}}},
			expect:     lbv1.LoadBalancerSpec{ClusterName: "c", Endpoint: lbv1.APIEndpoint{Host: "a.example.com", Port: 6443}, Backend: lbv1.Backend{Static: &lbv1.StaticBackend{}}},
			notApplied: []string{"spec.endpoint.host is a.example.com", "spec.endpoint.port is 6443"},
		},
		{
			name:   "an empty endpoint takes the template's",
			have:   lbv1.LoadBalancerSpec{ClusterName: "c", Backend: lbv1.Backend{Static: &lbv1.StaticBackend{}}},
			want:   lbv1.LoadBalancerSpec{ClusterName: "c", Endpoint: lbv1.APIEndpoint{Host: "b.example.com", Port: 443}, Backend: lbv1.Backend{Static: &lbv1.StaticBackend{}}},
			expect: lbv1.LoadBalancerSpec{ClusterName: "c", Endpoint: lbv1.APIEndpoint{Host: "b.example.com", Port: 443}, Backend: lbv1.Backend{Static: &lbv1.StaticBackend{}}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			spec := tc.have
			out := mergeTemplate(&spec, tc.want)
			g.Expect(spec).To(Equal(tc.expect))
			g.Expect(out).To(HaveLen(len(tc.notApplied)), "%v", out)
			for i, w := range tc.notApplied {
				g.Expect(out[i]).To(ContainSubstring(w))
			}
		})
	}
}

func TestValidateTemplate(t *testing.T) {
	reg, err := providers.NewRegistry(static.New())
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		spec lbv1.LoadBalancerTemplateSpec
		want string // "" for valid
	}{
		{"static", lbv1.LoadBalancerTemplateSpec{Backend: lbv1.Backend{Static: &lbv1.StaticBackend{}}}, ""},
		{"arp without pool", lbv1.LoadBalancerTemplateSpec{Backend: arpBackend(nil)}, "spec.template.spec.backend.arp.addressFrom.poolRef is required"},
		{"arp with host", lbv1.LoadBalancerTemplateSpec{Endpoint: lbv1.APIEndpoint{Host: "10.0.0.1"}, Backend: arpBackend(pool("a"))}, "spec.template.spec.endpoint.host must be empty"},
		{"bad host", lbv1.LoadBalancerTemplateSpec{Endpoint: lbv1.APIEndpoint{Host: "HTTP://x"}, Backend: lbv1.Backend{Static: &lbv1.StaticBackend{}}}, "spec.template.spec.endpoint.host"},
		{"wireguard", lbv1.LoadBalancerTemplateSpec{Backend: lbv1.Backend{WireGuard: &lbv1.WireGuardBackend{
			Gateways: []lbv1.WireGuardGateway{{Name: "gw-1", Address: "203.0.113.10"}}}}}, "spec.template.spec.backend.wireguard is not supported"},
		{"backend not in this build", lbv1.LoadBalancerTemplateSpec{Backend: arpBackend(pool("a"))}, "spec.template.spec.backend"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			class := &lbv1.LoadBalancerClass{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "cp"},
				Spec: lbv1.LoadBalancerClassSpec{Template: lbv1.LoadBalancerClassTemplate{Spec: tc.spec}}}
			got := validateTemplate(class, reg)
			if tc.want == "" {
				if got != "" {
					t.Fatalf("want valid, got %q", got)
				}
				return
			}
			if !strings.Contains(got, tc.want) {
				t.Fatalf("want %q in %q", tc.want, got)
			}
		})
	}
}

func TestSetClassReady(t *testing.T) {
	for _, tc := range []struct {
		name   string
		s      classScope
		status metav1.ConditionStatus
		reason string
	}{
		{"all ready", classScope{matched: 2, ready: 2}, metav1.ConditionTrue, lbv1.ReadyReason},
		{"nothing matched", classScope{}, metav1.ConditionTrue, lbv1.NoClustersMatchedReason},
		{"waiting", classScope{matched: 2, ready: 1, notReady: []string{"b-cp"}}, metav1.ConditionFalse, lbv1.WaitingForLoadBalancersReason},
		{"paused Cluster", classScope{matched: 1, paused: []string{"a"}}, metav1.ConditionFalse, lbv1.WaitingForLoadBalancersReason},
		{"not applied beats waiting", classScope{matched: 2, notReady: []string{"b-cp"}, notApplied: []string{"a-cp: x"}}, metav1.ConditionFalse, lbv1.TemplateNotAppliedReason},
		{"conflict beats not applied", classScope{matched: 2, conflicts: []string{"a-cp"}, notApplied: []string{"b-cp: x"}}, metav1.ConditionFalse, lbv1.LoadBalancerNameConflictReason},
		{"invalid beats all", classScope{invalid: "spec.clusterSelector: bad", conflicts: []string{"a-cp"}}, metav1.ConditionFalse, lbv1.InvalidSpecReason},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			s := tc.s
			s.class = &lbv1.LoadBalancerClass{}
			setClassReady(&s)
			c := s.class.Status.Conditions
			g.Expect(c).To(HaveLen(1))
			g.Expect(c[0].Status).To(Equal(tc.status))
			g.Expect(c[0].Reason).To(Equal(tc.reason))
			g.Expect(s.class.Status.MatchedClusters).To(Equal(tc.s.matched))
		})
	}
}
