//go:build linux

package arplab

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	agentv1 "github.com/caplb/caplb/api/agent/v1alpha1"
	"github.com/caplb/caplb/e2e/lab"
	"github.com/caplb/caplb/e2e/testpki"

	"github.com/vishvananda/netlink"
	"sigs.k8s.io/yaml"

	"github.com/caplb/caplb/modes/agent"
)

// The ARP lab's address plan (inside the lab's namespaces only).
var (
	SubnetV4 = netip.MustParsePrefix("10.44.0.0/24")
	SubnetV6 = netip.MustParsePrefix("fd44::/64")
	VIPv4    = netip.MustParseAddr("10.44.0.100")
	VIPv6    = netip.MustParseAddr("fd44::100")
	ClientV4 = netip.MustParseAddr("10.44.0.2")
	ClientV6 = netip.MustParseAddr("fd44::2")
)

const (
	// APIPort is the port behind the VIP (the stand-in's name service).
	APIPort = 6443
	// ReadyzPort is where the stand-in serves https://127.0.0.1:ReadyzPort/readyz.
	ReadyzPort = 6444
	// EchoPort is the stand-in's long-lived echo service behind the VIP:
	// it writes the node name, then answers each line "<node>: <line>".
	EchoPort = 6445
	// AdminAddr is the agent's admin listener inside each node.
	AdminAddr = "127.0.0.1:7473"
	// Bridge is the switch's bridge.
	Bridge = "br0"
)

// ClusterOptions shapes an ARP lab.
type ClusterOptions struct {
	// Nodes (default 3) named n1..nN.
	Nodes int
	// IPv6 adds an IPv6 VIP (and node addresses) next to the IPv4 one.
	IPv6 bool
	// AgentBinary is the caplb binary; StandinBinary the stand-in apiserver.
	AgentBinary, StandinBinary string
	// Tune adjusts each node's agent configuration before it is written.
	Tune func(node int, cfg *agentv1.AgentConfiguration)
	// AgentVerbosity is passed as -v.
	AgentVerbosity int
	// Idle nodes (by index) start without their agent: a test starts it
	// later (StartAgent), e.g. a machine that joins the control plane.
	Idle func(node int) bool
	// AgentArgv, when set, is how StartAgent runs a node's agent (in the
	// node's namespace) instead of AgentBinary with the lab's own config: a
	// caller whose agents read a configuration made elsewhere (the Helm
	// chart's rendered DaemonSet, run by the lab kubelet). AgentBinary, Tune
	// and AgentVerbosity then do not reach the agent.
	AgentArgv func(n *Node) []string
	// NoAgents builds the lab and starts the stand-ins but no agent: the
	// caller runs another VIP daemon (the ARP bench's keepalived peer).
	NoAgents bool
	// Forwarding turns IP forwarding on in the nodes, as on every kubeadm
	// node (its preflight requires net.ipv4.ip_forward=1): the spread mode
	// forwards through the VIP holder. Off by default, which keeps the
	// failover labs as their published figures were measured.
	Forwarding bool
}

// Cluster is a switch, N control-plane nodes and a client.
type Cluster struct {
	Lab    *lab.Lab
	Switch *lab.Netns
	Client *lab.Netns
	Nodes  []*Node
	VIPs   []netip.Addr
	PKI    testpki.PKI
	// GossipKey is the key file every agent uses (mode 0600).
	GossipKey string
	opts      ClusterOptions
}

// Node is one control-plane node of the lab.
type Node struct {
	Name    string
	NS      *lab.Netns
	Addr4   netip.Addr
	Addr6   netip.Addr
	Port    string // its port on the switch bridge
	Agent   *lab.Process
	Standin *lab.Process
	Config  string // agent config path
	nl      *netlink.Handle
	fail    string // stand-in fail file
	http    *http.Client
	starts  int
	socket  string // control socket
}

// StartCluster builds the topology and starts a stand-in apiserver and the
// real agent in every node.
func StartCluster(l *lab.Lab, opts ClusterOptions) (*Cluster, error) {
	if opts.Nodes == 0 {
		opts.Nodes = 3
	}
	c := &Cluster{Lab: l, opts: opts, VIPs: []netip.Addr{VIPv4}}
	if opts.IPv6 {
		c.VIPs = append(c.VIPs, VIPv6)
	}
	var err error
	hosts := []string{}
	for i := 1; i <= opts.Nodes; i++ {
		hosts = append(hosts, "n"+strconv.Itoa(i), netip.AddrFrom4([4]byte{10, 44, 0, byte(10 + i)}).String())
	}
	for _, v := range c.VIPs {
		hosts = append(hosts, v.String())
	}
	if c.PKI, err = testpki.WriteTestPKI(l.Dir(), hosts...); err != nil {
		return nil, err
	}
	if c.GossipKey, err = lab.WriteGossipKey(filepath.Join(l.Dir(), "gossip.key")); err != nil {
		return nil, err
	}
	if c.Switch, err = l.AddNamespace("sw"); err != nil {
		return nil, err
	}
	if c.Client, err = l.AddNamespace("client"); err != nil {
		return nil, err
	}
	ports := []string{"p-client"}
	if err := l.AddLink(c.Client, "eth0", c.Switch, "p-client"); err != nil {
		return nil, err
	}
	if err := c.Client.AddAddr("eth0", netip.PrefixFrom(ClientV4, SubnetV4.Bits())); err != nil {
		return nil, err
	}
	if opts.IPv6 {
		if err := c.Client.AddAddr("eth0", netip.PrefixFrom(ClientV6, SubnetV6.Bits())); err != nil {
			return nil, err
		}
	}
	for i := 1; i <= opts.Nodes; i++ {
		n := &Node{Name: "n" + strconv.Itoa(i), Port: "p-n" + strconv.Itoa(i),
			Addr4: netip.AddrFrom4([4]byte{10, 44, 0, byte(10 + i)}),
			Addr6: netip.MustParseAddr("fd44::" + strconv.Itoa(10+i))}
		if n.NS, err = l.AddNamespace(n.Name); err != nil {
			return nil, err
		}
		if err := l.AddLink(n.NS, "eth0", c.Switch, n.Port); err != nil {
			return nil, err
		}
		if err := n.NS.AddAddr("eth0", netip.PrefixFrom(n.Addr4, SubnetV4.Bits())); err != nil {
			return nil, err
		}
		if opts.IPv6 {
			if err := n.NS.AddAddr("eth0", netip.PrefixFrom(n.Addr6, SubnetV6.Bits())); err != nil {
				return nil, err
			}
		}
		if n.nl, err = n.NS.Netlink(); err != nil {
			return nil, err
		}
		if opts.Forwarding {
			if _, err := n.NS.Run(context.Background(), "sysctl", "-qw", "net.ipv4.ip_forward=1", "net.ipv6.conf.all.forwarding=1"); err != nil {
				return nil, err
			}
		}
		n.fail = filepath.Join(l.Dir(), n.Name+".readyz-fail")
		n.socket = n.ControlSocket(l)
		n.http = n.NS.HTTPClient(2 * time.Second)
		ports = append(ports, n.Port)
		c.Nodes = append(c.Nodes, n)
	}
	if err := l.AddBridge(c.Switch, Bridge, ports...); err != nil {
		return nil, err
	}
	for i, n := range c.Nodes {
		if err := c.writeConfig(i, n); err != nil {
			return nil, err
		}
		n.Standin, err = n.NS.Start(n.Name+"-standin", []string{opts.StandinBinary,
			"-name", n.Name, "-service-listen", ":" + strconv.Itoa(APIPort),
			"-echo-listen", ":" + strconv.Itoa(EchoPort),
			"-readyz-listen", "127.0.0.1:" + strconv.Itoa(ReadyzPort),
			"-cert", c.PKI.CertFile, "-key", c.PKI.KeyFile, "-fail-file", n.fail}, nil)
		if err != nil {
			return nil, err
		}
	}
	for i, n := range c.Nodes {
		if opts.NoAgents {
			break
		}
		if opts.Idle != nil && opts.Idle(i) {
			continue
		}
		if err := c.StartAgent(n); err != nil {
			return nil, err
		}
	}
	return c, nil
}

func (c *Cluster) writeConfig(i int, n *Node) error {
	cfg := agentv1.AgentConfiguration{
		TypeMeta:  agentv1.New().TypeMeta,
		NodeName:  n.Name,
		VIPs:      nil,
		Port:      APIPort,
		Interface: "", // auto-detected from the route to the VIP
		Health: agentv1.HealthConfig{
			URL:    "https://127.0.0.1:" + strconv.Itoa(ReadyzPort) + "/readyz",
			CAFile: c.PKI.CAFile,
		},
		Admin:    agentv1.AdminConfig{Listen: AdminAddr, ControlSocket: n.ControlSocket(c.Lab)},
		Election: agentv1.ElectionConfig{SecretKeyFile: c.GossipKey},
	}
	for _, v := range c.VIPs {
		cfg.VIPs = append(cfg.VIPs, v.String())
	}
	for _, m := range c.Nodes {
		cfg.Members = append(cfg.Members, agentv1.MemberConfig{Name: m.Name, Address: m.Addr4.String()})
	}
	if c.opts.Tune != nil {
		c.opts.Tune(i, &cfg)
	}
	b, err := yaml.Marshal(cfg)
	if err != nil {
		return fmt.Errorf("agent config for %s: %w", n.Name, err)
	}
	n.Config = filepath.Join(c.Lab.Dir(), n.Name+"-agent.yaml")
	return os.WriteFile(n.Config, b, 0o644)
}

// StartAgent (re)starts the node's agent.
func (c *Cluster) StartAgent(n *Node) error {
	n.starts++
	argv := []string{c.opts.AgentBinary, "agent", "--config", n.Config, "-v", strconv.Itoa(c.opts.AgentVerbosity)}
	if c.opts.AgentArgv != nil {
		argv = c.opts.AgentArgv(n)
	}
	p, err := n.NS.Start(n.Name+"-agent", argv, nil)
	if err != nil {
		return err
	}
	n.Agent = p
	return nil
}

// SetHealthy makes the node's stand-in /readyz pass (true) or fail (false).
func (n *Node) SetHealthy(ok bool) error {
	if ok {
		if err := os.Remove(n.fail); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		return nil
	}
	return os.WriteFile(n.fail, []byte("fail\n"), 0o644)
}

// Status fetches the agent's /status.
func (n *Node) Status(ctx context.Context) (agent.Status, error) {
	var s agent.Status
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+AdminAddr+"/status", nil)
	if err != nil {
		return s, err
	}
	resp, err := n.http.Do(req)
	if err != nil {
		return s, fmt.Errorf("%s /status: %w", n.Name, err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
		return s, fmt.Errorf("%s /status: %w", n.Name, err)
	}
	return s, nil
}

// ControlSocket is the node's agent control socket (a path on the host:
// the lab's nodes share one filesystem, so each has its own).
func (n *Node) ControlSocket(l *lab.Lab) string {
	return filepath.Join(l.Dir(), n.Name+"-control.sock")
}

// Admin sends method to the agent's admin path and returns the status
// code: GET to the read-only listener, anything else (POST/DELETE
// /quiesce) to the root-only control socket, as an operator would.
func (n *Node) Admin(ctx context.Context, method, path string) (int, error) {
	client, base := n.http, "http://"+AdminAddr
	if method != http.MethodGet {
		client, base = lab.UnixHTTPClient(n.socket, 2*time.Second), "http://agent"
	}
	req, err := http.NewRequestWithContext(ctx, method, base+path, nil)
	if err != nil {
		return 0, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, fmt.Errorf("%s %s %s: %w", n.Name, method, path, err)
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

// Metrics fetches the agent's /metrics text.
func (n *Node) Metrics(ctx context.Context) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+AdminAddr+"/metrics", nil)
	if err != nil {
		return "", err
	}
	resp, err := n.http.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var b strings.Builder
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		b.WriteString(sc.Text() + "\n")
	}
	return b.String(), sc.Err()
}

// HoldsVIP reports whether the kernel of the node has vip on an interface:
// the ground truth, whatever the agent believes.
func (n *Node) HoldsVIP(vip netip.Addr) (bool, error) {
	ok, err := lab.HasAddr(n.nl, vip)
	if err != nil {
		return false, fmt.Errorf("%s: %w", n.Name, err)
	}
	return ok, nil
}

// Holders lists the nodes whose kernel holds vip.
func (c *Cluster) Holders(vip netip.Addr) ([]string, error) {
	var out []string
	for _, n := range c.Nodes {
		ok, err := n.HoldsVIP(vip)
		if err != nil {
			return nil, err
		}
		if ok {
			out = append(out, n.Name)
		}
	}
	return out, nil
}

// Connect opens a TCP connection from the client to vip:APIPort and returns
// the name of the node that answered.
func (c *Cluster) Connect(ctx context.Context, vip netip.Addr) (string, error) {
	conn, err := c.Client.DialContext(ctx, "tcp", net.JoinHostPort(vip.String(), strconv.Itoa(APIPort)))
	if err != nil {
		return "", err
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetReadDeadline(dl)
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return "", fmt.Errorf("read from %s: %w", vip, err)
	}
	return strings.TrimSpace(line), nil
}

// Node returns the node called name.
func (c *Cluster) Node(name string) *Node {
	for _, n := range c.Nodes {
		if n.Name == name {
			return n
		}
	}
	return nil
}

// Isolate moves the nodes' switch ports to a segment of their own (a
// partition: links stay up; the client stays with the others). Heal joins
// everything again.
func (c *Cluster) Isolate(nodes ...*Node) error {
	var ports []string
	for _, n := range nodes {
		ports = append(ports, n.Port)
	}
	return c.Switch.Partition(Bridge, ports)
}

// Heal undoes Isolate.
func (c *Cluster) Heal() error { return c.Switch.Heal(Bridge) }

// Cut pulls the node's cable (its switch port goes down); Restore plugs it in.
func (c *Cluster) Cut(n *Node) error { return c.Switch.CutLink(n.Port) }

// Restore plugs the node's cable back in.
func (c *Cluster) Restore(n *Node) error { return c.Switch.RestoreLink(n.Port) }
