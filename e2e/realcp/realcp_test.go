//go:build linux

package realcp

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/caplb/caplb/e2e/lab"
	"github.com/caplb/caplb/e2e/lab/kubeadm"
	"github.com/caplb/caplb/e2e/lifecycle/observe/clients"
)

// A real control plane behind caplb's ARP VIP, through the faults only a real one has. One lab
// (three kubeadm machines booting takes about a minute) runs the scenarios in order.
func TestRealControlPlane(t *testing.T) {
	c := startLab(t)
	g := NewWithT(t)
	ctx := context.Background()
	cs, err := c.adminClient(5 * time.Second)
	g.Expect(err).NotTo(HaveOccurred())

	g.Eventually(c.holders, 30*time.Second, 50*time.Millisecond).Should(HaveLen(1), "one machine holds the VIP")
	g.Eventually(func() error { return write(ctx, cs, "boot") }, 30*time.Second, 200*time.Millisecond).Should(Succeed(),
		"client-go with kubeadm's admin.conf writes through the VIP")

	t.Run("etcd quorum loss: every readyz fails, the VIP stays (fail-open), clients recover by themselves", func(t *testing.T) {
		r := c.startClients(t, "quorum")
		quorumLoss(t, c, cs)
		res := r.Stop(30 * time.Second)
		t.Logf("client-go through the VIP: %+v", res)
		g := NewWithT(t)
		g.Expect(res.LostEvents).To(BeZero(), "no successful write lost by the informer")
		g.Expect(res.StoreMatches).To(BeTrue(), "the informer converges to the writer's last state")
	})
	t.Run("the VIP owner's machine killed hard: etcd keeps quorum, the VIP moves", func(t *testing.T) {
		r := c.startClients(t, "kill")
		hardKill(t, c, cs)
		res := r.Stop(30 * time.Second)
		t.Logf("client-go through the VIP: %+v", res)
		g := NewWithT(t)
		g.Expect(res.LeaderLosses).To(BeZero(), "a 15 s lease outlives the fail-over: the leader keeps it")
		g.Expect(res.LostEvents).To(BeZero())
		g.Expect(res.StoreMatches).To(BeTrue())
	})
}

// startClients runs the real clients (writer + informer, leader election) through the VIP.
func (c *cpLab) startClients(t *testing.T, name string) *clients.Run {
	t.Helper()
	cfg, err := c.adminConfig(5 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	cs := kubernetes.NewForConfigOrDie(cfg)
	ns, err := cs.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "clients-" + name}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := clients.Start(context.Background(), clients.Config{REST: cfg, Namespace: ns.Name})
	if err != nil {
		t.Fatal(err)
	}
	NewWithT(t).Eventually(r.Leading, 30*time.Second, 100*time.Millisecond).Should(BeTrue(), "the leader-elected loop leads")
	return r
}

// write creates a ConfigMap through the VIP: it commits only with an etcd quorum.
func write(ctx context.Context, cs *kubernetes.Clientset, what string) error {
	_, err := cs.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "realcp-" + what + "-"}}, metav1.CreateOptions{})
	return err
}

func quorumLoss(t *testing.T, c *cpLab, cs *kubernetes.Clientset) {
	g := NewWithT(t)
	ctx := context.Background()
	owner := c.holders()
	g.Expect(owner).To(HaveLen(1))
	// Two of three etcd members stop: the remaining one has no quorum, so every API server's
	// /readyz fails — the owner's included.
	var stopped []*machine
	for _, m := range c.machines {
		if m.Name != owner[0] && len(stopped) < 2 {
			stopped = append(stopped, m)
		}
	}
	if len(stopped) < 2 {
		stopped = append(stopped, c.machine(owner[0]))
	}
	for _, m := range stopped {
		g.Expect(sigkill(m.etcd)).To(Succeed())
	}
	restarted := false
	restart := func() {
		if restarted {
			return
		}
		restarted = true
		// The kubelet restarts etcd from its manifest.
		for _, m := range stopped {
			p, err := c.kubelet(m).Start(kubeadm.EtcdManifest)
			g.Expect(err).NotTo(HaveOccurred())
			m.etcd = p
		}
	}
	defer restart() // a failed assertion must not leave the next scenario without quorum
	t.Logf("stopped etcd on %s and %s; VIP on %s", stopped[0].Name, stopped[1].Name, owner[0])
	g.Eventually(func() []string { return c.readyMachines(ctx) }, 60*time.Second, 250*time.Millisecond).Should(BeEmpty(),
		"without an etcd quorum no API server is ready")
	// Each agent sees its own /readyz fail a little apart; a member still healthy for a moment
	// may claim from the failing owner and fail in turn (a make-before-break overlap). Once every
	// agent is ineligible, exactly one must hold and keep holding.
	g.Eventually(c.eligibleAgents, 30*time.Second, 100*time.Millisecond).Should(BeEmpty(), "every agent sees its API server fail")
	g.Eventually(c.holders, 10*time.Second, 50*time.Millisecond).Should(HaveLen(1))
	owner = c.holders()

	// Watch the VIP for a while with every member unhealthy: it must always have exactly one
	// owner, and an API server must answer there (recovery tools reach it).
	var samples, unowned, doubled int
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		switch h := c.holders(); {
		case len(h) == 0:
			unowned++
		case len(h) > 1:
			doubled++
		}
		samples++
		time.Sleep(50 * time.Millisecond)
	}
	g.Expect(unowned).To(BeZero(), "the VIP had no owner in %d of %d samples during the quorum loss", unowned, samples)
	g.Expect(doubled).To(BeZero(), "two owners in %d of %d samples", doubled, samples)
	// A recovery tool (kubeadm's break-glass super-admin.conf: system:masters, exempt from API
	// priority and fairness, whose seats the clients' hung writes hold) reaches an API server.
	sa, err := c.superAdmin(5 * time.Second)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(sa.Discovery().ServerVersion()).Error().NotTo(HaveOccurred(), "an API server answers at the VIP (recovery tools reach it)")
	g.Expect(c.holders()).To(Equal(owner), "the fail-open owner kept the VIP, nothing moved")

	// Quorum back: the same client recovers without being told, and the VIP keeps one owner
	// while the API servers turn ready one after the other.
	restart()
	unowned, samples = 0, 0
	for ready := []string{}; len(ready) < 3; ready = c.readyMachines(ctx) {
		if len(c.holders()) == 0 {
			unowned++
		}
		samples++
		g.Expect(samples).To(BeNumerically("<", 2000), "the API servers never all became ready")
	}
	g.Expect(unowned).To(BeZero(), "the VIP had no owner in %d of %d samples while quorum came back", unowned, samples)
	g.Eventually(func() error { return write(ctx, cs, "after-quorum") }, 30*time.Second, 200*time.Millisecond).Should(Succeed())
	// The API servers turn ready one after the other: when another is ready
	// before the fail-open holder's, the VIP moves to it, and both hold for
	// the drain of that make-before-break hand-over; then one.
	g.Eventually(c.holders, 10*time.Second, 50*time.Millisecond).Should(HaveLen(1))
}

func hardKill(t *testing.T, c *cpLab, cs *kubernetes.Clientset) {
	g := NewWithT(t)
	ctx := context.Background()
	g.Eventually(func() []string { return c.readyMachines(ctx) }, 90*time.Second, 250*time.Millisecond).Should(HaveLen(3))
	g.Eventually(c.holders, 10*time.Second, 50*time.Millisecond).Should(HaveLen(1))
	victim := c.machine(c.holders()[0])
	survivor := c.machines[0]
	if survivor == victim {
		survivor = c.machines[1]
	}
	// A new connection (as kubectl makes, or a client that gave up its old one) is answered as
	// soon as the new owner announces the VIP; a client-go request on the kept HTTP/2
	// connection waits for TCP to retransmit to the new owner (whose reset ends it) or for its
	// own timeout, then reconnects. Both are timed from the kill, side by side.
	start := time.Now()
	g.Expect(c.kill(victim)).To(Succeed())
	kept := make(chan time.Duration, 1)
	go func() {
		for time.Since(start) < 30*time.Second {
			cctx, cancel := context.WithTimeout(ctx, time.Second)
			_, err := cs.CoreV1().Namespaces().Get(cctx, "default", metav1.GetOptions{})
			cancel()
			if err == nil {
				kept <- time.Since(start)
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
		kept <- 0
	}()
	var freshOK time.Duration
	g.Eventually(func() error {
		cctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		defer cancel()
		_, err := get(cctx, c.client, survivor, vip, "/version")
		if err == nil && freshOK == 0 {
			freshOK = time.Since(start)
		}
		return err
	}, 30*time.Second, 10*time.Millisecond).Should(Succeed(), "a new connection through the VIP is answered")
	firstOK := <-kept
	g.Expect(firstOK).NotTo(BeZero(), "client-go requests through the VIP succeed again")
	t.Logf("%s killed: first answer on a new connection through the VIP after %v, first client-go request on the kept connection after %v",
		victim.Name, freshOK.Round(time.Millisecond), firstOK.Round(time.Millisecond))
	h := c.holders()
	g.Expect(h).To(HaveLen(1))
	g.Expect(h).NotTo(ContainElement(victim.Name))
	g.Eventually(func() error { return write(ctx, cs, "after-kill") }, 30*time.Second, 200*time.Millisecond).Should(Succeed(),
		"two of three etcd members keep quorum: writes commit")
}

// sigkill kills p at once and waits for it to be gone.
func sigkill(p *lab.Process) error {
	if err := p.Signal(syscall.SIGKILL); err != nil {
		return err
	}
	select {
	case <-p.Done():
		return nil
	case <-time.After(10 * time.Second):
		return fmt.Errorf("%d still running 10s after SIGKILL", p.Pid())
	}
}

func (c *cpLab) machine(name string) *machine {
	for _, m := range c.machines {
		if m.Name == name {
			return m
		}
	}
	return nil
}

// readyMachines lists the machines whose API server answers /readyz with 200.
func (c *cpLab) readyMachines(ctx context.Context) []string {
	var out []string
	for _, m := range c.machines {
		if m.nl == nil {
			continue
		}
		if err := readyz(ctx, m); err == nil {
			out = append(out, m.Name)
		}
	}
	slices.Sort(out)
	return out
}

// kill is a machine's power cut: every process SIGKILLed, its network gone.
func (c *cpLab) kill(m *machine) error {
	var errs []error
	for _, p := range []*lab.Process{m.agt, m.apiserver, m.etcd} {
		errs = append(errs, sigkill(p))
	}
	m.nl.Close()
	m.nl = nil
	if err := c.l.RemoveNamespace(m.ns); err != nil {
		errs = append(errs, fmt.Errorf("removing %s: %w", m.Name, err))
	}
	return errors.Join(errs...)
}
