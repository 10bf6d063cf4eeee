//go:build linux

// Package realcp runs caplb's ARP agent in front of a real control plane: three machines whose
// etcd cluster and kube-apiservers are made by real kubeadm (e2e/lab/kubeadm) and run from
// kubeadm's manifests, the agents checking the real /readyz. Its tests drive the faults a real
// control plane adds to the stand-in labs: etcd losing quorum (every /readyz fails at once) and a
// machine killed hard while etcd keeps quorum.
package realcp

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"sigs.k8s.io/yaml"

	agentv1 "github.com/caplb/caplb/api/agent/v1alpha1"
	"github.com/caplb/caplb/e2e/envtest"
	"github.com/caplb/caplb/e2e/lab"
	"github.com/caplb/caplb/e2e/lab/kubeadm"
)

// The lab's address plan (inside its namespaces only).
var (
	vip    = netip.MustParseAddr("10.48.0.100")
	client = netip.MustParsePrefix("10.48.0.2/24")
)

// machine is one control-plane machine of the lab.
type machine struct {
	kubeadm.Machine
	ns                   *lab.Netns
	nl                   *netlink.Handle
	etcd, apiserver, agt *lab.Process
	agentConfig          string
}

// cpLab is three kubeadm machines with caplb's agent on each, and a client.
type cpLab struct {
	l        *lab.Lab
	client   *lab.Netns
	machines []*machine
	cluster  kubeadm.Cluster
	bins     kubeadm.Binaries
	agent    string
}

func (c *cpLab) kubelet(m *machine) kubeadm.Kubelet {
	return kubeadm.Kubelet{NS: m.ns, Machine: m.Machine, Bins: c.bins, Scratch: filepath.Join(c.l.Dir(), "rootfs")}
}

// startLab boots the control plane (the first machine's kubeadm init, two joins as etcd learners
// promoted once caught up) and then the agents.
func startLab(t *testing.T) *cpLab {
	t.Helper()
	lab.SkipUnlessRoot(t)
	ctx := context.Background()
	c := &cpLab{l: lab.NewT(t, "realcp")}
	dir, err := envtest.BinaryDir()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "kubeadm")); err != nil {
		lab.SkipOrFailInCI(t, "needs kubeadm in %s: run `make testbin`", dir)
	}
	c.cluster = kubeadm.Cluster{Name: "realcp", Endpoint: vip, Kubeadm: filepath.Join(dir, "kubeadm"), KubernetesVersion: envtest.K8sVersion}
	c.bins = kubeadm.Binaries{Podrun: filepath.Join(c.l.Dir(), "podrun"), Etcd: filepath.Join(dir, "etcd"), APIServer: filepath.Join(dir, "kube-apiserver")}
	c.agent = filepath.Join(c.l.Dir(), "caplb-agent")
	for pkg, out := range map[string]string{"./e2e/lab/podrun": c.bins.Podrun, "./cmd/caplb-agent": c.agent} {
		if err := lab.BuildBinary(pkg, out); err != nil {
			t.Fatal(err)
		}
	}
	must(t, c.network())
	first := c.machines[0]
	must(t, c.cluster.Init(ctx, first.Machine, first.ns))
	must(t, c.startPods(first))
	must(t, waitReady(ctx, first, 90*time.Second))
	must(t, c.cluster.UploadConfig(ctx, first.Machine, first.ns))
	shared, err := kubeadm.ReadShared(first.Machine)
	must(t, err)
	for _, m := range c.machines[1:] {
		must(t, c.join(ctx, m, shared))
	}
	gossip, err := lab.WriteGossipKey(filepath.Join(c.l.Dir(), "gossip.key"))
	must(t, err)
	for _, m := range c.machines {
		must(t, c.writeAgentConfig(m, gossip))
		must(t, c.startAgent(m))
	}
	return c
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// network builds a switch, three machines and a client on one segment.
func (c *cpLab) network() error {
	sw, err := c.l.AddNamespace("sw")
	if err != nil {
		return err
	}
	if c.client, err = c.l.AddNamespace("client"); err != nil {
		return err
	}
	if err := c.l.AddLink(c.client, "eth0", sw, "p-client"); err != nil {
		return err
	}
	if err := c.client.AddAddr("eth0", client); err != nil {
		return err
	}
	ports := []string{"p-client"}
	for i := 1; i <= 3; i++ {
		m := &machine{Machine: kubeadm.Machine{Name: "cp-" + strconv.Itoa(i), Addr: netip.AddrFrom4([4]byte{10, 48, 0, byte(10 + i)})}}
		m.Root = filepath.Join(c.l.Dir(), "machines", m.Name, "root")
		if m.ns, err = c.l.AddNamespace(m.Name); err != nil {
			return err
		}
		port := "p-" + m.Name
		if err := c.l.AddLink(m.ns, "eth0", sw, port); err != nil {
			return err
		}
		if err := m.ns.AddAddr("eth0", netip.PrefixFrom(m.Addr, 24)); err != nil {
			return err
		}
		if m.nl, err = m.ns.Netlink(); err != nil {
			return err
		}
		ports = append(ports, port)
		c.machines = append(c.machines, m)
	}
	return c.l.AddBridge(sw, "br0", ports...)
}

func (c *cpLab) startPods(m *machine) (err error) {
	if m.etcd, err = c.kubelet(m).Start(kubeadm.EtcdManifest); err != nil {
		return err
	}
	m.apiserver, err = c.kubelet(m).Start(kubeadm.APIManifest)
	return err
}

// join adds m's etcd member as a learner, writes its files with kubeadm, starts its pods and
// promotes the learner once it caught up, as `kubeadm join --control-plane` does.
func (c *cpLab) join(ctx context.Context, m *machine, shared map[string][]byte) error {
	first := c.machines[0]
	etcd, err := kubeadm.NewEtcd(first.Machine, m.ns.DialContext, first.ClientURL())
	if err != nil {
		return err
	}
	defer etcd.Close()
	id, initial, err := etcd.AddLearner(ctx, m.Machine)
	if err != nil {
		return err
	}
	if err := c.cluster.Join(ctx, m.Machine, m.ns, shared, initial); err != nil {
		return err
	}
	if err := c.startPods(m); err != nil {
		return err
	}
	pctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	if err := etcd.Promote(pctx, id); err != nil {
		return err
	}
	return waitReady(ctx, m, 90*time.Second)
}

// writeAgentConfig is the ARP agent's configuration on m: static members, the health check on
// the local API server's /readyz with kubeadm's CA, as caplb renders it for a kubeadm node.
func (c *cpLab) writeAgentConfig(m *machine, gossipKey string) error {
	cfg := agentv1.New()
	cfg.NodeName = m.Name
	cfg.VIPs = []string{vip.String()}
	cfg.Port = kubeadm.APIPort
	cfg.Health = agentv1.HealthConfig{URL: "https://127.0.0.1:6443/readyz", CAFile: m.Path(filepath.Join(kubeadm.PKIDir, "ca.crt"))}
	cfg.Admin = agentv1.AdminConfig{Listen: "127.0.0.1:7473", ControlSocket: filepath.Join(c.l.Dir(), m.Name+"-control.sock")}
	cfg.Election = agentv1.ElectionConfig{SecretKeyFile: gossipKey}
	for _, o := range c.machines {
		cfg.Members = append(cfg.Members, agentv1.MemberConfig{Name: o.Name, Address: o.Addr.String()})
	}
	b, err := yaml.Marshal(cfg)
	if err != nil {
		return err
	}
	m.agentConfig = filepath.Join(c.l.Dir(), m.Name+"-agent.yaml")
	return os.WriteFile(m.agentConfig, b, 0o600)
}

func (c *cpLab) startAgent(m *machine) (err error) {
	m.agt, err = m.ns.Start(m.Name+"-agent", []string{c.agent, "agent", "--config", m.agentConfig}, nil)
	return err
}

// holders lists the machines whose eth0 carries the VIP (the kernel's truth).
func (c *cpLab) holders() []string {
	var out []string
	for _, m := range c.machines {
		if m.nl == nil {
			continue
		}
		if ok, err := lab.HasAddr(m.nl, vip); err == nil && ok {
			out = append(out, m.Name)
		}
	}
	return out
}

// waitReady waits for m's API server's /readyz, from inside m (as the agent checks it).
func waitReady(ctx context.Context, m *machine, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var last error
	for time.Now().Before(deadline) {
		if last = readyz(ctx, m); last == nil {
			return nil
		}
		time.Sleep(250 * time.Millisecond)
	}
	return fmt.Errorf("%s: API server not ready within %v: %w", m.Name, timeout, last)
}
