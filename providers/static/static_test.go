package static

import (
	"context"
	"errors"
	"net"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	lbv1 "github.com/caplb/caplb/api/v1alpha1"
	"github.com/caplb/caplb/providers"
)

var now = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

func newLB() *lbv1.LoadBalancer {
	return &lbv1.LoadBalancer{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "lb", UID: "uid-1"},
		Spec: lbv1.LoadBalancerSpec{
			ClusterName: "c1",
			Backend:     lbv1.Backend{Static: &lbv1.StaticBackend{}},
		},
	}
}

func member(name, ip string, ready bool, state lbv1.TargetState) providers.Member {
	return providers.Member{Name: name, Address: ip, Addresses: map[string]string{"InternalIP": ip},
		Ready: ready, State: state, Since: now.Add(-time.Minute)}
}

// countingDialer counts dials and delegates to a real dialer.
type countingDialer struct {
	n atomic.Int32
	d net.Dialer
}

func (c *countingDialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	c.n.Add(1)
	return c.d.DialContext(ctx, network, addr)
}

func TestFixedEndpointProbe(t *testing.T) {
	g := NewWithT(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	g.Expect(err).NotTo(HaveOccurred())
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	}()
	port := int32(ln.Addr().(*net.TCPAddr).Port)

	clock := now
	dialer := &countingDialer{}
	b := &Backend{Dialer: dialer, Now: func() time.Time { return clock }}
	lb := newLB()
	lb.Spec.Endpoint = lbv1.APIEndpoint{Host: "127.0.0.1", Port: port}
	members := []providers.Member{
		member("m1", "10.0.0.1", true, lbv1.TargetActive),
		member("m2", "10.0.0.2", false, lbv1.TargetAdding),
		member("m3", "10.0.0.3", true, lbv1.TargetDisabled),
	}

	// The first Ensure starts the probe and does not wait for it.
	st, err := b.Ensure(context.Background(), lb, members)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(st.Endpoint).To(Equal(lbv1.APIEndpoint{Host: "127.0.0.1", Port: port}), "published before the probe answers")
	g.Expect(st.InRotation).To(Equal(map[string]bool{"m1": true}),
		"only ready members whose state is in rotation count: m2 is not ready, m3 is disabled")
	g.Eventually(func() bool {
		st, _ = b.Ensure(context.Background(), lb, members)
		return st.Available
	}).WithTimeout(10 * time.Second).Should(BeTrue())
	g.Expect(st.Reason).To(Equal(lbv1.EndpointAvailableReason))
	g.Expect(st.RequeueAfter).To(Equal(lbv1.DefaultProbeInterval))
	g.Expect(dialer.n.Load()).To(Equal(int32(1)))

	// Within the interval the cached result is used.
	clock = clock.Add(3 * time.Second)
	st, _ = b.Ensure(context.Background(), lb, members)
	g.Expect(st.Available).To(BeTrue())
	g.Expect(st.RequeueAfter).To(Equal(7 * time.Second))
	g.Expect(dialer.n.Load()).To(Equal(int32(1)))

	// After the interval, a closed listener is reported unreachable once the new probe lands;
	// meanwhile the last result stands.
	g.Expect(ln.Close()).To(Succeed())
	clock = clock.Add(10 * time.Second)
	g.Eventually(func() string {
		st, _ = b.Ensure(context.Background(), lb, members)
		return st.Reason
	}).WithTimeout(10 * time.Second).Should(Equal(lbv1.EndpointUnreachableReason))
	g.Expect(dialer.n.Load()).To(Equal(int32(2)))
	g.Expect(st.Available).To(BeFalse())
	g.Expect(st.Message).To(ContainSubstring("127.0.0.1:" + strconv.Itoa(int(port))))
	g.Expect(st.Message).NotTo(ContainSubstring("refused"), "the dial error stays in the manager's log")
	g.Expect(st.Endpoint.Host).To(Equal("127.0.0.1"), "an unreachable endpoint is still published")

	// Release forgets the cache: the next Ensure probes again.
	g.Expect(b.Release(context.Background(), lb)).To(Succeed())
	_, _ = b.Ensure(context.Background(), lb, members)
	g.Eventually(dialer.n.Load).WithTimeout(10 * time.Second).Should(Equal(int32(3)))
}

// Probes run off the reconcile path: with every dial hanging, Ensure still returns for each of
// twenty LoadBalancers, and reports them as being probed, not available.
func TestFixedEndpointProbeDoesNotBlockEnsure(t *testing.T) {
	g := NewWithT(t)
	release := make(chan struct{})
	defer close(release)
	b := &Backend{Dialer: hangingDialer{release: release}}
	done := make(chan providers.EndpointStatus, 20)
	for i := 0; i < 20; i++ {
		lb := newLB()
		lb.Name = "lb-" + strconv.Itoa(i)
		lb.UID = types.UID(lb.Name)
		lb.Spec.Endpoint = lbv1.APIEndpoint{Host: "10.255.255.1", Port: 6443}
		lb.Spec.HealthCheck.Timeout = lbv1.Duration{Duration: time.Hour}
		lb.Spec.HealthCheck.Interval = lbv1.Duration{Duration: time.Hour}
		go func() {
			st, _ := b.Ensure(context.Background(), lb, nil)
			done <- st
		}()
	}
	for i := 0; i < 20; i++ {
		var st providers.EndpointStatus
		g.Eventually(done).WithTimeout(10*time.Second).Should(Receive(&st), "Ensure blocked on a hanging dial")
		g.Expect(st.Available).To(BeFalse())
		g.Expect(st.Reason).To(Equal(lbv1.WaitingForEndpointReason))
		g.Expect(st.RequeueAfter).To(BeNumerically(">", 0))
	}
}

type hangingDialer struct{ release chan struct{} }

func (h hangingDialer) DialContext(ctx context.Context, _, _ string) (net.Conn, error) {
	select {
	case <-h.release:
	case <-ctx.Done():
	}
	return nil, errors.New("released")
}

type failDialer struct{}

func (failDialer) DialContext(context.Context, string, string) (net.Conn, error) {
	return nil, errors.New("must not dial")
}

func TestFixedEndpointHealthCheckDisabled(t *testing.T) {
	g := NewWithT(t)
	b := &Backend{Dialer: failDialer{}}
	lb := newLB()
	lb.Spec.Endpoint = lbv1.APIEndpoint{Host: "api.example.com"}
	lb.Spec.TargetPort = 6444
	lb.Spec.HealthCheck.Disabled = true
	st, err := b.Ensure(context.Background(), lb, nil)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(st.Available).To(BeTrue())
	g.Expect(st.Endpoint).To(Equal(lbv1.APIEndpoint{Host: "api.example.com", Port: 6444}), "port defaults to targetPort")
	g.Expect(st.InRotation).To(BeEmpty())
}

func TestFixedEndpointProbeTimeout(t *testing.T) {
	g := NewWithT(t)
	// A dialer that blocks until its context ends proves the probe honours healthCheck.timeout.
	b := &Backend{Dialer: blockingDialer{}}
	lb := newLB()
	lb.Spec.Endpoint = lbv1.APIEndpoint{Host: "10.255.255.1", Port: 6443}
	lb.Spec.HealthCheck.Timeout = lbv1.Duration{Duration: 50 * time.Millisecond}
	var st providers.EndpointStatus
	g.Eventually(func() string {
		st, _ = b.Ensure(context.Background(), lb, nil)
		return st.Reason
	}).WithTimeout(5 * time.Second).Should(Equal(lbv1.EndpointUnreachableReason))
	g.Expect(st.Available).To(BeFalse())
	g.Expect(st.Message).To(ContainSubstring("within 50ms"))
	g.Expect(st.Message).NotTo(ContainSubstring("deadline"), "no dial error text in the condition")
}

type blockingDialer struct{}

func (blockingDialer) DialContext(ctx context.Context, _, _ string) (net.Conn, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

func TestMemberEndpoint(t *testing.T) {
	m1 := member("m1", "10.0.0.1", true, lbv1.TargetActive)
	m2 := member("m2", "10.0.0.2", true, lbv1.TargetActive)
	m3 := member("m3", "10.0.0.3", true, lbv1.TargetAdding)
	m2NotReady := member("m2", "10.0.0.2", false, lbv1.TargetActive)
	m2Disabling := member("m2", "10.0.0.2", true, lbv1.TargetDisabling)
	m2Removing := member("m2", "10.0.0.2", true, lbv1.TargetRemoving)
	noAddr := providers.Member{Name: "m0", Ready: true, State: lbv1.TargetActive}

	tests := []struct {
		name        string
		current     string
		members     []providers.Member
		wantHost    string
		wantAvail   bool
		wantRot     []string
		wantMoved   bool
		wantReason  string
		addressPref []string
	}{
		{"first choice is the first candidate by name", "", []providers.Member{m3, m2, m1}, "10.0.0.1", true, []string{"m1", "m2", "m3"}, false, lbv1.EndpointAvailableReason, nil},
		{"sticky: current holder stays", "10.0.0.2", []providers.Member{m1, m2, m3}, "10.0.0.2", true, []string{"m1", "m2", "m3"}, false, lbv1.EndpointAvailableReason, nil},
		{"holder disabled → moves with a warning", "10.0.0.2", []providers.Member{m1, m2Disabling, m3}, "10.0.0.1", true, []string{"m1", "m3"}, true, lbv1.EndpointAvailableReason, nil},
		{"holder removing → moves", "10.0.0.2", []providers.Member{m2Removing, m3}, "10.0.0.3", true, []string{"m3"}, true, lbv1.EndpointAvailableReason, nil},
		{"holder not ready → moves", "10.0.0.2", []providers.Member{m1, m2NotReady}, "10.0.0.1", true, []string{"m1"}, true, lbv1.EndpointAvailableReason, nil},
		{"no candidate: keep the old endpoint, not available", "10.0.0.2", []providers.Member{m2Disabling}, "10.0.0.2", false, nil, false, lbv1.WaitingForEndpointReason, nil},
		{"no member at all: wait", "", nil, "", false, nil, false, lbv1.WaitingForEndpointReason, nil},
		{"members without address are skipped", "", []providers.Member{noAddr, m2}, "10.0.0.2", true, []string{"m2"}, false, lbv1.EndpointAvailableReason, nil},
		{"address preference", "", []providers.Member{{Name: "m1", Ready: true, State: lbv1.TargetActive,
			Addresses: map[string]string{"InternalIP": "10.0.0.1", "ExternalIP": "203.0.113.1"}}}, "203.0.113.1", true, []string{"m1"}, false, lbv1.EndpointAvailableReason, []string{"ExternalIP"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			b := &Backend{Dialer: failDialer{}}
			lb := newLB()
			lb.Spec.Backend.Static.AddressTypes = tt.addressPref
			if tt.current != "" {
				lb.Status.Endpoint = lbv1.APIEndpoint{Host: tt.current, Port: 6443}
			}
			st, err := b.Ensure(context.Background(), lb, tt.members)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(st.Endpoint.Host).To(Equal(tt.wantHost))
			if tt.wantHost != "" {
				g.Expect(st.Endpoint.Port).To(Equal(int32(6443)))
			}
			g.Expect(st.Available).To(Equal(tt.wantAvail))
			g.Expect(st.Reason).To(Equal(tt.wantReason))
			var rot []string
			for n := range st.InRotation {
				rot = append(rot, n)
			}
			if tt.wantRot == nil {
				g.Expect(rot).To(BeEmpty())
			} else {
				g.Expect(rot).To(ConsistOf(tt.wantRot))
			}
			if tt.wantMoved {
				g.Expect(st.Events).To(HaveLen(1))
				g.Expect(st.Events[0].Warning).To(BeTrue())
				g.Expect(st.Events[0].Reason).To(Equal(lbv1.EventEndpointMoved))
				g.Expect(st.Events[0].Message).To(ContainSubstring(tt.current))
			} else {
				g.Expect(st.Events).To(BeEmpty())
			}
		})
	}
}

func TestQuiesce(t *testing.T) {
	clock := now
	b := &Backend{Now: func() time.Time { return clock }}
	lb := newLB()
	lb.Spec.Quiesce.DrainPeriod = &lbv1.Duration{Duration: 10 * time.Second}
	m := providers.Member{Name: "m1", Addresses: map[string]string{"InternalIP": "10.0.0.1"}, State: lbv1.TargetRemoving, Since: now}

	t.Run("member still carries the endpoint", func(t *testing.T) {
		g := NewWithT(t)
		lb.Status.Endpoint = lbv1.APIEndpoint{Host: "10.0.0.1", Port: 6443}
		clock = now.Add(time.Hour)
		qs, err := b.Quiesce(context.Background(), lb, m)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(qs.Done).To(BeFalse())
		g.Expect(qs.RequeueAfter).To(BeNumerically(">", 0))
	})
	t.Run("endpoint moved, drain period running", func(t *testing.T) {
		g := NewWithT(t)
		lb.Status.Endpoint = lbv1.APIEndpoint{Host: "10.0.0.2", Port: 6443}
		clock = now.Add(4 * time.Second)
		qs, _ := b.Quiesce(context.Background(), lb, m)
		g.Expect(qs.Done).To(BeFalse())
		g.Expect(qs.RequeueAfter).To(Equal(6 * time.Second))
	})
	t.Run("drain period passed", func(t *testing.T) {
		g := NewWithT(t)
		clock = now.Add(10 * time.Second)
		qs, _ := b.Quiesce(context.Background(), lb, m)
		g.Expect(qs.Done).To(BeTrue())
	})
	t.Run("fixed host: no member carries it, only the drain period counts", func(t *testing.T) {
		g := NewWithT(t)
		fixed := newLB()
		fixed.Spec.Endpoint.Host = "10.0.0.1" // same as the member's address, but external
		fixed.Status.Endpoint = lbv1.APIEndpoint{Host: "10.0.0.1", Port: 6443}
		clock = now.Add(11 * time.Second)
		qs, _ := b.Quiesce(context.Background(), fixed, m)
		g.Expect(qs.Done).To(BeTrue())
	})
	t.Run("restore is immediate", func(t *testing.T) {
		g := NewWithT(t)
		qs, err := b.Restore(context.Background(), lb, m)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(qs.Done).To(BeTrue())
	})
}

func TestValidate(t *testing.T) {
	g := NewWithT(t)
	b := New()
	lb := newLB()
	g.Expect(b.Validate(lb)).To(BeEmpty())
	lb.Spec.Endpoint.Port = 6443
	g.Expect(b.Validate(lb)).To(BeEmpty(), "port equal to the target port is fine with an empty host")
	lb.Spec.Endpoint.Port = 443
	g.Expect(b.Validate(lb)).To(HaveLen(1))
	lb.Spec.Endpoint.Host = "api.example.com"
	g.Expect(b.Validate(lb)).To(BeEmpty(), "an external LB may listen on any port")
	lb.Spec.Backend.Static.OnPublishedMemberLeave = lbv1.MemberLeaveMoveEndpoint
	errs := b.Validate(lb)
	g.Expect(errs).To(HaveLen(1))
	g.Expect(errs[0].Field).To(Equal("spec.backend.static.onPublishedMemberLeave"))
	g.Expect(errs[0].Detail).To(ContainSubstring("remove spec.backend.static.onPublishedMemberLeave or spec.endpoint.host"))
	lb.Spec.Endpoint.Host = ""
	lb.Spec.Endpoint.Port = 0
	g.Expect(b.Validate(lb)).To(BeEmpty(), "MoveEndpoint with a member's address")
	lb.Spec.Backend.Static = nil
	g.Expect(b.Validate(lb)).To(HaveLen(1))
}

func TestFixedEndpointRotatesOnlyReadyMembers(t *testing.T) {
	g := NewWithT(t)
	b := &Backend{Dialer: failDialer{}}
	lb := newLB()
	lb.Spec.Endpoint = lbv1.APIEndpoint{Host: "api.example.com"}
	lb.Spec.HealthCheck.Disabled = true
	members := []providers.Member{
		{Name: "ready", State: lbv1.TargetAdding, Ready: true},
		{Name: "provisioning", State: lbv1.TargetAdding, Ready: false},
		{Name: "disabled", State: lbv1.TargetDisabled, Ready: true},
	}
	st, err := b.Ensure(context.Background(), lb, members)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(st.InRotation).To(Equal(map[string]bool{"ready": true}),
		"a Machine still provisioning must not count as active behind an external load balancer")
}
