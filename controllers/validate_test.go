package controllers

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	lbv1 "github.com/caplb/caplb/api/v1alpha1"
	"github.com/caplb/caplb/providers"
	"github.com/caplb/caplb/providers/static"
	"github.com/caplb/caplb/providers/vip"
)

func TestValidate(t *testing.T) {
	reg, err := providers.NewRegistry(static.New())
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		mutate  func(*lbv1.LoadBalancer)
		wantErr []string // substrings, all must appear; empty means valid
	}{
		{"minimal Machine LoadBalancer", func(*lbv1.LoadBalancer) {}, nil},
		{"zero targetKind means Machine", func(lb *lbv1.LoadBalancer) { lb.Spec.TargetKind = lbv1.TargetKind{} }, nil},
		{"Node LoadBalancer without cluster", func(lb *lbv1.LoadBalancer) {
			lb.Spec.TargetKind = lbv1.TargetKind{Kind: lbv1.NodeKind}
			lb.Spec.ClusterName = ""
		}, nil},
		{"fixed host and port", func(lb *lbv1.LoadBalancer) {
			lb.Spec.Endpoint = lbv1.APIEndpoint{Host: "api.example.com", Port: 443}
		}, nil},
		{"Machine without clusterName", func(lb *lbv1.LoadBalancer) { lb.Spec.ClusterName = "" },
			[]string{"spec.clusterName", "required when spec.targetKind.kind is Machine"}},
		{"bad targetKind", func(lb *lbv1.LoadBalancer) {
			lb.Spec.TargetKind = lbv1.TargetKind{APIGroup: "apps", Kind: "Deployment"}
		},
			[]string{"spec.targetKind", "must be"}},
		{"no backend", func(lb *lbv1.LoadBalancer) { lb.Spec.Backend = lbv1.Backend{} },
			[]string{"spec.backend", "set exactly one backend", "static"}},
		{"bad host", func(lb *lbv1.LoadBalancer) { lb.Spec.Endpoint.Host = "https://API:6443" },
			[]string{"spec.endpoint.host", "IP address"}},
		{"bad port", func(lb *lbv1.LoadBalancer) { lb.Spec.TargetPort = 70000 },
			[]string{"spec.targetPort", "between 1 and 65535"}},
		{"bad selector operator", func(lb *lbv1.LoadBalancer) {
			lb.Spec.Selector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "a", Operator: "Bogus"}}}
		}, []string{"spec.selector.matchExpressions[0].operator"}},
		{"In without values", func(lb *lbv1.LoadBalancer) {
			lb.Spec.Selector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "a", Operator: metav1.LabelSelectorOpIn}}}
		}, []string{"spec.selector.matchExpressions[0].values"}},
		{"bad label key", func(lb *lbv1.LoadBalancer) {
			lb.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"-bad": "x"}}
		}, []string{"spec.selector.matchLabels"}},
		{"stored interval that is not a duration", func(lb *lbv1.LoadBalancer) {
			lb.Spec.HealthCheck.Interval = storedDuration(t, `"soon"`)
		}, []string{"spec.healthCheck.interval", `"soon"`, "is not a duration: write it with units"}},
		{"stored drain period that is not a duration", func(lb *lbv1.LoadBalancer) {
			d := storedDuration(t, `"-"`)
			lb.Spec.Quiesce.DrainPeriod = &d
		}, []string{"spec.quiesce.drainPeriod", "is not a duration"}},
		{"drain longer than timeout (with default timeout)", func(lb *lbv1.LoadBalancer) {
			lb.Spec.Quiesce.DrainPeriod = &lbv1.Duration{Duration: 5 * time.Minute}
		}, []string{"spec.quiesce.drainPeriod", "must not exceed spec.quiesce.timeout (2m0s)"}},
		{"probe timeout longer than interval", func(lb *lbv1.LoadBalancer) {
			lb.Spec.HealthCheck.Timeout = lbv1.Duration{Duration: time.Minute}
		}, []string{"spec.healthCheck.timeout", "must not exceed spec.healthCheck.interval"}},
		{"probe timeout longer than interval, probes disabled", func(lb *lbv1.LoadBalancer) {
			lb.Spec.HealthCheck.Timeout = lbv1.Duration{Duration: time.Minute}
			lb.Spec.HealthCheck.Disabled = true
		}, nil},
		{"static: port other than targetPort with empty host", func(lb *lbv1.LoadBalancer) { lb.Spec.Endpoint.Port = 443 },
			[]string{"spec.endpoint.port", "spec.targetPort (6443)"}},
		{"static: duplicate address type", func(lb *lbv1.LoadBalancer) {
			lb.Spec.Backend.Static.AddressTypes = []string{"InternalIP", "InternalIP"}
		}, []string{"spec.backend.static.addressTypes[1]", "Duplicate"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			lb := newLB("lb")
			tt.mutate(lb)
			errs := Validate(lb, reg)
			if len(tt.wantErr) == 0 {
				g.Expect(errs).To(BeEmpty())
				return
			}
			g.Expect(errs).NotTo(BeEmpty())
			msg := errs.ToAggregate().Error()
			for _, want := range tt.wantErr {
				g.Expect(strings.Contains(msg, want)).To(BeTrue(), "message %q lacks %q", msg, want)
			}
		})
	}
}

// TestValidateARPBusyDrainWithSpread: the webhook and the reconciler refuse busyDrain with spread
// load balancing through the shared Validate: a spread holder's busy count never sees the
// connections it forwards, so the drain would protect none.
func TestValidateARPBusyDrainWithSpread(t *testing.T) {
	reg, err := providers.NewRegistry(vip.NewARP(vip.Options{AgentImage: "caplb-agent:test"}))
	if err != nil {
		t.Fatal(err)
	}
	arpLB := func(lbMode string, busyDrain time.Duration) *lbv1.LoadBalancer {
		lb := newLB("lb")
		lb.Spec.Endpoint.Host = "10.0.0.10"
		lb.Spec.Backend = lbv1.Backend{ARP: &lbv1.ARPBackend{LoadBalancing: lbMode}}
		lb.Spec.Backend.ARP.Agent.Timers = &lbv1.AgentTimers{BusyDrain: &lbv1.Duration{Duration: busyDrain}}
		return lb
	}
	for _, tc := range []struct {
		name      string
		lb        *lbv1.LoadBalancer
		wantError []string
	}{
		{"single with busyDrain", arpLB(lbv1.ARPLoadBalancingSingle, 20*time.Second), nil},
		{"spread without busyDrain", arpLB(lbv1.ARPLoadBalancingSpread, 0), nil},
		{"spread with busyDrain", arpLB(lbv1.ARPLoadBalancingSpread, 20*time.Second), []string{
			"spec.backend.arp.agent.timers.busyDrain", "cannot be used with spec.backend.arp.loadBalancing spread",
			"remove busyDrain (or set it to 0s), or use loadBalancing single"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			errs := Validate(tc.lb, reg)
			if tc.wantError == nil {
				g.Expect(errs).To(BeEmpty())
				return
			}
			g.Expect(errs).To(HaveLen(1))
			for _, w := range tc.wantError {
				g.Expect(errs.ToAggregate().Error()).To(ContainSubstring(w))
			}
		})
	}
}

func TestValidateUnknownBackend(t *testing.T) {
	g := NewWithT(t)
	reg, err := providers.NewRegistry() // a build without static
	g.Expect(err).NotTo(HaveOccurred())
	errs := Validate(newLB("lb"), reg)
	g.Expect(errs.ToAggregate().Error()).To(ContainSubstring(`spec.backend: Unsupported value: "static"`))
}

func TestValidHost(t *testing.T) {
	g := NewWithT(t)
	for _, h := range []string{"10.0.0.1", "fd00::1", "api.example.com", "localhost"} {
		g.Expect(lbv1.ValidHost(h)).To(BeTrue(), h)
	}
	for _, h := range []string{"API.example.com", "http://x", "x:6443", "-x", "", "::ffff:10.0.0.1", "fe80::1%eth0"} {
		g.Expect(lbv1.ValidHost(h)).To(BeFalse(), h)
	}
}

// storedDuration decodes raw as the manager's cache would decode a stored object's field.
func storedDuration(t *testing.T, raw string) lbv1.Duration {
	var d lbv1.Duration
	if err := json.Unmarshal([]byte(raw), &d); err != nil {
		t.Fatal(err)
	}
	return d
}
