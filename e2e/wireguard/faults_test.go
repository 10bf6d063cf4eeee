//go:build linux

package wireguard_test

import (
	"context"
	"os"
	"testing"
	"time"

	wgapi "github.com/caplb/caplb/api/wireguard/v1alpha1"

	. "github.com/onsi/gomega"

	"github.com/caplb/caplb/e2e/lab/wglab"
)

// Client settings for every test: an attempt on a dead gateway gives up after 500 ms; a request
// may take up to 10 s (a stall is measured by the benchmark, not failed here).
const (
	clientDial    = 500 * time.Millisecond
	clientTimeout = 10 * time.Second
	workers       = 4
	pause         = 5 * time.Millisecond
)

func servedBy(rs []wglab.Result) map[string]int {
	out := map[string]int{}
	for _, r := range rs {
		if r.Err == nil {
			out[r.Node]++
		}
	}
	return out
}

func TestMembersBehindNATServeThroughEitherGateway(t *testing.T) {
	g := NewWithT(t)
	w := startLab(t, wglab.Options{})
	for _, gw := range w.Gateways {
		c := w.NewClient(clientDial, clientTimeout, gw)
		seen := map[string]bool{}
		g.Eventually(func() int {
			name, err := c.Name(context.Background())
			if err == nil {
				seen[name] = true
			}
			return len(seen)
		}, 10*time.Second, 10*time.Millisecond).Should(Equal(3), "every member answers through %s", gw.Name)
		// Each member reached the gateway from the NAT's public address, not its own.
		st, err := w.GatewayStatus(gw)
		g.Expect(err).NotTo(HaveOccurred())
		for _, m := range st.Members {
			g.Expect(m.Endpoint).To(HavePrefix(wglab.PublicNet+"1:"), "member %s seen behind the NAT", m.Node)
		}
		g.Eventually(func(g Gomega) { expectGatewayMetrics(g, w, gw, 3) }, 10*time.Second, 100*time.Millisecond).Should(Succeed())
	}
}

func TestMemberKilledTrafficMoves(t *testing.T) {
	g := NewWithT(t)
	w := startLab(t, wglab.Options{})
	ld := w.NewClient(clientDial, clientTimeout).StartLoad(workers, pause)
	time.Sleep(500 * time.Millisecond)
	victim := w.Members[0]
	fault := time.Now()
	g.Expect(w.KillMember(victim)).To(Succeed())
	// Both gateways take the member out (health through the tunnel fails).
	g.Eventually(func() bool {
		for _, gw := range w.Gateways {
			h, err := w.HealthyOn(gw)
			if err != nil || h[victim.Name] {
				return false
			}
		}
		return true
	}, 10*time.Second, 50*time.Millisecond).Should(BeTrue())
	settled := time.Now()
	time.Sleep(time.Second)
	rs := ld.Stop()
	// Only connections open through the victim at the kill may fail: at most one per worker.
	g.Expect(len(wglab.Failures(wglab.After(rs, fault)))).To(BeNumerically("<=", workers))
	after := wglab.After(rs, settled)
	g.Expect(wglab.Failures(after)).To(BeEmpty())
	g.Expect(servedBy(after)).NotTo(HaveKey(victim.Name))
	g.Expect(servedBy(after)).To(HaveLen(2))
	t.Logf("member kill: %d requests after the fault, %d failed, worst stall %v",
		len(wglab.After(rs, fault)), len(wglab.Failures(wglab.After(rs, fault))), wglab.Stall(rs, fault, 3*time.Second))
}

func TestMemberQuiescedLosesNothing(t *testing.T) {
	g := NewWithT(t)
	w := startLab(t, wglab.Options{})
	ld := w.NewClient(clientDial, clientTimeout).StartLoad(workers, pause)
	time.Sleep(500 * time.Millisecond)
	victim := w.Members[1]
	g.Expect(w.Quiesce(victim.Name, true)).To(Succeed())
	quiesced := time.Now()
	// Its connection count on every gateway falls to zero (what a pre-drain hook waits for).
	g.Eventually(func() int {
		n := 0
		for _, gw := range w.Gateways {
			st, err := w.GatewayStatus(gw)
			if err != nil {
				return -1
			}
			for _, m := range st.Members {
				if m.Node == victim.Name {
					g.Expect(m.State).To(Equal("quiesced"))
					n += m.Connections
				}
			}
		}
		return n
	}, 10*time.Second, 20*time.Millisecond).Should(Equal(0))
	time.Sleep(500 * time.Millisecond)
	rs := ld.Stop()
	g.Expect(wglab.Failures(rs)).To(BeEmpty())
	g.Expect(servedBy(wglab.After(rs, quiesced))).NotTo(HaveKey(victim.Name))
	g.Expect(servedBy(rs)).To(HaveKey(victim.Name), "it served before")

	g.Expect(w.Quiesce(victim.Name, false)).To(Succeed())
	c := w.NewClient(clientDial, clientTimeout)
	g.Eventually(func() string { n, _ := c.Name(context.Background()); return n }, 5*time.Second, 10*time.Millisecond).Should(Equal(victim.Name))
}

func TestGatewayKilledClientFailsOverAndRestartServesFromState(t *testing.T) {
	g := NewWithT(t)
	w := startLab(t, wglab.Options{})
	ld := w.NewClient(clientDial, clientTimeout).StartLoad(workers, pause)
	time.Sleep(500 * time.Millisecond)
	gw1 := w.Gateways[0]
	fault := time.Now()
	g.Expect(w.KillGateway(gw1)).To(Succeed())
	time.Sleep(time.Second)
	rs := ld.Stop()
	after := wglab.After(rs, fault)
	// Requests in flight through gw1 at the kill fail; every later one goes to gw2.
	g.Expect(len(wglab.Failures(after))).To(BeNumerically("<=", workers))
	g.Expect(wglab.Failures(wglab.After(rs, fault.Add(100*time.Millisecond)))).To(BeEmpty())
	g.Expect(servedBy(after)).To(HaveLen(3))
	t.Logf("gateway kill: worst stall %v over %d requests", wglab.Stall(rs, fault, time.Second), len(after))

	// Restarted, gw1 knows the members from its state file (they re-register only every 10 s, and WaitHealthy below allows 3 s)
	// and reaches them through their NAT mappings.
	g.Expect(w.StartGateway(gw1)).To(Succeed())
	g.Expect(w.WaitHealthy(3*time.Second, "m1", "m2", "m3")).To(Succeed())
	only1 := w.NewClient(clientDial, clientTimeout, gw1)
	seen := map[string]bool{}
	g.Eventually(func() int {
		if n, err := only1.Name(context.Background()); err == nil {
			seen[n] = true
		}
		return len(seen)
	}, 5*time.Second, 10*time.Millisecond).Should(Equal(3))
}

func TestNATMappingFlushedRecovers(t *testing.T) {
	needConntrack(t)
	g := NewWithT(t)
	w := startLab(t, wglab.Options{})
	ld := w.NewClient(clientDial, clientTimeout).StartLoad(workers, pause)
	time.Sleep(500 * time.Millisecond)
	before := map[string]string{}
	st, err := w.GatewayStatus(w.Gateways[0])
	g.Expect(err).NotTo(HaveOccurred())
	for _, m := range st.Members {
		before[m.Node] = m.Endpoint
	}
	fault := time.Now()
	g.Expect(w.FlushNAT(context.Background())).To(Succeed())
	// Within a few keepalives every member serves again through both gateways.
	time.Sleep(3 * time.Second)
	settled := time.Now()
	time.Sleep(time.Second)
	rs := ld.Stop()
	g.Expect(wglab.Failures(wglab.After(rs, fault))).To(BeEmpty(), "a flushed mapping stalls requests, it does not fail them")
	g.Expect(servedBy(wglab.After(rs, settled))).To(HaveLen(3))
	st, err = w.GatewayStatus(w.Gateways[0])
	g.Expect(err).NotTo(HaveOccurred())
	for _, m := range st.Members {
		t.Logf("%s: endpoint %s -> %s", m.Node, before[m.Node], m.Endpoint)
	}
	t.Logf("NAT flush: worst stall %v over %d requests", wglab.Stall(rs, fault, 3*time.Second), len(wglab.After(rs, fault)))
}

func TestKeyRotationUnderLoadLosesNothing(t *testing.T) {
	rotateUnderLoad(t, startLab(t, wglab.Options{}))
}

// rotateUnderLoad rotates the third member's key while a client keeps requesting: nothing
// fails, the old key drains off both gateways and the new one serves.
func rotateUnderLoad(t *testing.T, w *wglab.Lab) {
	g := NewWithT(t)
	m := w.Members[2]
	before, err := w.MemberStatus(m)
	g.Expect(err).NotTo(HaveOccurred())
	ld := w.NewClient(clientDial, clientTimeout).StartLoad(workers, pause)
	time.Sleep(500 * time.Millisecond)
	g.Expect(w.Rotate(m)).To(Succeed())
	after, err := w.MemberStatus(m)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(after.PublicKey).NotTo(Equal(before.PublicKey))
	g.Expect(after.TunnelAddress).NotTo(Equal(before.TunnelAddress))
	// The old key drains off both gateways; the new one is healthy on both.
	g.Eventually(func() []wgapi.MemberStatus {
		var all []wgapi.MemberStatus
		for _, gw := range w.Gateways {
			st, _ := w.GatewayStatus(gw)
			all = append(all, st.Members...)
		}
		return all
	}, 15*time.Second, 50*time.Millisecond).ShouldNot(ContainElement(HaveField("PublicKey", before.PublicKey)))
	g.Expect(w.WaitHealthy(5*time.Second, m.Name)).To(Succeed())
	rotated := time.Now()
	time.Sleep(time.Second)
	rs := ld.Stop()
	g.Expect(wglab.Failures(rs)).To(BeEmpty())
	g.Expect(servedBy(wglab.After(rs, rotated))).To(HaveKey(m.Name), "the new key serves")
	fi, err := os.Stat(w.L.Dir() + "/" + m.Name + "/member.key")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(fi.Mode().Perm()).To(Equal(os.FileMode(0o600)))
}

func TestGatewayLinkCutClientFailsOverAndTunnelsResume(t *testing.T) {
	g := NewWithT(t)
	w := startLab(t, wglab.Options{})
	ld := w.NewClient(clientDial, clientTimeout).StartLoad(workers, pause)
	time.Sleep(500 * time.Millisecond)
	gw1 := w.Gateways[0]
	fault := time.Now()
	g.Expect(gw1.NS.CutLink("eth0")).To(Succeed())
	cut := time.Now() // the link is down from here on
	// New requests wait out the connect timeout to gw1 (500 ms) and go to gw2. (The load's
	// clients may all be stuck in requests that reached gw1 before the cut: a fresh client asks.)
	fresh := w.NewClient(clientDial, clientTimeout)
	seenAfter := map[string]bool{}
	for range 6 {
		start := time.Now()
		name, err := fresh.Name(context.Background())
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(time.Since(start)).To(BeNumerically("<", 3*clientDial), "one connect timeout, then gw2")
		seenAfter[name] = true
	}
	rs := ld.Stop() // requests stuck on gw1 at the cut end at the client's timeout
	// Only requests that reached gw1 before the link went down fail: one per client at most.
	g.Expect(len(wglab.Failures(rs))).To(BeNumerically("<=", workers))
	g.Expect(wglab.Failures(wglab.After(rs, cut))).To(BeEmpty())
	t.Logf("gateway link cut (%v after the fault started): members after it %v, load's worst stall %v", cut.Sub(fault),
		seenAfter, wglab.Stall(rs, cut, time.Second))

	// Cable back: the members' tunnels to gw1 resume (keepalives) and it serves every member again.
	g.Expect(gw1.NS.RestoreLink("eth0")).To(Succeed())
	g.Expect(w.WaitHealthy(10*time.Second, "m1", "m2", "m3")).To(Succeed())
	only1 := w.NewClient(clientDial, clientTimeout, gw1)
	seen := map[string]bool{}
	g.Eventually(func() int {
		if n, err := only1.Name(context.Background()); err == nil {
			seen[n] = true
		}
		return len(seen)
	}, 5*time.Second, 10*time.Millisecond).Should(Equal(3))
}
