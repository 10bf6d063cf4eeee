//go:build linux

package lifecycle

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	lbv1 "github.com/caplb/caplb/api/v1alpha1"
	"github.com/caplb/caplb/e2e/lifecycle/observe"
	"github.com/caplb/caplb/e2e/lifecycle/observe/clients"
	"github.com/caplb/caplb/providers/vip/kubevip"
)

func TestDuplicateRuns(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	kv := []string{"kv-1", "kv-2"}
	for _, tc := range []struct {
		name    string
		samples []observe.HolderSample
		runs    int
		maxMS   float64
	}{
		{"kube-vip alone, then a gap, then caplb alone", []observe.HolderSample{
			{At: at(0), Holders: []string{"kv-1"}}, {At: at(10)}, {At: at(20), Holders: []string{"cp-1"}}}, 0, 0},
		{"caplb's own make-before-break is not a duplicate with kube-vip", []observe.HolderSample{
			{At: at(0), Holders: []string{"cp-1", "cp-2"}}, {At: at(10), Holders: []string{"cp-2"}}}, 0, 0},
		{"kube-vip and caplb at once, twice", []observe.HolderSample{
			{At: at(0), Holders: []string{"kv-1"}},
			{At: at(10), Holders: []string{"cp-1", "kv-1"}}, {At: at(20), Holders: []string{"cp-1", "kv-1"}},
			{At: at(30), Holders: []string{"cp-1"}},
			{At: at(40), Holders: []string{"cp-1", "kv-2"}}, {At: at(50), Holders: []string{"cp-1"}}}, 2, 20},
		{"two kube-vips at once count too", []observe.HolderSample{
			{At: at(0), Holders: []string{"kv-1", "kv-2"}}, {At: at(10), Holders: []string{"kv-2"}}}, 1, 10},
		{"a failed sample is no evidence", []observe.HolderSample{
			{At: at(0), Holders: []string{"cp-1", "kv-1"}, Err: "netlink"}, {At: at(10), Holders: []string{"cp-1"}}}, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			runs, maxMS := duplicateRuns(tc.samples, kv)
			g.Expect(runs).To(Equal(tc.runs))
			g.Expect(maxMS).To(Equal(tc.maxMS))
		})
	}
}

func TestTakeOverGoals(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 10, 22, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	kvHolds := []observe.HolderSample{{At: at(0), Holders: []string{"kv-1"}}, {At: at(10), Holders: []string{"cp-1"}}}
	dup := []observe.HolderSample{{At: at(0), Holders: []string{"kv-1", "cp-1"}}, {At: at(1), Holders: []string{"cp-1"}}}
	gap := 400.0
	obsWith := func(holders []observe.HolderSample, failedAt ...time.Time) Observed {
		o := Observed{Clients: &clients.Result{Writes: 900, StoreMatches: true, FailedWrites: len(failedAt), FailedAt: failedAt}}
		o.Input.Timeline.Holders = holders
		o.ARPAnswers = holders // the watcher heard what the kernels held
		o.Result.HolderLessMSMax = &gap
		return o
	}
	withAnswers := func(o Observed, answers []observe.HolderSample) Observed {
		o.ARPAnswers = answers
		return o
	}
	withKindFailure := func(o Observed, kind observe.Kind, began time.Time, took time.Duration) Observed {
		o.Failures = append(o.Failures, observe.Sample{At: began, Latency: took, Kind: kind, Err: "failed"})
		return o
	}
	withFailureSpan := func(o Observed, began time.Time, took time.Duration) Observed {
		return withKindFailure(o, observe.Fresh, began, took)
	}
	// A kept-alive request sent at the hand-over times out after 5 s; the next, sent 2 ms later
	// on the same connection, is force-closed with it (recorded first: it ended first).
	chained := func(next observe.Kind, after time.Duration) Observed {
		o := withKindFailure(obsWith(kvHolds), next, at(9.9).Add(5*time.Second+after), 2*time.Millisecond)
		return withKindFailure(o, observe.Kept, at(9.9), 5*time.Second)
	}
	withFailure := func(o Observed, t time.Time) Observed {
		return withFailureSpan(o, t.Add(-100*time.Millisecond), 100*time.Millisecond)
	}
	guarded := &TakeOverScenario{KubeVIPMachines: []string{"kv-1"}, Fenced: at(0), HandOver: at(10)}
	bgpLab := &Lab{opts: Options{Backend: BGP}}
	bgpElect := &TakeOverScenario{Lab: bgpLab, KubeVIPMachines: []string{"kv-1"}, Started: at(-10), Fenced: at(0), HandOver: at(10)}
	bgpOverlap := &TakeOverScenario{Lab: &Lab{opts: Options{Backend: BGP, KubeVIP: KubeVIPOptions{NoElection: true}}},
		KubeVIPMachines: []string{"kv-1"}, Started: at(-10)}
	withLeaderLoss := func(o Observed) Observed {
		o.Clients.LeaderLosses = 1
		return o
	}
	for _, tc := range []struct {
		name string
		obs  Observed
		s    *TakeOverScenario
		want []string // prefixes of the misses
	}{
		{"clean", obsWith(kvHolds), guarded, nil},
		{"the write in flight at the hand-over", obsWith(kvHolds, at(10.3)), guarded, nil},
		{"a write failed before the fence", obsWith(kvHolds, at(-1)), guarded, []string{"1 requests failed outside the hand-over"}},
		{"a write failed well after the hand-over", obsWith(kvHolds, at(40)), guarded, []string{"1 requests failed outside the hand-over"}},
		{"a write begun at the hand-over timed out", obsWith(kvHolds, at(10+14)), guarded, nil},
		{"a new connection begun at the hand-over timed out 5 s later", withFailureSpan(obsWith(kvHolds), at(9.9), 5*time.Second), guarded, nil},
		{"a new connection failed at the hand-over", withFailure(obsWith(kvHolds), at(10.2)), guarded, nil},
		{"a new connection failed later", withFailure(obsWith(kvHolds), at(30)), guarded, []string{"1 requests failed outside the hand-over"}},
		{"the next kept request on the connection the hand-over broke", chained(observe.Kept, 2*time.Millisecond), guarded, nil},
		{"a kept request failed a second after the hand-over's last failure", chained(observe.Kept, time.Second), guarded,
			[]string{"1 requests failed outside the hand-over"}},
		{"a new connection does not ride the kept loop's broken connection", chained(observe.Fresh, 2*time.Millisecond), guarded,
			[]string{"1 requests failed outside the hand-over"}},
		{"two writes failed", obsWith(kvHolds, at(10.1), at(10.2)), guarded, []string{"2 client-go writes failed"}},
		{"kube-vip and caplb at once", obsWith(dup), guarded, []string{"1 intervals with kube-vip and another machine answering ARP",
			"1 intervals with kube-vip and another machine holding"}},
		{"two MACs on the wire while the kernels had one holder", withAnswers(obsWith(kvHolds), dup), guarded,
			[]string{"1 intervals with kube-vip and another machine answering ARP"}},
		{"no ARP watcher", withAnswers(obsWith(kvHolds), nil), guarded, []string{"no ARP watcher ran"}},
		{"an ARP watcher that heard nothing", withAnswers(obsWith(kvHolds), []observe.HolderSample{{At: at(0)}}), guarded,
			[]string{"the ARP watcher never heard"}},
		{"never handed over", obsWith(kvHolds), &TakeOverScenario{KubeVIPMachines: []string{"kv-1"}}, []string{"caplb never held"}},
		{"the control shows duplicates", obsWith(dup), &TakeOverScenario{KubeVIPMachines: []string{"kv-1"}, Unguarded: true}, nil},
		{"a control without duplicates proves nothing", obsWith(kvHolds), &TakeOverScenario{KubeVIPMachines: []string{"kv-1"}, Unguarded: true},
			[]string{"the control (no takeOver) showed no duplicate"}},
		// BGP: kube-vip and caplb announcing at once is the design; what counts is new connections
		// from the takeover's start on, and (with kube-vip's election) leader losses.
		{"bgp: overlap during the fence is fine", obsWith(dup), bgpElect, nil},
		{"bgp: writes reset by a rehash are counted, not judged", obsWith(kvHolds, at(10.1), at(20), at(30)), bgpElect, nil},
		{"bgp: a new connection failed during the takeover", withFailure(obsWith(kvHolds), at(30)), bgpElect, []string{"1 new connections failed"}},
		{"bgp: kube-vip's own failures before the takeover", withFailure(obsWith(kvHolds), at(-20)), bgpElect, nil},
		{"bgp: never alone after the fence", obsWith(kvHolds), &TakeOverScenario{Lab: bgpLab, KubeVIPMachines: []string{"kv-1"}, Started: at(-10)},
			[]string{"caplb never announced the VIP alone"}},
		{"bgp: a leader loss with election", withLeaderLoss(obsWith(kvHolds)), bgpElect, []string{"the leader-elected loop lost"}},
		{"bgp: a leader loss without election is kube-vip's", withLeaderLoss(obsWith(dup)), bgpOverlap, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			missed := TakeOverGoals(tc.obs, tc.s).Missed
			g.Expect(missed).To(HaveLen(len(tc.want)), "%q", missed)
			for i, p := range tc.want {
				g.Expect(missed[i]).To(HavePrefix(p))
			}
		})
	}
}

// The manifests parse as a Pod, set kubernetes_addr from v1 on only, and are what the manager's
// own check (kubevip.Check) allows a takeover of: ARP with election, BGP with and without it,
// announcing to the router the lab's LoadBalancer peers with.
func TestKubeVIPManifest(t *testing.T) {
	vip := netip.MustParseAddr("10.44.0.100")
	bgp := &KubeVIPBGP{ASN: nodeASN, Peers: fmt.Sprintf("%s:%d:%s", routerAddr, routerASN, bgpPassword)}
	peers := []lbv1.BGPPeer{{Address: routerAddr.String(), ASN: routerASN}}
	for _, tc := range []struct {
		name, version, addr string
		bgp                 *KubeVIPBGP
		elects              bool
	}{
		{"arp v0.9.1", "v0.9.1", "", nil, true},
		{"arp v1.2.2", "v1.2.2", "kubernetes:6443", nil, true},
		{"bgp v0.9.1", "v0.9.1", "", bgp, true},
		{"bgp v1.2.2 every node", "v1.2.2", "kubernetes:6443", &KubeVIPBGP{ASN: bgp.ASN, Peers: bgp.Peers, NoElection: true}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			b, err := KubeVIPManifest(tc.version, vip, tc.bgp)
			g.Expect(err).NotTo(HaveOccurred())
			pod := &corev1.Pod{}
			g.Expect(yaml.UnmarshalStrict(b, pod)).To(Succeed())
			c := pod.Spec.Containers[0]
			g.Expect(c.Image).To(Equal("ghcr.io/kube-vip/kube-vip:" + tc.version))
			env := map[string]string{}
			for _, e := range c.Env {
				env[e.Name] = e.Value
			}
			g.Expect(env).To(HaveKeyWithValue("address", "10.44.0.100"))
			g.Expect(env["kubernetes_addr"]).To(Equal(tc.addr))

			spec := kubevip.Spec{VIP: vip.String(), Backend: lbv1.BackendARP,
				KubeVIP: &lbv1.KubeVIPTakeOver{AcknowledgeServiceVIPs: true}}
			if tc.bgp != nil {
				spec.Backend, spec.Peers = lbv1.BackendBGP, peers
			}
			pod.Name, pod.Namespace, pod.Spec.NodeName = "kube-vip-n1", "kube-system", "n1"
			pod.Annotations = map[string]string{corev1.MirrorPodAnnotationKey: "x"}
			found, refusal := kubevip.Check(spec, []corev1.Pod{*pod})
			g.Expect(refusal).To(BeNil())
			g.Expect(found.Elects).To(Equal(tc.elects))
			if tc.bgp != nil {
				g.Expect(found.Peers).To(HaveLen(1))
			}
		})
	}
}

func TestSilentMSMax(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	r := func(ms int, holders ...string) observe.HolderSample {
		return observe.HolderSample{At: t0.Add(time.Duration(ms) * time.Millisecond), Holders: holders}
	}
	for _, tc := range []struct {
		name   string
		rounds []observe.HolderSample
		want   float64
	}{
		{"never silent", []observe.HolderSample{r(0, "kv-1"), r(20, "kv-1"), r(40, "cp-1")}, 0},
		{"silent before the first answer and after the last: no gap", []observe.HolderSample{r(0), r(20, "kv-1"), r(40)}, 0},
		{"the hand-over", []observe.HolderSample{r(0, "kv-1"), r(20), r(40), r(60), r(80, "cp-1"), r(100), r(120, "cp-1")}, 60},
	} {
		t.Run(tc.name, func(t *testing.T) {
			NewWithT(t).Expect(silentMSMax(tc.rounds)).To(Equal(tc.want))
		})
	}
}
