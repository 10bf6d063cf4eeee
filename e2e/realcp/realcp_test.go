//go:build linux

package realcp

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"golang.org/x/sys/unix"

	"github.com/caplb/caplb/e2e/envtest"
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
	cs, err := c.AdminClient(5 * time.Second)
	g.Expect(err).NotTo(HaveOccurred())

	g.Eventually(c.Holders, 30*time.Second, 50*time.Millisecond).Should(HaveLen(1), "one machine holds the VIP")
	// The agents run as the rendered static pod grants (the lab's kubelet execs them with it):
	// NET_ADMIN and NET_RAW only, none to pass on, no privilege to gain.
	netCaps := uint64(1)<<unix.CAP_NET_ADMIN | uint64(1)<<unix.CAP_NET_RAW
	g.Eventually(c.AgentPrivileges, 10*time.Second, 100*time.Millisecond).Should(And(HaveLen(3), HaveEach(Privileges{
		Command: "caplb-agent", Effective: netCaps, Permitted: netCaps, Bounding: netCaps, NoNewPrivs: true})))
	// The kube-apiservers run with the sample's flags (kubeadm's extraArgs, in their manifests).
	args, err := kubeadm.SampleAPIServerArgs(sample)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(args).To(ContainElements(HaveField("Name", "shutdown-delay-duration"), HaveField("Name", "goaway-chance")))
	for _, m := range c.machines {
		cmd, err := c.APIServerArgs(m.Name)
		g.Expect(err).NotTo(HaveOccurred())
		for _, a := range args {
			g.Expect(cmd).To(ContainElement("--"+a.Name+"="+a.Value), "%s's kube-apiserver", m.Name)
		}
	}
	g.Eventually(func() error { return Write(ctx, cs, "boot") }, 30*time.Second, 200*time.Millisecond).Should(Succeed(),
		"client-go with kubeadm's admin.conf writes through the VIP")
	// Each agent says what it serves, from the rendered file: the sample's LoadBalancer and
	// cluster, the mode, the VIP and its own node (the hostname the lab's kubelet gives it).
	lb, _, err := lab.SampleObjects(sample, "default")
	g.Expect(err).NotTo(HaveOccurred())
	metrics := c.AgentMetrics()
	g.Expect(metrics).To(HaveLen(len(c.machines)))
	for _, m := range c.machines {
		g.Expect(metrics[m.Name]).To(ContainSubstring(fmt.Sprintf(
			`caplb_agent_info{cluster=%q,loadbalancer=%q,mode="arp",namespace="default",node=%q,vips=%q} 1`,
			lb.Spec.ClusterName, lb.Name, m.Name, vip.String())), "%s's agent", m.Name)
	}

	t.Run("etcd quorum loss: every readyz fails, the VIP stays (fail-open), clients recover by themselves", func(t *testing.T) {
		r := startClients(t, c, "quorum")
		q, err := c.QuorumLoss(ctx, cs, 15*time.Second)
		res := r.Stop(30 * time.Second)
		t.Logf("quorum loss: %+v", q)
		t.Logf("client-go through the VIP: %+v", res)
		g := NewWithT(t)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(q.Steady.NoOwner).To(BeZero(), "the VIP had no owner in %d of %d samples during the quorum loss", q.Steady.NoOwner, q.Steady.Samples)
		g.Expect(q.Steady.TwoOwners).To(BeZero(), "two owners in %d of %d samples", q.Steady.TwoOwners, q.Steady.Samples)
		g.Expect(q.APIAnswered).To(BeTrue(), "an API server answers at the VIP (recovery tools reach it): %s", q.APIError)
		g.Expect(q.OwnerKept).To(BeTrue(), "the fail-open owner kept the VIP, nothing moved")
		g.Expect(q.Return.NoOwner).To(BeZero(), "the VIP had no owner in %d of %d samples while quorum came back", q.Return.NoOwner, q.Return.Samples)
		g.Expect(res.LostEvents).To(BeZero(), "no successful write lost by the informer")
		g.Expect(res.StoreMatches).To(BeTrue(), "the informer converges to the writer's last state")
	})
	t.Run("the VIP owner's machine killed hard: etcd keeps quorum, the VIP moves", func(t *testing.T) {
		r := startClients(t, c, "kill")
		k, err := c.HardKill(ctx, cs)
		res := r.Stop(30 * time.Second)
		t.Logf("%s killed: first answer on a new connection through the VIP after %v, first client-go request on the kept connection after %v",
			k.Victim, k.NewConnection.Round(time.Millisecond), k.KeptConnection.Round(time.Millisecond))
		t.Logf("client-go through the VIP: %+v", res)
		g := NewWithT(t)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(k.Holders).To(HaveLen(1))
		g.Expect(k.Holders).NotTo(ContainElement(k.Victim))
		g.Expect(res.LeaderLosses).To(BeZero(), "a 15 s lease outlives the fail-over: the leader keeps it")
		g.Expect(res.LostEvents).To(BeZero())
		g.Expect(res.StoreMatches).To(BeTrue())
	})
}

// startLab boots the lab, skipping where it cannot run; its logs are printed if t fails.
func startLab(t *testing.T) *Lab {
	t.Helper()
	lab.SkipUnlessRoot(t)
	dir, err := envtest.BinaryDir()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "kubeadm")); err != nil {
		lab.SkipOrFailInCI(t, "needs kubeadm in %s: run `make testbin`", dir)
	}
	c, err := New(Config{Name: "realcp", BinDir: dir, Logf: t.Logf})
	if c != nil {
		t.Cleanup(func() {
			if t.Failed() {
				c.l.DumpLogs(t, 60)
			}
			if err := c.Close(); err != nil {
				t.Errorf("lab close: %v", err)
			}
		})
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Boot(context.Background()); err != nil {
		t.Fatal(err)
	}
	return c
}

// startClients runs the real clients (writer + informer, leader election) through the VIP.
func startClients(t *testing.T, c *Lab, name string) *clients.Run {
	t.Helper()
	r, err := c.StartClients(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	return r
}
