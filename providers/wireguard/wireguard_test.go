package wireguard

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	agentv1 "github.com/caplb/caplb/api/agent/v1alpha1"
	lbv1 "github.com/caplb/caplb/api/v1alpha1"
	wg "github.com/caplb/caplb/api/wireguard/v1alpha1"
	"github.com/caplb/caplb/providers"
)

type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func newScheme(t *testing.T) *runtime.Scheme {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, lbv1.AddToScheme} {
		if err := add(s); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

type env struct {
	b   *Backend
	c   client.Client
	lb  *lbv1.LoadBalancer
	clk *clock
}

func newEnv(t *testing.T, objs ...client.Object) *env {
	lb := wgLB()
	lb.Spec.Quiesce.DrainPeriod = &lbv1.Duration{Duration: 10 * time.Second}
	c := fake.NewClientBuilder().WithScheme(newScheme(t)).WithObjects(append(objs, lb)...).Build()
	clk := &clock{t: time.Date(2026, 11, 23, 8, 0, 0, 0, time.UTC)}
	return &env{b: New(Options{Client: c, AgentImage: "img", Now: clk.now}), c: c, lb: lb, clk: clk}
}

// report writes gateway gw's report as of the env's clock minus age.
func (e *env) report(t *testing.T, gw string, age time.Duration, quiesced []string, ms ...wg.MemberStatus) {
	r := wg.Report{Time: e.clk.t.Add(-age), QuiescedNodes: quiesced, Status: wg.Status{Name: gw, Members: ms}}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: ReportConfigMapName(e.lb, gw)}}
	ctx := context.Background()
	if err := e.c.Get(ctx, client.ObjectKeyFromObject(cm), cm); err != nil {
		cm.Data = map[string]string{wg.ReportKey: string(b)}
		if err := e.c.Create(ctx, cm); err != nil {
			t.Fatal(err)
		}
		return
	}
	cm.Data = map[string]string{wg.ReportKey: string(b)}
	if err := e.c.Update(ctx, cm); err != nil {
		t.Fatal(err)
	}
}

func (e *env) secret(t *testing.T, name string) *corev1.Secret {
	s := &corev1.Secret{}
	if err := e.c.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: name}, s); err != nil {
		t.Fatal(err)
	}
	return s
}

func cond(st providers.EndpointStatus, typ string) metav1.Condition {
	for _, c := range st.Conditions {
		if c.Type == typ {
			return c
		}
	}
	return metav1.Condition{}
}

// Before any member and any gateway report the endpoint is published and the three Secrets
// exist; the token is generated once, copied everywhere and never logged; the CA is copied in
// once CAPI creates it; Release removes what the LoadBalancer controls.
func TestEnsureBeforeMembers(t *testing.T) {
	g := NewWithT(t)
	e := newEnv(t)
	var logs strings.Builder
	ctx := ctrl.LoggerInto(context.Background(), funcr.New(func(p, a string) { logs.WriteString(p + " " + a + "\n") }, funcr.Options{Verbosity: 10}))

	st, err := e.b.Ensure(ctx, e.lb, nil)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(st.Endpoint).To(Equal(lbv1.APIEndpoint{Host: "api.edge.example.com", Port: 7443}))
	g.Expect(st.Available).To(BeFalse())
	g.Expect(st.Reason).To(Equal(lbv1.WaitingForEndpointReason))
	g.Expect(cond(st, lbv1.GatewaysReadyCondition).Status).To(Equal(metav1.ConditionFalse))
	g.Expect(cond(st, lbv1.GatewaysReadyCondition).Message).To(ContainSubstring("gw-1 has not reported"))
	g.Expect(st.RotationUnknown).To(BeFalse())

	tok := e.secret(t, "c-caplb-wireguard-token").Data[TokenKey]
	g.Expect(tok).To(HaveLen(44))
	boot := e.secret(t, "c-caplb-agent")
	g.Expect(boot.Data[TokenKey]).To(Equal(tok))
	g.Expect(boot.Data).To(HaveKey(MemberConfigKey))
	g.Expect(boot.Data).To(HaveKey(agentv1.SecretManifestKey))
	gws := e.secret(t, "c-caplb-gateway")
	g.Expect(gws.Data[TokenKey]).To(Equal(tok))
	g.Expect(gws.Data).To(HaveKey(GatewayConfigKey("gw-1")))
	g.Expect(gws.Data).To(HaveKey(GatewayConfigKey("gw-2")))
	g.Expect(gws.Data).NotTo(HaveKey(CAKey), "no CA before CAPI creates it")
	for _, s := range []*corev1.Secret{boot, gws} {
		g.Expect(metav1.IsControlledBy(s, e.lb)).To(BeTrue())
		g.Expect(s.Labels).To(HaveKeyWithValue("cluster.x-k8s.io/cluster-name", "c"))
	}

	ca := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c-ca"}, Data: map[string][]byte{"tls.crt": []byte("CA PEM")}}
	g.Expect(e.c.Create(ctx, ca)).To(Succeed())
	_, err = e.b.Ensure(ctx, e.lb, nil)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(e.secret(t, "c-caplb-gateway").Data[CAKey]).To(Equal([]byte("CA PEM")))
	g.Expect(e.secret(t, "c-caplb-wireguard-token").Data[TokenKey]).To(Equal(tok), "the token is generated once")

	g.Expect(e.b.Release(ctx, e.lb)).To(Succeed())
	for _, n := range []string{"c-caplb-agent", "c-caplb-gateway", "c-caplb-wireguard-token"} {
		g.Expect(e.c.Get(ctx, client.ObjectKey{Namespace: "ns", Name: n}, &corev1.Secret{})).NotTo(Succeed(), n)
	}
	g.Expect(logs.String()).NotTo(ContainSubstring(string(tok)))
}

// A Secret of ours that someone else owns, or a token someone emptied, is an error naming the
// fix, never silently replaced.
func TestEnsureRefusesForeignOrDamagedSecrets(t *testing.T) {
	g := NewWithT(t)
	foreign := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c-caplb-gateway"}}
	e := newEnv(t, foreign)
	_, err := e.b.Ensure(context.Background(), e.lb, nil)
	g.Expect(err).To(MatchError(ContainSubstring("not controlled by this LoadBalancer")))

	e = newEnv(t)
	_, err = e.b.Ensure(context.Background(), e.lb, nil)
	g.Expect(err).NotTo(HaveOccurred())
	tok := e.secret(t, "c-caplb-wireguard-token")
	tok.Data[TokenKey] = nil
	g.Expect(e.c.Update(context.Background(), tok)).To(Succeed())
	_, err = e.b.Ensure(context.Background(), e.lb, nil)
	g.Expect(err).To(MatchError(ContainSubstring("delete the Secret to have a new token generated")))
}

// Members enter rotation only where a fresh gateway report has them active and healthy; stale
// reports count as silence; with no fresh report at all the rotation is unknown.
func TestEnsureRotationFromReports(t *testing.T) {
	members := []providers.Member{
		{Name: "m1", NodeName: "n1", State: lbv1.TargetAdding},
		{Name: "m2", NodeName: "n2", State: lbv1.TargetActive},
		{Name: "m3", State: lbv1.TargetAdding},
	}
	healthy := func(n string) wg.MemberStatus { return wg.MemberStatus{Node: n, State: "active", Healthy: true} }
	for _, tc := range []struct {
		name      string
		reports   func(t *testing.T, e *env)
		want      map[string]bool
		unknown   bool
		available bool
		// settled: every gateway reports and every member with a Node is in rotation.
		settled bool
	}{
		{"no reports", func(*testing.T, *env) {}, map[string]bool{}, true, false, false},
		{"one gateway healthy for n1", func(t *testing.T, e *env) {
			e.report(t, "gw-1", time.Second, nil, healthy("n1"), wg.MemberStatus{Node: "n2", State: "active"})
		}, map[string]bool{"m1": true}, false, true, false},
		{"either gateway suffices", func(t *testing.T, e *env) {
			e.report(t, "gw-1", 0, nil, healthy("n1"))
			e.report(t, "gw-2", 0, nil, healthy("n2"))
		}, map[string]bool{"m1": true, "m2": true}, false, true, true},
		{"quiesced is not in rotation", func(t *testing.T, e *env) {
			e.report(t, "gw-1", 0, []string{"n1"}, wg.MemberStatus{Node: "n1", State: "quiesced", Healthy: true})
		}, map[string]bool{}, false, true, false},
		{"stale report is silence", func(t *testing.T, e *env) {
			e.report(t, "gw-1", time.Minute, nil, healthy("n1"))
		}, map[string]bool{}, true, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			e := newEnv(t)
			tc.reports(t, e)
			st, err := e.b.Ensure(context.Background(), e.lb, members)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(st.InRotation).To(Equal(tc.want))
			g.Expect(st.RotationUnknown).To(Equal(tc.unknown))
			g.Expect(st.Available).To(Equal(tc.available))
			if tc.settled {
				g.Expect(st.RequeueAfter).To(Equal(providers.DefaultResync))
			} else {
				g.Expect(st.RequeueAfter).To(Equal(providers.DefaultPendingPoll), "waiting on a gateway or a member")
			}
		})
	}
}

// Clusters sharing a gateway address: the older LoadBalancer keeps its ports, the newer one
// publishes nothing and says which port and whose.
func TestEnsurePortConflict(t *testing.T) {
	g := NewWithT(t)
	old := wgLB()
	old.Name, old.UID, old.Spec.ClusterName = "old", "uid-0", "other"
	old.CreationTimestamp = metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	e := newEnv(t, old)
	e.lb.CreationTimestamp = metav1.NewTime(time.Date(2026, 2, 1, 0, 0, 0, 0, time.UTC))
	st, err := e.b.Ensure(context.Background(), e.lb, nil)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(st.Endpoint.Host).To(BeEmpty())
	g.Expect(st.Reason).To(Equal(lbv1.GatewayPortConflictReason))
	g.Expect(st.Message).To(ContainSubstring("203.0.113.10: TCP 7443 is taken by LoadBalancer ns/old"))

	// Other ports on the shared gateways: no conflict.
	e.lb.Spec.Endpoint.Port = 7444
	e.lb.Spec.Backend.WireGuard.Gateways[0].Port = 51822
	e.lb.Spec.Backend.WireGuard.Gateways[1].Port = 51832
	st, err = e.b.Ensure(context.Background(), e.lb, nil)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(st.Endpoint).To(Equal(lbv1.APIEndpoint{Host: "api.edge.example.com", Port: 7444}))
}
