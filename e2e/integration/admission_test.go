package integration

import (
	"context"
	"io/fs"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lbv1 "github.com/caplb/caplb/api/v1alpha1"
	"github.com/caplb/caplb/config/samples"
	"github.com/caplb/caplb/e2e/harness"
)

// lbObject builds a LoadBalancer as a user's manifest would, as unstructured: a typed client
// would drop the zero values (port: 0) these cases send on purpose.
func lbObject(ns, name string, spec map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
	u.SetGroupVersionKind(lbv1.GroupVersion.WithKind("LoadBalancer"))
	u.SetNamespace(ns)
	u.SetName(name)
	return u
}

func validSpec() map[string]any {
	return map[string]any{
		"clusterName": "c",
		"endpoint":    map[string]any{"host": "api.example.com", "port": int64(6443)},
		"backend":     map[string]any{"static": map[string]any{}},
	}
}

// Bad manifests are rejected by the API server with messages that name the field.
func testAdmission(t *testing.T, s *suite) {
	ctx := t.Context()
	ns, err := s.env.CreateNamespace(ctx, "admission")
	if err != nil {
		t.Fatal(err)
	}

	creates := []struct {
		name   string
		mutate func(spec map[string]any)
		// want are substrings the rejection message must contain.
		want []string
	}{
		{"no backend", func(s map[string]any) { s["backend"] = map[string]any{} }, []string{"spec.backend"}},
		{"two backends", func(s map[string]any) {
			// MaxProperties=1 on spec.backend: exactly one kind.
			s["backend"] = map[string]any{"static": map[string]any{}, "arp": map[string]any{}}
		}, []string{"spec.backend"}},
		{"endpoint port 0", func(s map[string]any) {
			s["endpoint"] = map[string]any{"host": "api.example.com", "port": int64(0)}
		}, []string{"spec.endpoint.port"}},
		{"endpoint port 70000", func(s map[string]any) {
			s["endpoint"] = map[string]any{"host": "api.example.com", "port": int64(70000)}
		}, []string{"spec.endpoint.port"}},
		{"targetPort 0", func(s map[string]any) { s["targetPort"] = int64(0) }, []string{"spec.targetPort"}},
		{"targetPort 70000", func(s map[string]any) { s["targetPort"] = int64(70000) }, []string{"spec.targetPort"}},
		{"host with scheme", func(s map[string]any) {
			s["endpoint"] = map[string]any{"host": "https://api.example.com", "port": int64(6443)}
		}, []string{"spec.endpoint.host", "without scheme"}},
		{"host with port", func(s map[string]any) {
			s["endpoint"] = map[string]any{"host": "api.example.com:6443", "port": int64(6443)}
		}, []string{"spec.endpoint.host"}},
		{"Machine targets without clusterName", func(s map[string]any) { delete(s, "clusterName") },
			[]string{"spec.clusterName", "required"}},
		{"unknown target kind", func(s map[string]any) {
			s["targetKind"] = map[string]any{"apiGroup": "apps", "kind": "Deployment"}
		}, []string{"spec.targetKind"}},
		{"whenCordoned with Machine targets", func(s map[string]any) {
			s["quiesce"] = map[string]any{"whenCordoned": true}
		}, []string{"spec.quiesce.whenCordoned", "Node targets only"}},
		{"drain longer than timeout", func(s map[string]any) {
			s["quiesce"] = map[string]any{"drainPeriod": "5m", "timeout": "1m"}
		}, []string{"spec.quiesce", "drainPeriod"}},
		{"arp with a DNS host", func(s map[string]any) {
			s["backend"] = map[string]any{"arp": map[string]any{}}
		}, []string{"spec.endpoint.host must be an IP address for the arp and bgp backends"}},
		{"arp without a VIP source", func(s map[string]any) {
			delete(s, "endpoint")
			s["backend"] = map[string]any{"arp": map[string]any{}}
		}, []string{"spec.backend.arp needs exactly one VIP source"}},
		{"arp with host and pool", func(s map[string]any) {
			s["endpoint"] = map[string]any{"host": "10.0.0.10"}
			s["backend"] = map[string]any{"arp": map[string]any{"addressFrom": map[string]any{
				"poolRef": map[string]any{"apiGroup": "ipam.cluster.x-k8s.io", "kind": "InClusterIPPool", "name": "p"}}}}
		}, []string{"spec.backend.arp needs exactly one VIP source", "not both"}},
		{"bgp peer address not an IP", func(s map[string]any) {
			s["endpoint"] = map[string]any{"host": "10.0.0.10"}
			s["backend"] = map[string]any{"bgp": map[string]any{"asn": int64(64512),
				"peers": []any{map[string]any{"address": "tor1", "asn": int64(64500)}}}}
		}, []string{"spec.backend.bgp.peers[].address must be an IP address"}},
		{"bgp duplicate peers", func(s map[string]any) {
			s["endpoint"] = map[string]any{"host": "10.0.0.10"}
			peer := map[string]any{"address": "10.0.0.1", "asn": int64(64500)}
			s["backend"] = map[string]any{"bgp": map[string]any{"asn": int64(64512), "peers": []any{peer, peer}}}
		}, []string{"spec.backend.bgp.peers[].address must be unique"}},
		{"bgp without peers", func(s map[string]any) {
			s["endpoint"] = map[string]any{"host": "10.0.0.10"}
			s["backend"] = map[string]any{"bgp": map[string]any{"asn": int64(64512)}}
		}, []string{"spec.backend.bgp.peers"}},
		{"agent flavor unknown", func(s map[string]any) {
			s["endpoint"] = map[string]any{"host": "10.0.0.10"}
			s["backend"] = map[string]any{"arp": map[string]any{"agent": map[string]any{"flavor": "talos"}}}
		}, []string{"spec.backend.arp.agent.flavor"}},
		{"extra port out of range", func(s map[string]any) {
			s["endpoint"] = map[string]any{"host": "10.0.0.10"}
			s["backend"] = map[string]any{"arp": map[string]any{"extraPorts": []any{int64(70000)}}}
		}, []string{"spec.backend.arp.extraPorts"}},
		{"duration without units", func(s map[string]any) {
			s["healthCheck"] = map[string]any{"interval": "soon"}
		}, []string{"spec.healthCheck.interval", "must be a non-negative duration with units"}},
		{"duration too large to parse", func(s map[string]any) {
			s["healthCheck"] = map[string]any{"timeout": "999999h999999h999999h"}
		}, []string{"spec.healthCheck.timeout"}},
		{"probe interval out of range", func(s map[string]any) {
			s["healthCheck"] = map[string]any{"interval": "2h"}
		}, []string{"spec.healthCheck.interval must be between 100ms and 1h"}},
		{"negative drain period", func(s map[string]any) {
			s["quiesce"] = map[string]any{"drainPeriod": "-5s"}
		}, []string{"spec.quiesce.drainPeriod", "must be a non-negative duration"}},
		{"quiesce timeout without units", func(s map[string]any) {
			s["quiesce"] = map[string]any{"timeout": "120"}
		}, []string{"spec.quiesce.timeout", "must be a non-negative duration with units"}},
		{"agent timer not a duration", func(s map[string]any) {
			s["endpoint"] = map[string]any{"host": "10.0.0.10"}
			s["backend"] = map[string]any{"arp": map[string]any{"agent": map[string]any{"timers": map[string]any{"settle": "later"}}}}
		}, []string{"spec.backend.arp.agent.timers.settle", "must be a non-negative duration"}},
		{"agent probe interval out of range", func(s map[string]any) {
			s["endpoint"] = map[string]any{"host": "10.0.0.10"}
			s["backend"] = map[string]any{"arp": map[string]any{"agent": map[string]any{"timers": map[string]any{"probeInterval": "1h"}}}}
		}, []string{"agent.timers.probeInterval must be between 10ms and 10s"}},
		{"agent busy drain out of range", func(s map[string]any) {
			s["endpoint"] = map[string]any{"host": "10.0.0.10"}
			s["backend"] = map[string]any{"arp": map[string]any{"agent": map[string]any{"timers": map[string]any{"busyDrain": "10m"}}}}
		}, []string{"agent.timers.busyDrain must be between 0s and 5m"}},
		{"agent busy drain with spread load balancing", func(s map[string]any) {
			s["endpoint"] = map[string]any{"host": "10.0.0.10"}
			s["backend"] = map[string]any{"arp": map[string]any{"loadBalancing": "spread",
				"agent": map[string]any{"timers": map[string]any{"busyDrain": "20s"}}}}
		}, []string{"spec.backend.arp.agent.timers.busyDrain cannot be used with spec.backend.arp.loadBalancing spread", "loadBalancing single"}},
		{"bgp hold time below RFC 4271's minimum", func(s map[string]any) {
			s["endpoint"] = map[string]any{"host": "10.0.0.10"}
			s["backend"] = map[string]any{"bgp": map[string]any{"asn": int64(64512),
				"peers": []any{map[string]any{"address": "10.0.0.1", "asn": int64(64500), "holdTime": "2s"}}}}
		}, []string{"spec.backend.bgp.peers[0].holdTime", "whole seconds between 3s and 65535s"}},
		{"bgp hold time in fractions of a second", func(s map[string]any) {
			s["endpoint"] = map[string]any{"host": "10.0.0.10"}
			s["backend"] = map[string]any{"bgp": map[string]any{"asn": int64(64512),
				"peers": []any{map[string]any{"address": "10.0.0.1", "asn": int64(64500), "holdTime": "3500ms"}}}}
		}, []string{"spec.backend.bgp.peers[0].holdTime", "whole seconds"}},
		{"bgp keepalive not shorter than hold time", func(s map[string]any) {
			s["endpoint"] = map[string]any{"host": "10.0.0.10"}
			s["backend"] = map[string]any{"bgp": map[string]any{"asn": int64(64512),
				"peers": []any{map[string]any{"address": "10.0.0.1", "asn": int64(64500), "holdTime": "6s", "keepaliveTime": "6s"}}}}
		}, []string{"keepaliveTime must be shorter than holdTime"}},
		{"bfd interval below 10ms", func(s map[string]any) {
			s["endpoint"] = map[string]any{"host": "10.0.0.10"}
			s["backend"] = map[string]any{"bgp": map[string]any{"asn": int64(64512),
				"peers": []any{map[string]any{"address": "10.0.0.1", "asn": int64(64500), "bfd": map[string]any{"minTx": "5ms"}}}}}
		}, []string{"spec.backend.bgp.peers[].bfd.minTx must be between 10ms and 60s"}},
		{"bfd multiplier 1", func(s map[string]any) {
			s["endpoint"] = map[string]any{"host": "10.0.0.10"}
			s["backend"] = map[string]any{"bgp": map[string]any{"asn": int64(64512),
				"peers": []any{map[string]any{"address": "10.0.0.1", "asn": int64(64500), "bfd": map[string]any{"multiplier": int64(1)}}}}}
		}, []string{"spec.backend.bgp.peers[0].bfd.multiplier", "greater than or equal to 2"}},
		{"bfd to an IPv6 router", func(s map[string]any) {
			s["endpoint"] = map[string]any{"host": "fd00::10"}
			s["backend"] = map[string]any{"bgp": map[string]any{"asn": int64(64512),
				"peers": []any{map[string]any{"address": "fd00::1", "asn": int64(64500), "bfd": map[string]any{}}}}}
		}, []string{"bfd: BFD runs to IPv4 routers only"}},
		{"kube-vip takeover from a pool", func(s map[string]any) {
			delete(s, "endpoint")
			s["backend"] = map[string]any{"arp": map[string]any{"takeOver": map[string]any{"kubeVIP": map[string]any{}},
				"addressFrom": map[string]any{"poolRef": map[string]any{"apiGroup": "ipam.cluster.x-k8s.io", "kind": "InClusterIPPool", "name": "p"}}}}
		}, []string{"spec.backend.arp.takeOver cannot be used with spec.backend.arp.addressFrom", "set spec.endpoint.host to that address",
			"spec.endpoint.host must be set to the VIP with spec.backend.arp.takeOver"}},
		{"kube-vip takeover without a Cluster", func(s map[string]any) {
			delete(s, "clusterName")
			s["targetKind"] = map[string]any{"apiGroup": "", "kind": "Node"}
			s["endpoint"] = map[string]any{"host": "10.0.0.10"}
			s["backend"] = map[string]any{"arp": map[string]any{"takeOver": map[string]any{"kubeVIP": map[string]any{}}}}
		}, []string{"spec.clusterName is required with spec.backend.arp.takeOver"}},
		{"takeover naming no VIP manager", func(s map[string]any) {
			s["endpoint"] = map[string]any{"host": "10.0.0.10"}
			s["backend"] = map[string]any{"arp": map[string]any{"takeOver": map[string]any{}}}
		}, []string{"spec.backend.arp.takeOver"}},
		{"kube-vip lease name not a name", func(s map[string]any) {
			s["endpoint"] = map[string]any{"host": "10.0.0.10"}
			s["backend"] = map[string]any{"arp": map[string]any{"takeOver": map[string]any{"kubeVIP": map[string]any{"leaseName": "kube-system/plndr-cp-lock"}}}}
		}, []string{"spec.backend.arp.takeOver.kubeVIP.leaseName", "takeOver.kubeVIP.leaseName must be a Lease name"}},
		{"bgp kube-vip takeover from a pool", func(s map[string]any) {
			delete(s, "endpoint")
			s["backend"] = map[string]any{"bgp": map[string]any{"asn": int64(64512),
				"peers":       []any{map[string]any{"address": "10.0.0.1", "asn": int64(64500)}},
				"takeOver":    map[string]any{"kubeVIP": map[string]any{}},
				"addressFrom": map[string]any{"poolRef": map[string]any{"apiGroup": "ipam.cluster.x-k8s.io", "kind": "InClusterIPPool", "name": "p"}}}}
		}, []string{"spec.backend.bgp.takeOver cannot be used with spec.backend.bgp.addressFrom", "set spec.endpoint.host to that address",
			"spec.endpoint.host must be set to the VIP with spec.backend.bgp.takeOver"}},
		{"bgp kube-vip takeover without a Cluster", func(s map[string]any) {
			delete(s, "clusterName")
			s["targetKind"] = map[string]any{"apiGroup": "", "kind": "Node"}
			s["endpoint"] = map[string]any{"host": "10.0.0.10"}
			s["backend"] = map[string]any{"bgp": map[string]any{"asn": int64(64512),
				"peers":    []any{map[string]any{"address": "10.0.0.1", "asn": int64(64500)}},
				"takeOver": map[string]any{"kubeVIP": map[string]any{}}}}
		}, []string{"spec.clusterName is required with spec.backend.bgp.takeOver"}},
		{"bgp takeover naming no VIP manager", func(s map[string]any) {
			s["endpoint"] = map[string]any{"host": "10.0.0.10"}
			s["backend"] = map[string]any{"bgp": map[string]any{"asn": int64(64512),
				"peers":    []any{map[string]any{"address": "10.0.0.1", "asn": int64(64500)}},
				"takeOver": map[string]any{}}}
		}, []string{"spec.backend.bgp.takeOver"}},
		{"arp load balancing not a mode", func(s map[string]any) {
			s["endpoint"] = map[string]any{"host": "10.0.0.10"}
			s["backend"] = map[string]any{"arp": map[string]any{"loadBalancing": "roundrobin"}}
		}, []string{"spec.backend.arp.loadBalancing", `supported values: "single", "spread"`}},
		{"agent interface with a slash", func(s map[string]any) {
			s["endpoint"] = map[string]any{"host": "10.0.0.10"}
			s["backend"] = map[string]any{"arp": map[string]any{"agent": map[string]any{"interface": "eth0/1"}}}
		}, []string{"spec.backend.arp.agent.interface", "must be a Linux interface name"}},
		{"agent caFile relative", func(s map[string]any) {
			s["endpoint"] = map[string]any{"host": "10.0.0.10"}
			s["backend"] = map[string]any{"arp": map[string]any{"agent": map[string]any{"caFile": "pki/ca.crt"}}}
		}, []string{"spec.backend.arp.agent.caFile", "must be an absolute path"}},
		{"agent image with a space", func(s map[string]any) {
			s["endpoint"] = map[string]any{"host": "10.0.0.10"}
			s["backend"] = map[string]any{"arp": map[string]any{"agent": map[string]any{"image": "registry/agent v1"}}}
		}, []string{"spec.backend.arp.agent.image", "without spaces"}},
		{"pool kind not a kind", func(s map[string]any) {
			delete(s, "endpoint")
			s["backend"] = map[string]any{"arp": map[string]any{"addressFrom": map[string]any{
				"poolRef": map[string]any{"apiGroup": "ipam.cluster.x-k8s.io", "kind": "in-cluster pool", "name": "p"}}}}
		}, []string{"spec.backend.arp.addressFrom.poolRef.kind", "must be a kind name"}},
		{"bgp peer on loopback", func(s map[string]any) {
			s["endpoint"] = map[string]any{"host": "10.0.0.10"}
			s["backend"] = map[string]any{"bgp": map[string]any{"asn": int64(64512),
				"peers": []any{map[string]any{"address": "127.0.0.1", "asn": int64(64500)}}}}
		}, []string{"spec.backend.bgp.peers[0].address", "unicast address"}},
		{"bgp password Secret name not a name", func(s map[string]any) {
			s["endpoint"] = map[string]any{"host": "10.0.0.10"}
			s["backend"] = map[string]any{"bgp": map[string]any{"asn": int64(64512),
				"peers": []any{map[string]any{"address": "10.0.0.1", "asn": int64(64500),
					"passwordSecretRef": map[string]any{"name": "Router Password", "key": "pass word"}}}}}
		}, []string{"passwordSecretRef.name must be a Secret name", "passwordSecretRef.key must be a Secret data key"}},
		{"wireguard health interval not a duration", func(s map[string]any) {
			s["backend"] = map[string]any{"wireguard": map[string]any{
				"gateways": []any{map[string]any{"name": "gw", "address": "198.51.100.1"}},
				"health":   map[string]any{"interval": "often"}}}
		}, []string{"spec.backend.wireguard.health.interval"}},
	}
	for _, vip := range []string{"127.0.0.10", "::1", "224.0.0.18", "ff02::12", "0.0.0.0", "::", "169.254.10.10", "fe80::10", "255.255.255.255"} {
		creates = append(creates, struct {
			name   string
			mutate func(spec map[string]any)
			want   []string
		}{"arp VIP " + vip, func(s map[string]any) {
			s["endpoint"] = map[string]any{"host": vip}
			s["backend"] = map[string]any{"arp": map[string]any{}}
		}, []string{"spec.endpoint.host is the VIP of the arp and bgp backends and must be a unicast address"}})
	}
	creates = append(creates, struct {
		name   string
		mutate func(spec map[string]any)
		want   []string
	}{"arp VIP IPv4-mapped IPv6", func(s map[string]any) {
		s["endpoint"] = map[string]any{"host": "::ffff:10.0.0.10"}
		s["backend"] = map[string]any{"arp": map[string]any{}}
	}, []string{"spec.endpoint.host"}})
	for _, tc := range creates {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			spec := validSpec()
			tc.mutate(spec)
			err := s.env.Client.Create(ctx, lbObject(ns, "bad", spec), client.FieldValidation("Strict"))
			g.Expect(err).To(HaveOccurred(), "the API server accepted it")
			g.Expect(apierrors.IsInvalid(err) || apierrors.IsBadRequest(err)).To(BeTrue(), "%v", err)
			for _, w := range tc.want {
				g.Expect(err.Error()).To(ContainSubstring(w))
			}
			t.Logf("rejected: %v", err)
		})
	}

	updates := []struct {
		name   string
		mutate func(spec map[string]any)
		want   []string
	}{
		{"change endpoint host", func(s map[string]any) {
			s["endpoint"].(map[string]any)["host"] = "api2.example.com"
		}, []string{"spec.endpoint", "host cannot change"}},
		{"change endpoint port", func(s map[string]any) {
			s["endpoint"].(map[string]any)["port"] = int64(7443)
		}, []string{"spec.endpoint", "port cannot change"}},
		{"change backend kind", func(s map[string]any) {
			// With only static served, "another kind" can only be "no kind"; the message
			// must still name spec.backend.
			s["backend"] = map[string]any{}
		}, []string{"spec.backend"}},
		{"change backend kind to arp", func(s map[string]any) {
			s["backend"] = map[string]any{"arp": map[string]any{}}
		}, []string{"spec.backend kind cannot change"}},
		{"change clusterName", func(s map[string]any) { s["clusterName"] = "other" },
			[]string{"spec.clusterName", "immutable"}},
	}
	for i, tc := range updates {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			name := "good-" + string(rune('a'+i))
			g.Expect(s.env.Client.Create(ctx, lbObject(ns, name, validSpec()))).To(Succeed())
			err := updateLBSpec(ctx, s, ns, name, tc.mutate)
			g.Expect(err).To(HaveOccurred(), "the API server accepted the update")
			g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%v", err)
			for _, w := range tc.want {
				g.Expect(err.Error()).To(ContainSubstring(w))
			}
			t.Logf("rejected: %v", err)
		})
	}
}

// thirdPartyKinds are kinds in the samples whose CRDs no module here ships (the in-cluster IPAM
// provider's pools, the k3s and RKE2 control planes). Every other object, KubeadmControlPlane and
// KubeadmConfigTemplate included (CAPI's real CRDs), must be accepted.
var thirdPartyKinds = map[string]bool{
	"InClusterIPPool": true, "GlobalInClusterIPPool": true, "KThreesControlPlane": true, "RKE2ControlPlane": true,
}

// The user-facing samples in config/samples are valid manifests: the API server accepts each
// object (server-side dry run, so schema and CEL rules run and nothing is stored).
func testSamplesValid(t *testing.T, s *suite) {
	entries, err := fs.ReadDir(samples.FS, ".")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".yaml") {
			continue
		}
		t.Run(e.Name(), func(t *testing.T) {
			g := NewWithT(t)
			data, err := fs.ReadFile(samples.FS, e.Name())
			g.Expect(err).NotTo(HaveOccurred())
			objs, err := harness.Decode(data)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(objs).NotTo(BeEmpty())
			for _, o := range objs {
				err := s.env.Client.Create(t.Context(), o, client.DryRunAll, client.FieldValidation("Strict"))
				if meta.IsNoMatchError(err) && thirdPartyKinds[o.GetKind()] {
					t.Logf("%s %s: no CRD for this provider's kind here; not validated", o.GetKind(), o.GetName())
					continue
				}
				g.Expect(err).To(Succeed(), "%s %s", o.GetKind(), o.GetName())
			}
		})
		n++
	}
	if n < 4 {
		t.Fatalf("expected the user-facing samples in config/samples, found %d files", n)
	}
}

// updateLBSpec reads the LoadBalancer as unstructured, applies mutate to its spec and updates it.
// A conflict with the controller's own writes (finalizer, status) is retried; the first other
// answer is returned.
func updateLBSpec(ctx context.Context, s *suite, ns, name string, mutate func(spec map[string]any)) error {
	return retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(lbv1.GroupVersion.WithKind("LoadBalancer"))
		if err := s.env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, u); err != nil {
			return err
		}
		spec, _, _ := unstructured.NestedMap(u.Object, "spec")
		mutate(spec)
		if err := unstructured.SetNestedMap(u.Object, spec, "spec"); err != nil {
			return err
		}
		return s.env.Client.Update(ctx, u)
	})
}

// The rules that refuse bad values accept every form the docs show: the refusals above must not
// come from rules that refuse everything.
func testAdmissionAcceptsGoodValues(t *testing.T, s *suite) {
	ns, err := s.env.CreateNamespace(t.Context(), "admission-good")
	if err != nil {
		t.Fatal(err)
	}
	vip := func(host string, backend map[string]any) func(map[string]any) {
		return func(s map[string]any) {
			s["endpoint"] = map[string]any{"host": host}
			s["backend"] = backend
		}
	}
	peer := func(extra map[string]any) map[string]any {
		p := map[string]any{"address": "10.0.0.1", "asn": int64(64500)}
		for k, v := range extra {
			p[k] = v
		}
		return map[string]any{"bgp": map[string]any{"asn": int64(64512), "peers": []any{p}}}
	}
	cases := []struct {
		name   string
		mutate func(spec map[string]any)
	}{
		{"durations in every written form", func(s map[string]any) {
			s["healthCheck"] = map[string]any{"interval": "1m30s", "timeout": "1.5s"}
			s["quiesce"] = map[string]any{"drainPeriod": "0", "timeout": "2m"}
		}},
		{"zero drain period", func(s map[string]any) { s["quiesce"] = map[string]any{"drainPeriod": "0s"} }},
		{"zero interval means the default", func(s map[string]any) { s["healthCheck"] = map[string]any{"interval": "0s"} }},
		{"arp VIP IPv4", vip("10.0.0.10", map[string]any{"arp": map[string]any{}})},
		{"arp VIP IPv6", vip("fd00::10", map[string]any{"arp": map[string]any{}})},
		{"arp VIP public", vip("198.51.100.10", map[string]any{"arp": map[string]any{}})},
		{"arp spread", vip("10.0.0.10", map[string]any{"arp": map[string]any{"loadBalancing": "spread"}})},
		{"arp spread with busyDrain 0s", vip("10.0.0.10", map[string]any{"arp": map[string]any{"loadBalancing": "spread",
			"agent": map[string]any{"timers": map[string]any{"busyDrain": "0s"}}}})},
		{"arp timers", vip("10.0.0.10", map[string]any{"arp": map[string]any{"agent": map[string]any{"timers": map[string]any{
			"probeInterval": "200ms", "probeTimeout": "100ms", "contactTimeout": "1s", "settle": "0s", "drain": "500ms", "busyDrain": "20s"}}}})},
		{"kube-vip takeover with defaults", vip("10.0.0.10", map[string]any{"arp": map[string]any{"takeOver": map[string]any{"kubeVIP": map[string]any{}}}})},
		{"kube-vip takeover spelled out", vip("fd00::10", map[string]any{"arp": map[string]any{"takeOver": map[string]any{"kubeVIP": map[string]any{
			"leaseNamespace": "kube-vip", "leaseName": "plndr-cp-lock.v2", "acknowledgeServiceVIPs": true}}}})},
		{"bgp kube-vip takeover", vip("10.0.0.10", func() map[string]any {
			b := peer(nil)
			b["bgp"].(map[string]any)["takeOver"] = map[string]any{"kubeVIP": map[string]any{"leaseName": "plndr-cp-lock", "acknowledgeServiceVIPs": true}}
			return b
		}())},
		{"bgp timers", vip("10.0.0.10", peer(map[string]any{"holdTime": "3s", "keepaliveTime": "1s", "connectRetry": "1m"}))},
		{"bgp keepalive below the default hold time", vip("10.0.0.10", peer(map[string]any{"keepaliveTime": "3s"}))},
		{"bgp BFD", vip("10.0.0.10", peer(map[string]any{"bfd": map[string]any{"minRx": "300ms", "minTx": "100ms", "multiplier": int64(3)}}))},
		{"bgp BFD with defaults", vip("10.0.0.10", peer(map[string]any{"bfd": map[string]any{}}))},
		{"agent paths and names", vip("10.0.0.10", map[string]any{"arp": map[string]any{"agent": map[string]any{
			"interface": "bond0.100", "caFile": "/etc/kubernetes/pki/ca.crt", "image": "registry.example.com:5000/caplb/agent:v1@sha256:0123"}}})},
		{"bgp link-local router and password Secret", vip("fd00::10", peer(map[string]any{"address": "fe80::1",
			"passwordSecretRef": map[string]any{"name": "bgp.passwords", "key": "tor-1_pass"}}))},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			spec := validSpec()
			tc.mutate(spec)
			err := s.env.Client.Create(t.Context(), lbObject(ns, "good", spec), client.DryRunAll, client.FieldValidation("Strict"))
			NewWithT(t).Expect(err).To(Succeed())
		})
	}
}
