//go:build linux

// Package realcp runs caplb's ARP agent in front of a real control plane: three machines whose
// etcd cluster and kube-apiservers are made by real kubeadm (e2e/lab/kubeadm, with the shipped
// sample's API server flags) and run from kubeadm's manifests, the agents booted from the files
// caplb's manager renders for the sample's LoadBalancer (agent.go) and checking the real /readyz.
// It drives the faults a real
// control plane adds to the stand-in labs — etcd losing quorum (every /readyz fails at once) and
// a machine killed hard while etcd keeps quorum — for its test (one trial each, asserted) and for
// `make bench-rollout`'s fault pass (e2e/bench/rollout: several trials, figures).
package realcp

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/caplb/caplb/e2e/envtest"
	"github.com/caplb/caplb/e2e/lab"
	"github.com/caplb/caplb/e2e/lab/kubeadm"
)

// The lab's address plan (inside its namespaces only).
var (
	vip    = netip.MustParseAddr("10.48.0.100")
	client = netip.MustParsePrefix("10.48.0.2/24")
)

// Config shapes a lab.
type Config struct {
	// Name prefixes the lab's namespaces (1-12 characters): two labs running at once need
	// different names (a lab first removes an earlier one's leftovers of the same name).
	Name string
	// BinDir holds kubeadm, etcd and kube-apiserver (`make testbin`); empty: envtest.BinaryDir().
	BinDir string
	// Podrun and Agent are prebuilt binaries of ./e2e/lab/podrun and ./cmd/caplb-agent (the
	// agent static, CGO_ENABLED=0: the lab's kubelet runs it in a root holding nothing else);
	// empty: built so into the lab's directory.
	Podrun, Agent string
	// Logf, optional, gets the lab's progress (boot, rebuilds).
	Logf func(format string, args ...any)
}

// machine is one control-plane machine of the lab.
type machine struct {
	kubeadm.Machine
	ns                   *lab.Netns
	nl                   *netlink.Handle
	etcd, apiserver, agt *lab.Process
	// mac is eth0's address, kept when the machine is rebuilt (the same NIC on a fresh disk);
	// generation counts the rebuilds (each gets a new root).
	mac        string
	generation int
}

// Lab is three kubeadm machines with caplb's agent on each, and a client.
type Lab struct {
	cfg      Config
	l        *lab.Lab
	sw       *lab.Netns
	client   *lab.Netns
	machines []*machine
	cluster  kubeadm.Cluster
	// bins are what the lab's kubelet runs: etcd, kube-apiserver and caplb's agent.
	bins kubeadm.Binaries
	// boot is caplb's bootstrap for every machine (rendered once the machines are known).
	boot bootstrap
	// ca verifies the API servers (the cluster CA, read once the first machine has it).
	ca *x509.CertPool
	// adminConf and superAdminConf are kubeadm init's kubeconfigs, copied off the first
	// machine's disk (which a hard kill and rebuild wipes; they stay valid: same CA).
	adminConf, superAdminConf string
}

// New makes an empty lab (its directory; the binaries it builds). Close it in every case, also
// when Boot fails: its logs stay readable until then (LogTail).
func New(cfg Config) (*Lab, error) {
	if cfg.Name == "" {
		cfg.Name = "realcp"
	}
	if cfg.BinDir == "" {
		dir, err := envtest.BinaryDir()
		if err != nil {
			return nil, err
		}
		cfg.BinDir = dir
	}
	if _, err := os.Stat(filepath.Join(cfg.BinDir, "kubeadm")); err != nil {
		return nil, fmt.Errorf("needs kubeadm in %s: run `make testbin`: %w", cfg.BinDir, err)
	}
	l, err := lab.New(cfg.Name)
	if err != nil {
		return nil, err
	}
	c := &Lab{cfg: cfg, l: l}
	args, err := kubeadm.SampleAPIServerArgs(sample)
	if err != nil {
		return c, err
	}
	c.cluster = kubeadm.Cluster{Name: "realcp", Endpoint: vip, Kubeadm: filepath.Join(cfg.BinDir, "kubeadm"),
		KubernetesVersion: envtest.K8sVersion, APIServerArgs: args}
	c.bins = kubeadm.Binaries{Podrun: cfg.Podrun, Etcd: filepath.Join(cfg.BinDir, "etcd"),
		APIServer: filepath.Join(cfg.BinDir, "kube-apiserver"), Agent: cfg.Agent}
	for pkg, out := range map[string]*string{"./e2e/lab/podrun": &c.bins.Podrun, "./cmd/caplb-agent": &c.bins.Agent} {
		if *out != "" {
			continue
		}
		*out = filepath.Join(l.Dir(), filepath.Base(pkg))
		if err := lab.BuildStaticBinary(pkg, *out); err != nil {
			return c, fmt.Errorf("building %s: %w", pkg, err)
		}
	}
	return c, nil
}

// Boot starts the control plane (the first machine's kubeadm init, two joins as etcd learners
// promoted once caught up) and then the agents.
func (c *Lab) Boot(ctx context.Context) error {
	if err := c.network(); err != nil {
		return err
	}
	first := c.machines[0]
	if err := c.cluster.Init(ctx, first.Machine, first.ns); err != nil {
		return err
	}
	var err error
	if c.ca, err = readCA(first); err != nil {
		return err
	}
	if err := c.startPods(first); err != nil {
		return err
	}
	if err := c.waitReady(ctx, first, 90*time.Second); err != nil {
		return err
	}
	if err := c.cluster.UploadConfig(ctx, first.Machine, first.ns); err != nil {
		return err
	}
	if c.adminConf, err = c.keep(first, kubeadm.AdminConfPath); err != nil {
		return err
	}
	if c.superAdminConf, err = c.keep(first, "/etc/kubernetes/super-admin.conf"); err != nil {
		return err
	}
	c.logf("%s: kubeadm init done", first.Name)
	for _, m := range c.machines[1:] {
		if err := c.join(ctx, m, first); err != nil {
			return err
		}
		c.logf("%s: joined (etcd learner promoted)", m.Name)
	}
	if c.boot, err = c.renderBootstrap(); err != nil {
		return err
	}
	for _, m := range c.machines {
		if err := c.startAgent(m); err != nil {
			return err
		}
	}
	return nil
}

// Close stops everything and removes the lab's namespaces.
func (c *Lab) Close() error {
	if c == nil || c.l == nil {
		return nil
	}
	return c.l.Close()
}

// LogTail is the last lines of every process log of the lab, for a failure report.
func (c *Lab) LogTail(lines int) string { return c.l.LogTail(lines) }

// AgentLogs is the agents' decision lines since since, in time order (lab.MergeAgentDecisions),
// which say why each took or let go of the VIP (the benchmark prints them beside a trial that
// found the VIP without an owner).
func (c *Lab) AgentLogs(since time.Time) string {
	logs := map[string]string{}
	for _, m := range c.machines {
		logs[m.Name] = c.agentLog(m)
	}
	return lab.MergeAgentDecisions(logs, since)
}

func (c *Lab) logf(format string, args ...any) {
	if c.cfg.Logf != nil {
		c.cfg.Logf(format, args...)
	}
}

func (c *Lab) kubelet(m *machine) kubeadm.Kubelet {
	return kubeadm.Kubelet{NS: m.ns, Machine: m.Machine, Bins: c.bins, Scratch: filepath.Join(c.l.Dir(), "rootfs")}
}

// network builds a switch, three machines and a client on one segment.
func (c *Lab) network() (err error) {
	if c.sw, err = c.l.AddNamespace("sw"); err != nil {
		return err
	}
	if c.client, err = c.l.AddNamespace("client"); err != nil {
		return err
	}
	if err := c.l.AddLink(c.client, "eth0", c.sw, "p-client"); err != nil {
		return err
	}
	if err := c.client.AddAddr("eth0", client); err != nil {
		return err
	}
	if err := c.l.AddBridge(c.sw, "br0", "p-client"); err != nil {
		return err
	}
	for i := 1; i <= 3; i++ {
		m := &machine{Machine: kubeadm.Machine{Name: "cp-" + strconv.Itoa(i), Addr: netip.AddrFrom4([4]byte{10, 48, 0, byte(10 + i)})}}
		m.Root = c.machineRoot(m.Name, 0)
		if err := c.plug(m); err != nil {
			return err
		}
		c.machines = append(c.machines, m)
	}
	return nil
}

// machineRoot is the machine's disk in its generation (0: as booted; a rebuild gets a fresh one).
func (c *Lab) machineRoot(name string, generation int) string {
	dir := name
	if generation > 0 {
		dir += "." + strconv.Itoa(generation)
	}
	return filepath.Join(c.l.Dir(), "machines", dir, "root")
}

// plug gives m a namespace with eth0 on the switch (its address, and its MAC if it had one).
func (c *Lab) plug(m *machine) (err error) {
	ctx := context.Background()
	if m.ns, err = c.l.AddNamespace(m.Name); err != nil {
		return err
	}
	port := "p-" + m.Name
	if err := c.l.AddLink(m.ns, "eth0", c.sw, port); err != nil {
		return err
	}
	if _, err := c.sw.Run(ctx, "ip", "link", "set", port, "master", "br0", "up"); err != nil {
		return err
	}
	if m.mac != "" {
		// A rebuilt machine keeps its NIC: its peers' neighbour entries stay right.
		if _, err := m.ns.Run(ctx, "ip", "link", "set", "eth0", "address", m.mac); err != nil {
			return err
		}
	}
	if err := m.ns.AddAddr("eth0", netip.PrefixFrom(m.Addr, 24)); err != nil {
		return err
	}
	if m.nl, err = m.ns.Netlink(); err != nil {
		return err
	}
	link, err := m.nl.LinkByName("eth0")
	if err != nil {
		return fmt.Errorf("%s: eth0: %w", m.Name, err)
	}
	m.mac = link.Attrs().HardwareAddr.String()
	return nil
}

func (c *Lab) startPods(m *machine) (err error) {
	if m.etcd, err = c.kubelet(m).Start(kubeadm.EtcdManifest); err != nil {
		return err
	}
	m.apiserver, err = c.kubelet(m).Start(kubeadm.APIManifest)
	return err
}

// join adds m's etcd member as a learner through via's etcd, writes m's files with kubeadm,
// starts its pods and promotes the learner once it caught up, as `kubeadm join --control-plane`
// does.
func (c *Lab) join(ctx context.Context, m, via *machine) error {
	shared, err := kubeadm.ReadShared(via.Machine)
	if err != nil {
		return err
	}
	etcd, err := kubeadm.NewEtcd(via.Machine, m.ns.DialContext, via.ClientURL())
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
	return c.waitReady(ctx, m, 90*time.Second)
}

// Holders lists the machines whose eth0 carries the VIP (the kernel's truth).
func (c *Lab) Holders() []string {
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
func (c *Lab) waitReady(ctx context.Context, m *machine, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var last error
	for time.Now().Before(deadline) {
		if last = c.readyz(ctx, m); last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
	return fmt.Errorf("%s: API server not ready within %v: %w", m.Name, timeout, last)
}

// keep copies the file at path on m into the lab's directory and returns the copy's path.
func (c *Lab) keep(m *machine, path string) (string, error) {
	b, err := os.ReadFile(m.Path(path))
	if err != nil {
		return "", err
	}
	out := filepath.Join(c.l.Dir(), filepath.Base(path))
	return out, os.WriteFile(out, b, 0o600)
}

// readCA reads the cluster CA kubeadm wrote on m.
func readCA(m *machine) (*x509.CertPool, error) {
	b, err := os.ReadFile(m.Path(filepath.Join(kubeadm.PKIDir, "ca.crt")))
	if err != nil {
		return nil, fmt.Errorf("cluster CA on %s: %w", m.Name, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, errors.New("cluster CA: no certificate")
	}
	return pool, nil
}
