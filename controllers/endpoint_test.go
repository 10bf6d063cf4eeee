package controllers

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	. "github.com/onsi/gomega"

	lbv1 "github.com/caplb/caplb/api/v1alpha1"
)

func ep(h string, p int32) lbv1.APIEndpoint { return lbv1.APIEndpoint{Host: h, Port: p} }

func TestDecideClusterEndpoint(t *testing.T) {
	tests := []struct {
		name         string
		theirs, ours lbv1.APIEndpoint
		want         clusterDecision
	}{
		{"empty Cluster, ours known → publish", ep("", 0), ep("10.0.0.1", 6443), decidePublish},
		{"empty Cluster, ours unknown → wait", ep("", 0), ep("", 0), decideWait},
		{"equal → in sync", ep("10.0.0.1", 6443), ep("10.0.0.1", 6443), decideInSync},
		{"other host → mismatch", ep("10.0.0.2", 6443), ep("10.0.0.1", 6443), decideMismatch},
		{"other port → mismatch", ep("10.0.0.1", 443), ep("10.0.0.1", 6443), decideMismatch},
		{"half-set Cluster (host only) is never completed", ep("10.0.0.1", 0), ep("10.0.0.1", 6443), decideMismatch},
		{"half-set Cluster (port only) is never completed", ep("", 6443), ep("10.0.0.1", 6443), decideMismatch},
		{"Cluster set, ours unknown → mismatch", ep("10.0.0.1", 6443), ep("", 0), decideMismatch},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			NewWithT(t).Expect(decideClusterEndpoint(tt.theirs, tt.ours)).To(Equal(tt.want))
		})
	}
}

func TestDecideAdoption(t *testing.T) {
	tests := []struct {
		name                 string
		spec, status, theirs lbv1.APIEndpoint
		wasInSync            bool
		adopt                bool
		refusal              string
		publishedBy          string // the Cluster's EndpointPublishedByAnnotation
		members              []string
	}{
		{"host empty, Cluster preset → adopt", ep("", 0), ep("", 0), ep("api.example.com", 443), false, true, "", "", nil},
		{"host empty, spec port equal → adopt", ep("", 443), ep("", 0), ep("api.example.com", 443), false, true, "", "", nil},
		{"host set → never adopt", ep("10.0.0.1", 0), ep("10.0.0.1", 6443), ep("api.example.com", 443), false, false, "", "", nil},
		{"Cluster empty → nothing to adopt", ep("", 0), ep("", 0), ep("", 0), false, false, "", "", nil},
		{"Cluster half-set → nothing to adopt", ep("", 0), ep("", 0), ep("api.example.com", 0), false, false, "", "", nil},
		{"Cluster equals our published endpoint → in sync", ep("", 0), ep("10.0.0.1", 6443), ep("10.0.0.1", 6443), false, false, "", "", nil},
		{"we published before and our endpoint moved → no adoption", ep("", 0), ep("10.0.0.2", 6443), ep("10.0.0.1", 6443), true, false, "", "", nil},
		{"spec port conflicts → refused", ep("", 6443), ep("", 0), ep("api.example.com", 443), false, false, "another port", "", nil},
		{"Cluster host not acceptable to our schema → refused", ep("", 0), ep("", 0), ep("API.Example.com", 443), false, false, "lower-case", "", nil},
		{"IPv4-mapped IPv6 (CEL's isIP rejects it) → refused", ep("", 0), ep("", 0), ep("::ffff:10.0.0.1", 443), false, false, "not an IP address", "", nil},
		// A crash between the Cluster patch and the status patch: condition and status lost.
		{"our own earlier publication → refused", ep("", 0), ep("", 0), ep("10.0.0.7", 6443), false, false, "published by this LoadBalancer", "lb", nil},
		{"one of our members' addresses → refused", ep("", 0), ep("", 0), ep("10.0.0.7", 6443), false, false, "one of this LoadBalancer's members", "", []string{"10.0.0.7"}},
		{"an address that is no member's → adopt", ep("", 0), ep("", 0), ep("10.0.0.9", 6443), false, true, "", "", []string{"10.0.0.7"}},
		// Several LoadBalancers per Cluster: another's published endpoint is not a person's choice.
		{"another LoadBalancer's publication → refused", ep("", 0), ep("", 0), ep("10.0.0.7", 6443), false, false, "published by LoadBalancer internal", "internal", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			addrs := map[string]bool{}
			for _, a := range tt.members {
				addrs[a] = true
			}
			adopt, refusal := decideAdoption(tt.spec, tt.status, tt.theirs, tt.wasInSync, tt.publishedBy, "lb", addrs)
			g.Expect(adopt).To(Equal(tt.adopt))
			if tt.refusal == "" {
				g.Expect(refusal).To(BeEmpty())
			} else {
				g.Expect(refusal).To(ContainSubstring(tt.refusal))
			}
		})
	}
}

func TestLoadBalancerRefNames(t *testing.T) {
	lb := newLB("lb")
	tests := []struct {
		name string
		ref  map[string]any
		want bool
	}{
		{"contract-versioned ref", map[string]any{"apiGroup": "loadbalancer.cluster.x-k8s.io", "kind": "LoadBalancer", "name": "lb"}, true},
		{"ObjectReference", map[string]any{"apiVersion": "loadbalancer.cluster.x-k8s.io/v1alpha1", "kind": "LoadBalancer", "name": "lb", "namespace": "ns"}, true},
		{"name only", map[string]any{"name": "lb"}, true},
		{"other name", map[string]any{"name": "lb2"}, false},
		{"other kind", map[string]any{"kind": "AWSLoadBalancer", "name": "lb"}, false},
		{"other group", map[string]any{"apiGroup": "infrastructure.cluster.x-k8s.io", "name": "lb"}, false},
		{"other apiVersion group", map[string]any{"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "name": "lb"}, false},
		{"other namespace", map[string]any{"name": "lb", "namespace": "elsewhere"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			NewWithT(t).Expect(loadBalancerRefNames(tt.ref, lb)).To(Equal(tt.want))
		})
	}
}

func TestDecideOlderPublisher(t *testing.T) {
	at := func(name string, sec int64, publish bool, deleting bool) lbv1.LoadBalancer {
		lb := lbv1.LoadBalancer{}
		lb.Name = name
		lb.Spec.ClusterName = "c"
		lb.CreationTimestamp = metav1.Unix(sec, 0)
		lb.Spec.PublishClusterEndpoint = ptr.To(publish)
		if deleting {
			now := metav1.Unix(100, 0)
			lb.DeletionTimestamp = &now
		}
		return lb
	}
	self := at("b", 10, true, false)
	tests := []struct {
		name  string
		peers []lbv1.LoadBalancer
		want  string
	}{
		{"alone", []lbv1.LoadBalancer{self}, ""},
		{"an older publisher wins", []lbv1.LoadBalancer{self, at("z", 5, true, false)}, "z"},
		{"a younger publisher yields to us", []lbv1.LoadBalancer{self, at("a", 20, true, false)}, ""},
		{"same second: the name breaks the tie", []lbv1.LoadBalancer{self, at("a", 10, true, false)}, "a"},
		{"an older non-publisher is no rival", []lbv1.LoadBalancer{self, at("a", 5, false, false)}, ""},
		{"an older publisher being deleted yields", []lbv1.LoadBalancer{self, at("a", 5, true, true)}, ""},
		{"the oldest of several is named", []lbv1.LoadBalancer{at("y", 7, true, false), self, at("x", 3, true, false)}, "x"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			NewWithT(t).Expect(decideOlderPublisher(&self, tt.peers)).To(Equal(tt.want))
		})
	}
}

func TestDataPlaneConflicts(t *testing.T) {
	mk := func(name string, sec int64, b lbv1.Backend, sel ...string) lbv1.LoadBalancer {
		lb := lbv1.LoadBalancer{}
		lb.Name, lb.Spec.ClusterName, lb.Spec.Backend = name, "c", b
		lb.CreationTimestamp = metav1.Unix(sec, 0)
		if len(sel) == 2 {
			lb.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{sel[0]: sel[1]}}
		}
		return lb
	}
	arp := lbv1.Backend{ARP: &lbv1.ARPBackend{}}
	bgp := lbv1.Backend{BGP: &lbv1.BGPBackend{}}
	static := lbv1.Backend{Static: &lbv1.StaticBackend{}}
	wg := lbv1.Backend{WireGuard: &lbv1.WireGuardBackend{}}
	md := func(v string) []string { return []string{"cluster.x-k8s.io/deployment-name", v} }
	tests := []struct {
		name  string
		self  lbv1.LoadBalancer
		peers []lbv1.LoadBalancer
		want  []string // substrings of the error; none: admitted
	}{
		{"static beside arp", mk("ext", 10, static), []lbv1.LoadBalancer{mk("int", 5, arp)}, nil},
		{"arp beside static", mk("int", 10, arp), []lbv1.LoadBalancer{mk("ext", 5, static)}, nil},
		{"wireguard beside an older arp", mk("ext", 10, wg), []lbv1.LoadBalancer{mk("int", 5, arp)},
			[]string{"LoadBalancer int of Cluster c already runs the node agent (arp backend)", "c-caplb-agent", "spec.backend.static"}},
		{"arp older than wireguard keeps running", mk("int", 5, arp), []lbv1.LoadBalancer{mk("ext", 10, wg)}, nil},
		{"two control-plane VIPs", mk("b", 10, bgp), []lbv1.LoadBalancer{mk("a", 5, arp)},
			[]string{"LoadBalancer a of Cluster c already runs the node agent (arp backend)", "spec.backend.static", "spec.selector at worker Machines"}},
		{"a worker VIP beside the control plane's", mk("ingress", 10, arp, md("c-md-0")...), []lbv1.LoadBalancer{mk("cp", 5, arp)}, nil},
		{"a control-plane VIP younger than a worker VIP", mk("cp", 10, bgp), []lbv1.LoadBalancer{mk("ingress", 5, arp, md("c-md-0")...)}, nil},
		{"a worker VIP beside a control plane on wireguard", mk("ingress", 10, arp, md("c-md-0")...), []lbv1.LoadBalancer{mk("cp", 5, wg)}, nil},
		{"two worker VIPs on other MachineDeployments", mk("b", 10, arp, md("c-md-1")...), []lbv1.LoadBalancer{mk("a", 5, arp, md("c-md-0")...)}, nil},
		{"two worker VIPs on the same MachineDeployment", mk("b", 10, arp, md("c-md-0")...), []lbv1.LoadBalancer{mk("a", 5, arp, md("c-md-0")...)},
			[]string{"LoadBalancer a of Cluster c already runs the node agent (arp backend) on Machines that this one's spec.selector can pick too", "spec.selector"}},
		{"a worker VIP beside an everything selector", mk("b", 10, arp, md("c-md-0")...), []lbv1.LoadBalancer{mk("a", 5, arp, "role", "any")},
			[]string{"can pick too"}},
		{"a worker VIP named like the Cluster: same Secret", mk("c", 10, arp, md("c-md-0")...), []lbv1.LoadBalancer{mk("cp", 5, arp)},
			[]string{"bootstrap Secret c-caplb-agent", "give this LoadBalancer another name"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			errs := dataPlaneConflicts(&tt.self, tt.peers)
			if tt.want == nil {
				g.Expect(errs).To(BeEmpty())
				return
			}
			g.Expect(errs).To(HaveLen(1))
			g.Expect(errs[0].Field).To(HavePrefix("spec.backend."))
			for _, w := range tt.want {
				g.Expect(errs.ToAggregate().Error()).To(ContainSubstring(w))
			}
		})
	}
}
