//go:build linux

package realcp

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	agentv1 "github.com/caplb/caplb/api/agent/v1alpha1"
	"github.com/caplb/caplb/e2e/lab"
	"github.com/caplb/caplb/e2e/lab/kubeadm"
)

// QuorumLoss is what one etcd quorum loss showed at the VIP. The holder counts are of samples
// every 50 ms over three stretches: Loss, from the kill to the restart; Steady, inside it, once
// every agent saw its API server fail (the fail-open hold); Return, from the restart until every
// API server is ready again.
type QuorumLoss struct {
	// Owner held the VIP when etcd lost quorum; Stopped are the machines whose etcd was killed.
	Owner       string       `json:"owner"`
	Stopped     []string     `json:"etcd_stopped"`
	DownSeconds float64      `json:"etcd_down_seconds"`
	Loss        HolderCounts `json:"loss"`
	Steady      HolderCounts `json:"steady"`
	Return      HolderCounts `json:"return"`
	// APIAnswered: an API server answered at the VIP during the loss, to kubeadm's
	// super-admin.conf (system:masters, exempt from API priority and fairness, whose seats the
	// clients' hung writes hold): a recovery tool reaches it. APIError says why not.
	APIAnswered bool   `json:"api_answered"`
	APIError    string `json:"api_error,omitempty"`
	// OwnerKept: the fail-open owner of the steady stretch still held the VIP at its end.
	OwnerKept bool `json:"owner_kept"`
	// Restarted is when the kubelet started the killed etcd members again (clients time their
	// recovery from it).
	Restarted time.Time `json:"-"`
}

// QuorumLoss kills the etcd of two machines (not the VIP owner's) so that no API server is
// ready, holds that for hold once every agent saw it, then restarts them as the kubelet does and
// waits until every API server is ready, a write through cs commits and one machine holds the
// VIP. An error is a wait that timed out; the figures are for the caller to judge.
func (c *Lab) QuorumLoss(ctx context.Context, cs *kubernetes.Clientset, hold time.Duration) (q QuorumLoss, err error) {
	// The stretches' bounds; a zero end is "until the sampling ended" (a wait that failed).
	var killed, restarted, steadyFrom, steadyTo, returned time.Time
	log := sampleHolders(ctx, 50*time.Millisecond, c.Holders)
	defer func() {
		// The counts also when a wait failed: they show what the VIP did meanwhile.
		samples := log.end()
		end := func(t time.Time) time.Time {
			if t.IsZero() {
				return time.Now()
			}
			return t
		}
		if !killed.IsZero() {
			q.Loss = countHolders(samples, killed, end(restarted))
		}
		if !steadyFrom.IsZero() {
			q.Steady = countHolders(samples, steadyFrom, end(steadyTo))
		}
		if !restarted.IsZero() {
			q.Return = countHolders(samples, restarted, end(returned))
		}
	}()
	if err := poll(ctx, 10*time.Second, 50*time.Millisecond, oneHolder(log)); err != nil {
		return q, err
	}
	q.Owner = log.last()[0]
	// Two of three etcd members stop: the remaining one has no quorum, so every API server's
	// /readyz fails — the owner's included.
	var stopped []*machine
	for _, m := range c.machines {
		if m.Name != q.Owner && len(stopped) < 2 {
			stopped = append(stopped, m)
		}
	}
	killed = time.Now()
	for _, m := range stopped {
		q.Stopped = append(q.Stopped, m.Name)
		if err := sigkill(m.etcd); err != nil {
			return q, err
		}
	}
	restart := func() error {
		if !restarted.IsZero() {
			return nil
		}
		restarted = time.Now()
		// The kubelet restarts etcd from its manifest.
		for _, m := range stopped {
			p, err := c.kubelet(m).Start(kubeadm.EtcdManifest)
			if err != nil {
				return err
			}
			m.etcd = p
		}
		return nil
	}
	defer func() { err = errors.Join(err, restart()) }() // an error must not leave the next scenario without quorum
	c.logf("quorum loss: stopped etcd on %s; VIP on %s", q.Stopped, q.Owner)

	if err := poll(ctx, 60*time.Second, 250*time.Millisecond, func() error {
		if r := c.ReadyMachines(ctx); len(r) > 0 {
			return fmt.Errorf("still ready: %v", r)
		}
		return nil
	}); err != nil {
		return q, fmt.Errorf("without an etcd quorum no API server is ready: %w", err)
	}
	// Each agent sees its own /readyz fail a little apart; a member still healthy for a moment
	// may claim from the failing owner and fail in turn (a make-before-break overlap). Once every
	// agent is ineligible, exactly one must hold and keep holding.
	if err := poll(ctx, 30*time.Second, 100*time.Millisecond, func() error {
		if e := c.eligibleAgents(); len(e) > 0 {
			return fmt.Errorf("still eligible: %v", e)
		}
		return nil
	}); err != nil {
		return q, fmt.Errorf("every agent sees its API server fail: %w", err)
	}
	// Not an error if no single owner shows up: the steady stretch's counts say what the VIP
	// did instead (no owner, or two), and the caller judges them.
	_ = poll(ctx, 10*time.Second, 50*time.Millisecond, oneHolder(log))
	steadyFrom = time.Now()
	owner := log.last()
	// The VIP watched with every member unhealthy: a measurement window, not a wait.
	select {
	case <-ctx.Done():
		return q, ctx.Err()
	case <-time.After(hold):
	}
	steadyTo = time.Now()
	sa, err := c.superAdmin(5 * time.Second)
	if err != nil {
		return q, err
	}
	if _, err := sa.Discovery().ServerVersion(); err != nil {
		q.APIError = err.Error()
	} else {
		q.APIAnswered = true
	}
	q.OwnerKept = len(owner) == 1 && slices.Equal(log.last(), owner)

	// Quorum back: the same client recovers without being told, and the VIP keeps one owner
	// while the API servers turn ready one after the other.
	if err := restart(); err != nil {
		return q, err
	}
	q.Restarted = restarted
	q.DownSeconds = math.Round(restarted.Sub(killed).Seconds()*10) / 10
	recovered := make(chan bool, 1)
	go func() { recovered <- writesAgain(ctx, cs, restarted, time.Minute) }()
	if err := poll(ctx, 2*time.Minute, 100*time.Millisecond, func() error {
		if r := c.ReadyMachines(ctx); len(r) < len(c.machines) {
			return fmt.Errorf("ready: %v", r)
		}
		return nil
	}); err != nil {
		return q, fmt.Errorf("the API servers never all became ready: %w", err)
	}
	returned = time.Now()
	if !<-recovered {
		return q, errors.New("no write through the VIP committed within a minute of quorum's return")
	}
	// The API servers turn ready one after the other: when another is ready before the
	// fail-open holder's, the VIP moves to it, and both hold for the drain of that
	// make-before-break hand-over — the rendered drain, and up to busyDrain more while a
	// connection there still carries requests (a client-go writer at two writes a second meets
	// a 2 % GOAWAY in about 25 s: one CI run held 12.4 s) — then one.
	if err := poll(ctx, c.handOverBound(), 50*time.Millisecond, oneHolder(log)); err != nil {
		return q, fmt.Errorf("every API server ready again: %w", err)
	}
	return q, nil
}

// oneHolder is a poll condition: exactly one machine holds the VIP in log's last sample.
func oneHolder(log *holderLog) func() error {
	return func() error {
		if h := log.last(); len(h) != 1 {
			return fmt.Errorf("VIP holders %v, want one", h)
		}
		return nil
	}
}

// writesAgain writes through cs (the client that saw the loss, not told about the return) until
// one commits or limit after since passes.
func writesAgain(ctx context.Context, cs *kubernetes.Clientset, since time.Time, limit time.Duration) bool {
	for time.Since(since) < limit && ctx.Err() == nil {
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := Write(wctx, cs, "after-quorum")
		cancel()
		if err == nil {
			return true
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
	return false
}

// HardKill is what one hard kill of the VIP owner's machine showed.
type HardKill struct {
	Victim string
	// NewConnection is from the kill to the first answer on a new connection through the VIP
	// (as kubectl makes, or a client that gave up its old one): a new attempt every 20 ms.
	NewConnection time.Duration
	// KeptConnection is from the kill to client-go's first success on the connection it kept
	// (its TCP retransmits reach the new owner, whose reset ends it, or its own timeout does;
	// then it reconnects).
	KeptConnection time.Duration
	// Holders hold the VIP once both answered.
	Holders []string
}

// HardKill waits for three ready API servers and one VIP owner, kills the owner's machine hard
// (every process SIGKILLed, its namespace deleted: etcd keeps quorum with two of three) and
// times the first answers through the VIP; then a write through cs must commit. The machine stays
// dead: Rebuild brings it back.
func (c *Lab) HardKill(ctx context.Context, cs *kubernetes.Clientset) (HardKill, error) {
	var k HardKill
	if err := c.settled(ctx, 90*time.Second); err != nil {
		return k, err
	}
	victim := c.machine(c.Holders()[0])
	k.Victim = victim.Name
	// The kept connection must be alive and on the owner before the kill.
	if err := poll(ctx, 10*time.Second, 100*time.Millisecond, func() error {
		_, err := cs.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{})
		return err
	}); err != nil {
		return k, fmt.Errorf("client-go before the kill: %w", err)
	}
	start := time.Now()
	if err := c.kill(victim); err != nil {
		return k, err
	}
	c.logf("hard kill: %s", victim.Name)
	kept := make(chan time.Duration, 1)
	go func() { kept <- firstKept(ctx, cs, start, 30*time.Second) }()
	fresh := c.firstFresh(ctx, start, 30*time.Second)
	k.KeptConnection = <-kept
	if fresh < 0 {
		return k, errors.New("no new connection through the VIP answered within 30 s of the kill")
	}
	k.NewConnection = fresh
	if k.KeptConnection < 0 {
		return k, errors.New("client-go's requests through the VIP did not succeed within 30 s of the kill")
	}
	k.Holders = c.Holders()
	if err := poll(ctx, 30*time.Second, 200*time.Millisecond, func() error { return Write(ctx, cs, "after-kill") }); err != nil {
		return k, fmt.Errorf("two of three etcd members keep quorum, yet writes do not commit: %w", err)
	}
	return k, nil
}

// firstKept retries a client-go GET on cs's kept connection (1 s timeout each) until one
// succeeds and returns the time from since; -1 if none did within limit.
func firstKept(ctx context.Context, cs *kubernetes.Clientset, since time.Time, limit time.Duration) time.Duration {
	for time.Since(since) < limit && ctx.Err() == nil {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		_, err := cs.CoreV1().Namespaces().Get(cctx, "default", metav1.GetOptions{})
		cancel()
		if err == nil {
			return time.Since(since)
		}
		select {
		case <-ctx.Done():
		case <-time.After(20 * time.Millisecond):
		}
	}
	return -1
}

// firstFresh starts a GET /version on a new connection through the VIP every 20 ms (each may
// wait 2 s: a SYN sent before the new owner's gratuitous ARP is retransmitted only after 1 s,
// so one attempt after the other would measure TCP's timer, not the fail-over) and returns the
// time from since to the first answer; -1 if none came within limit.
func (c *Lab) firstFresh(ctx context.Context, since time.Time, limit time.Duration) time.Duration {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	answered := make(chan time.Duration, 1)
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for time.Since(since) < limit {
		go func() {
			if _, err := c.get(ctx, c.client, vip, "/version", 2*time.Second); err == nil {
				select {
				case answered <- time.Since(since):
				default:
				}
			}
		}()
		select {
		case d := <-answered:
			return d
		case <-ctx.Done():
			return -1
		case <-t.C:
		}
	}
	return -1
}

// Rebuild brings a killed machine back as KubeadmControlPlane's remediation would replace it:
// its dead etcd member removed, then a fresh machine (new disk, same name, address and NIC)
// joins as an etcd learner, is promoted, and runs the agent from caplb's bootstrap files written
// on its new disk. It returns once the machine's agent is eligible and one machine holds the VIP.
func (c *Lab) Rebuild(ctx context.Context, name string) error {
	m := c.machine(name)
	if m == nil || m.nl != nil {
		return fmt.Errorf("rebuild %s: not a killed machine of the lab", name)
	}
	var via *machine
	var endpoints []string
	for _, o := range c.machines {
		if o.nl != nil {
			if via == nil {
				via = o
			}
			endpoints = append(endpoints, o.ClientURL())
		}
	}
	if via == nil {
		return errors.New("rebuild: no machine left to join through")
	}
	e, err := kubeadm.NewEtcd(via.Machine, via.ns.DialContext, endpoints...)
	if err != nil {
		return err
	}
	err = e.Remove(ctx, m.Machine)
	e.Close()
	if err != nil {
		return fmt.Errorf("rebuild %s: %w", name, err)
	}
	m.generation++
	m.Root = c.machineRoot(m.Name, m.generation)
	if err := c.plug(m); err != nil {
		return fmt.Errorf("rebuild %s: network: %w", name, err)
	}
	if err := c.join(ctx, m, via); err != nil {
		return fmt.Errorf("rebuild %s: %w", name, err)
	}
	if err := c.startAgent(m); err != nil {
		return err
	}
	if err := poll(ctx, 30*time.Second, 100*time.Millisecond, func() error {
		if !slices.Contains(c.eligibleAgents(), m.Name) {
			return fmt.Errorf("%s's agent not eligible", m.Name)
		}
		return nil
	}); err != nil {
		return fmt.Errorf("rebuild %s: %w", name, err)
	}
	return c.settled(ctx, 30*time.Second)
}

// settled waits for every machine's API server to be ready and one machine to hold the VIP.
func (c *Lab) settled(ctx context.Context, timeout time.Duration) error {
	if err := poll(ctx, timeout, 250*time.Millisecond, func() error {
		if r := c.ReadyMachines(ctx); len(r) < len(c.machines) {
			return fmt.Errorf("ready: %v", r)
		}
		return nil
	}); err != nil {
		return fmt.Errorf("every API server ready: %w", err)
	}
	return poll(ctx, c.handOverBound(), 50*time.Millisecond, func() error {
		if h := c.Holders(); len(h) != 1 {
			return fmt.Errorf("VIP holders %v, want one", h)
		}
		return nil
	})
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

func (c *Lab) machine(name string) *machine {
	for _, m := range c.machines {
		if m.Name == name {
			return m
		}
	}
	return nil
}

// kill is a machine's power cut: every process SIGKILLed, its network gone.
func (c *Lab) kill(m *machine) error {
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

// handOverBound is how long two machines may hold the VIP in a hand-over: the agents' rendered
// quiesce.drain and busyDrain, and two seconds for the claim and the release (10 s when the
// configuration cannot be read).
func (c *Lab) handOverBound() time.Duration {
	raw, err := os.ReadFile(c.machines[0].Path(agentv1.ConfigPath))
	if err != nil {
		return 10 * time.Second
	}
	cfg, err := agentv1.Parse(raw)
	if err != nil {
		return 10 * time.Second
	}
	return cfg.Quiesce.Drain.Duration + cfg.Quiesce.BusyDrain.Duration + 2*time.Second
}
