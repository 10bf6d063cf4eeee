//go:build linux

package lifecycle

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentv1 "github.com/caplb/caplb/api/agent/v1alpha1"
	lbv1 "github.com/caplb/caplb/api/v1alpha1"
	"github.com/caplb/caplb/e2e/harness"
	"github.com/caplb/caplb/e2e/lab"
	"github.com/caplb/caplb/e2e/lifecycle/observe"
)

// An ingress VIP on worker Machines survives a MachineDeployment rollout with zero failed
// requests. One Cluster has two ARP VIPs (config/samples/cluster_kubeadm_arp_ipam.yaml's for the
// control plane, one stand-in control-plane machine behind it; cluster_kubeadm_arp_ingress.yaml's
// on the workers). CAPI's own MachineDeployment, MachineSet and Machine reconcilers run the
// workers: two Machines booted from the worker LoadBalancer's Secret (the sample's
// KubeadmConfigTemplate files, written as cloud-init writes them), each running caplb's agent from
// the rendered static pod and an ingress stand-in on 443 (HTTPS) and 80 (TCP). A client in its own
// namespace requests https://<VIP>:443 continuously (fresh and kept-alive connections and a
// stream) and connects to <VIP>:80; the rollout (spec.rollout.after, maxSurge 1, maxUnavailable 0)
// replaces both workers: CAPI creates a new Machine, then deletes an old one, whose deletion waits
// on caplb's pre-drain hook. Checked: no request failed, the VIP always had a holder, every old
// Machine's hook was held at its deletion and released only once the machine was out of the data
// plane (not holding the VIP, its agent reporting out), and the Cluster's endpoint stayed the
// control plane's.
func TestWorkerRolloutARP(t *testing.T) {
	lab.SkipUnlessRoot(t)
	rt := &recordingT{T: t}
	g := NewWithT(rt)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	l, err := Start(ctx, Options{Backend: ARP, Binaries: bins, Name: "lcwrk", Workers: true})
	g.Expect(err).NotTo(HaveOccurred())
	defer func() {
		if t.Failed() {
			t.Log(l.LogTail(40))
			t.Logf("%s failed: %q", t.Name(), rt.failures)
		}
		if err := l.Close(); err != nil {
			t.Errorf("closing the lab: %v", err)
		}
	}()
	step := func(format string, args ...any) {
		t.Logf("%s ==> %s", time.Now().UTC().Format("15:04:05.000"), fmt.Sprintf(format, args...))
	}
	s := &Scenario{Lab: l, Recorder: observe.NewRecorder()}

	step("the control plane: the Cluster, its ARP VIP, one stand-in control-plane Machine")
	cpLB, err := l.CreateCluster(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	s.lbName = cpLB.Name
	cpVIP, err := l.WaitEndpoint(ctx, endpointTimeout)
	g.Expect(err).NotTo(HaveOccurred())
	_, err = s.addMachine(ctx)
	g.Expect(err).NotTo(HaveOccurred())

	step("the workers: the ingress LoadBalancer and a MachineDeployment of 2")
	ing, md, err := l.CreateIngress(ctx, 2)
	g.Expect(err).NotTo(HaveOccurred())
	var lb *lbv1.LoadBalancer
	g.Expect(harness.Poll(ctx, activeTimeout, "two active workers behind the ingress VIP", func(ctx context.Context) (bool, string, error) {
		var err error
		if lb, err = l.LB(ctx, ing.Name); err != nil {
			return false, "", err
		}
		return lb.Status.ActiveTargets == 2 && lb.Status.TotalTargets == 2 && lb.Status.VIPOwner != "", harness.DescribeLB(lb), nil
	})).To(Succeed())
	vip := netip.MustParseAddr(lb.Status.Endpoint.Host)
	g.Expect(vip).NotTo(Equal(cpVIP))
	g.Expect(lb.Status.BootstrapSecretName).To(Equal(ing.Name + lbv1.AgentSecretSuffix))
	g.Expect(harness.Condition(lb, lbv1.ClusterEndpointCondition).Reason).To(Equal(lbv1.NotPublisherReason))
	old, err := l.MachinesOf(ctx, md)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(old).To(HaveLen(2))
	step("ingress VIP %s on %s; control plane's %s", vip, harness.DescribeLB(lb), cpVIP)

	sctx, stop := context.WithCancel(ctx)
	defer stop()
	rec := observe.NewRecorder()
	prober, err := observe.NewProber(observe.ProberOptions{URL: "https://" + net.JoinHostPort(vip.String(), "443"),
		CAPEM: l.CAPEM(), Dial: l.DialClient, RetryIdempotent: true})
	g.Expect(err).NotTo(HaveOccurred())
	prober.Start(sctx)
	go rec.SampleHolders(sctx, 10*time.Millisecond, func() ([]string, error) { return l.HoldersOf(vip) })
	plain := &tcpClient{dial: l.DialClient, addr: net.JoinHostPort(vip.String(), "80")}
	go plain.run(sctx)
	// A moment of traffic before the rollout: the client's figures cover a steady start.
	g.Expect(harness.Poll(ctx, 10*time.Second, "the clients answered", func(context.Context) (bool, string, error) {
		return len(prober.Samples()) > 20 && plain.count() > 10, "", nil
	})).To(Succeed())

	step("roll out MachineDeployment %s (old Machines %s, %s)", md, old[0].Name, old[1].Name)
	g.Expect(l.RollOut(ctx, md)).To(Succeed())
	w := &rolloutWatch{l: l, vip: vip, hook: lbv1.PreDrainHookAnnotation(ing.Name), old: map[string]string{},
		heldAtDeletion: map[string]bool{}, released: map[string]bool{}, log: step}
	for _, m := range old {
		w.old[m.Name] = m.Status.NodeRef.Name
	}
	g.Expect(harness.Poll(ctx, 4*time.Minute, "the rollout done: old Machines gone, two new ones active", func(ctx context.Context) (bool, string, error) {
		if err := l.manager.alive(); err != nil {
			return false, "", err
		}
		if err := w.check(ctx); err != nil {
			return false, "", err
		}
		cur, err := l.LB(ctx, ing.Name)
		if err != nil {
			return false, "", err
		}
		ms, err := l.MachinesOf(ctx, md)
		if err != nil {
			return false, "", err
		}
		for _, m := range ms {
			if _, isOld := w.old[m.Name]; isOld || harness.TargetState(cur, m.Name) != lbv1.TargetActive {
				return false, harness.DescribeLB(cur), nil
			}
		}
		return len(ms) == 2 && cur.Status.TotalTargets == 2, harness.DescribeLB(cur), nil
	})).To(Succeed())
	step("rollout done")
	// A moment of traffic on the new Machines alone.
	n := len(prober.Samples())
	g.Expect(harness.Poll(ctx, 10*time.Second, "the clients answered after the rollout", func(context.Context) (bool, string, error) {
		return len(prober.Samples()) > n+20, "", nil
	})).To(Succeed())
	prober.Stop()
	stop()
	rec.Stop()

	res := observe.Summarize(observe.Input{Backend: string(ARP), Samples: prober.Samples(), Timeline: rec.Timeline()})
	total, failed, first := plain.figures()
	t.Logf("figures: https://%s:443: %d requests, %d failed, longest gap %.1f ms, holder-less max %v ms, two holders max %v ms; tcp %s:80: %d connections, %d failed %s",
		vip, res.Requests, res.FailedRequests, res.MaxGapMS, deref(res.HolderLessMSMax), deref(res.DualOwnerMSMax), vip, total, failed, first)
	var failures []observe.Sample
	for _, f := range prober.Failures() {
		if !f.Interrupted {
			failures = append(failures, f)
		}
	}
	g.Expect(failures).To(BeEmpty(), "no request to the ingress VIP failed")
	g.Expect(res.FailedRequests).To(BeZero())
	g.Expect(res.Requests).To(BeNumerically(">", 500), "the client ran throughout")
	g.Expect(failed).To(BeZero(), "no connection to port 80 failed: %s", first)
	g.Expect(total).To(BeNumerically(">", 100))
	g.Expect(res.HolderLessMSMax).NotTo(BeNil())
	g.Expect(*res.HolderLessMSMax).To(BeZero(), "the ingress VIP always had a holder")
	// The worker LoadBalancer keeps the agent's default drain (500 ms); a hand-over adds the
	// claim's gossip and up to 300 ms for busy connections to answer.
	g.Expect(res.DualOwnerMSMax).NotTo(BeNil())
	g.Expect(*res.DualOwnerMSMax).To(BeNumerically("<", 3000), "two holders only within a hand-over's drain")
	for name := range w.old {
		g.Expect(w.heldAtDeletion[name]).To(BeTrue(), "%s was deleted under caplb's pre-drain hook", name)
		g.Expect(w.released[name]).To(BeTrue(), "%s's hook was seen released", name)
	}
	c := &clusterv1.Cluster{}
	g.Expect(l.Mgmt.Client.Get(ctx, client.ObjectKey{Namespace: l.Namespace, Name: l.ClusterName}, c)).To(Succeed())
	g.Expect(c.Spec.ControlPlaneEndpoint.Host).To(Equal(cpVIP.String()), "the worker VIP never became the Cluster's endpoint")
}

func deref(p *float64) any {
	if p == nil {
		return nil
	}
	return *p
}

// rolloutWatch follows the old Machines through their deletion: the hook must be there when the
// deletion starts and, when it goes, the machine must be out of the data plane.
type rolloutWatch struct {
	l    *Lab
	vip  netip.Addr
	hook string
	// old maps each old Machine to its Node.
	old                      map[string]string
	heldAtDeletion, released map[string]bool
	log                      func(string, ...any)
}

func (w *rolloutWatch) check(ctx context.Context) error {
	for name, node := range w.old {
		if w.released[name] {
			continue
		}
		m := &clusterv1.Machine{}
		err := w.l.Mgmt.Client.Get(ctx, client.ObjectKey{Namespace: w.l.Namespace, Name: name}, m)
		if client.IgnoreNotFound(err) != nil {
			return err
		}
		gone := err != nil
		if !gone && m.DeletionTimestamp == nil {
			continue
		}
		_, held := m.Annotations[w.hook]
		if held {
			if !w.heldAtDeletion[name] {
				w.log("%s deleting; caplb's pre-drain hook holds it", name)
			}
			w.heldAtDeletion[name] = true
			continue
		}
		w.released[name] = true
		w.log("%s: hook released (gone %v)", name, gone)
		if err := w.out(ctx, node); err != nil {
			return fmt.Errorf("pre-drain hook of %s released too early: %w", name, err)
		}
	}
	return nil
}

// out verifies that node left the data plane: its kernel no longer holds the VIP and its agent's
// report says it is out.
func (w *rolloutWatch) out(ctx context.Context, node string) error {
	h, err := w.l.HoldersOf(w.vip)
	if err != nil {
		return err
	}
	if slices.Contains(h, node) {
		return fmt.Errorf("%s still holds the VIP (holders %v)", node, h)
	}
	n := &corev1.Node{}
	if err := w.l.WorkloadClient.Get(ctx, client.ObjectKey{Name: node}, n); err != nil {
		return client.IgnoreNotFound(err)
	}
	st, err := agentv1.ParseAgentStatus(n.Annotations[agentv1.AgentStatusAnnotation])
	if err != nil {
		return fmt.Errorf("%s: agent report: %w", node, err)
	}
	if st.InDataPlane || st.Holding {
		return fmt.Errorf("%s: agent reports in data plane %v, holding %v", node, st.InDataPlane, st.Holding)
	}
	return nil
}

// tcpClient connects to a plain TCP service every 20 ms and reads its first line (the stand-in
// writes the machine's name): a connection that fails, or closes without a name, is a failure.
type tcpClient struct {
	dial func(ctx context.Context, network, addr string) (net.Conn, error)
	addr string

	mu            sync.Mutex
	total, failed int
	first         string
}

func (c *tcpClient) run(ctx context.Context) {
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		err := c.once(ctx)
		if ctx.Err() != nil {
			return // the test's end interrupted it
		}
		c.mu.Lock()
		c.total++
		if err != nil {
			c.failed++
			if c.first == "" {
				c.first = fmt.Sprintf("(first: %s %v)", time.Now().UTC().Format("15:04:05.000"), err)
			}
		}
		c.mu.Unlock()
	}
}

func (c *tcpClient) once(ctx context.Context) error {
	dctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	conn, err := c.dial(dctx, "tcp", c.addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(time.Second))
	line, err := bufio.NewReader(conn).ReadString('\n')
	if strings.TrimSpace(line) == "" {
		return fmt.Errorf("no name read: %v", err)
	}
	return nil
}

func (c *tcpClient) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.total
}

func (c *tcpClient) figures() (total, failed int, first string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.total, c.failed, c.first
}
