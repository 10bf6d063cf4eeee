//go:build linux

package bgplab

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	agentv1 "github.com/caplb/caplb/api/agent/v1alpha1"
	"github.com/caplb/caplb/e2e/lab"
	"github.com/caplb/caplb/e2e/testpki"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// BGPClusterOptions shapes a routed cluster: the Routed lab plus, on every node, a stand-in
// API server and the real `caplb agent` in bgp mode.
type BGPClusterOptions struct {
	Routed RoutedOptions
	// AgentBinary and StandinBinary are built binaries of ./cmd/caplb-agent and ./e2e/lab/standin
	// (lab.BuildBinary).
	AgentBinary, StandinBinary string
	// VIPs default to 10.0.0.100 (and fd00:100::100 when Routed.IPv6).
	VIPs []netip.Addr
	// HoldTime is the nodes' proposed hold time. Default 3s.
	HoldTime time.Duration
	// HealthInterval and HealthFall set the agent's health check. Default 100ms and 2.
	HealthInterval time.Duration
	HealthFall     int
	// Drain is the agent's quiesce drain. Default 500ms.
	Drain time.Duration
	// Configure may change node i's agent configuration (1-based) before it is written.
	Configure func(i int, c *agentv1.AgentConfiguration)
	// BFD, when non-zero, runs BFD between the router and every node's agent (IPv4 sessions)
	// at this interval both ways, multiplier 3.
	BFD time.Duration
	// FlowSharing lists every node as a member (IPv4 address) with a gossip key, so that the
	// agents share their flows (bgp.flowSharing); off, the agents are told so. It needs
	// Routed.Segment.
	FlowSharing bool
	// EchoPort, when set, also runs the stand-in's long-lived echo service on this port.
	EchoPort int
}

// BGPCluster is a running routed cluster.
type BGPCluster struct {
	*Routed
	Members []*BGPMember
	VIPs    []netip.Addr
	Port    int
	opts    BGPClusterOptions
	pki     testpki.PKI
	// gossipKey is the agents' gossip key file (FlowSharing).
	gossipKey string
}

// BGPMember is one node's processes.
type BGPMember struct {
	*RoutedNode
	// ConfigPath is the agent's configuration file; FailFile fails /readyz while it exists.
	ConfigPath, FailFile string
	Agent, Standin       *lab.Process
	cluster              *BGPCluster
	agentRuns            int
}

// adminListen is the agent's admin endpoint inside each node namespace.
const adminListen = "127.0.0.1:7473"

// StartBGPCluster builds the lab, writes every node's configuration and starts the stand-in
// API servers and agents. It does not wait for routes.
func StartBGPCluster(l *lab.Lab, opts BGPClusterOptions) (*BGPCluster, error) {
	if opts.AgentBinary == "" || opts.StandinBinary == "" {
		return nil, fmt.Errorf("bgp cluster: AgentBinary and StandinBinary are required")
	}
	if len(opts.VIPs) == 0 {
		opts.VIPs = []netip.Addr{netip.MustParseAddr("10.0.0.100")}
		if opts.Routed.IPv6 {
			opts.VIPs = append(opts.VIPs, netip.MustParseAddr("fd00:100::100"))
		}
	}
	if opts.HoldTime == 0 {
		opts.HoldTime = 3 * time.Second
	}
	if opts.HealthInterval == 0 {
		opts.HealthInterval = 100 * time.Millisecond
	}
	if opts.HealthFall == 0 {
		opts.HealthFall = 2
	}
	if opts.Drain == 0 {
		opts.Drain = 500 * time.Millisecond
	}
	if opts.BFD > 0 && opts.Routed.BFD == nil {
		opts.Routed.BFD = &FRRBFD{Interval: opts.BFD, Multiplier: 3}
	}
	r, err := NewRouted(l, opts.Routed)
	if err != nil {
		return nil, err
	}
	hosts := []string{}
	for _, n := range r.Nodes {
		hosts = append(hosts, n.Name)
	}
	for _, v := range opts.VIPs {
		hosts = append(hosts, v.String())
	}
	pki, err := testpki.WriteTestPKI(l.Dir(), hosts...)
	if err != nil {
		return nil, err
	}
	c := &BGPCluster{Routed: r, VIPs: opts.VIPs, Port: 6443, opts: opts, pki: pki}
	if opts.FlowSharing {
		c.gossipKey = filepath.Join(l.Dir(), "gossip.key")
		if err := os.WriteFile(c.gossipKey, []byte("caplb-lab-gossip-key-32-bytes!!!"), 0o600); err != nil {
			return nil, err
		}
	}
	for _, n := range r.Nodes {
		m := &BGPMember{RoutedNode: n, cluster: c,
			ConfigPath: filepath.Join(l.Dir(), n.Name+"-agent.yaml"),
			FailFile:   filepath.Join(l.Dir(), n.Name+".readyz-fail")}
		if err := m.writeConfig(); err != nil {
			return nil, err
		}
		if err := m.StartStandin(); err != nil {
			return nil, err
		}
		if err := m.StartAgent(); err != nil {
			return nil, err
		}
		c.Members = append(c.Members, m)
	}
	return c, nil
}

// AgentConfig is the configuration written for the member.
func (m *BGPMember) AgentConfig() agentv1.AgentConfiguration {
	c := m.cluster
	d := func(v time.Duration) *metav1.Duration { return &metav1.Duration{Duration: v} }
	sharing := c.opts.FlowSharing
	bc := &agentv1.BGPConfig{ASN: c.Routed.opts.NodeASN, AddressLinger: d(time.Second), FlowSharing: &sharing}
	if bc.ASN == 0 {
		bc.ASN = 64512
	}
	peers := []netip.Addr{m.RouterIPv4}
	if c.Routed.opts.IPv6 {
		peers = append(peers, m.RouterIPv6)
	}
	routerASN := c.Routed.opts.RouterASN
	if routerASN == 0 {
		routerASN = 64500
	}
	for _, p := range peers {
		peer := agentv1.BGPPeer{Address: p.String(), ASN: routerASN, HoldTime: d(c.opts.HoldTime), ConnectRetry: d(time.Second)}
		if c.opts.BFD > 0 && p.Is4() {
			peer.BFD = &agentv1.BFDConfig{MinRx: d(c.opts.BFD), MinTx: d(c.opts.BFD), Multiplier: 3}
		}
		bc.Peers = append(bc.Peers, peer)
	}
	cfg := agentv1.AgentConfiguration{
		TypeMeta: agentv1.New().TypeMeta,
		NodeName: m.Name, Mode: agentv1.ModeBGP, Port: c.Port,
		Health: agentv1.HealthConfig{URL: "https://127.0.0.1:6444/readyz", CAFile: c.pki.CAFile,
			Interval: agentv1.Duration{Duration: c.opts.HealthInterval}, Timeout: agentv1.Duration{Duration: 500 * time.Millisecond},
			Rise: 2, Fall: c.opts.HealthFall},
		Quiesce: agentv1.QuiesceConfig{Drain: agentv1.Duration{Duration: c.opts.Drain}},
		Admin:   agentv1.AdminConfig{Listen: adminListen, ControlSocket: m.controlSocket()},
		BGP:     bc,
	}
	for _, v := range c.VIPs {
		cfg.VIPs = append(cfg.VIPs, v.String())
	}
	if c.opts.EchoPort != 0 {
		// The VIPs serve it: flow sharing holds only the served ports' unknown connections.
		cfg.ExtraPorts = []int{c.opts.EchoPort}
	}
	if sharing {
		for _, n := range c.Routed.Nodes {
			cfg.Members = append(cfg.Members, agentv1.MemberConfig{Name: n.Name, Address: n.IPv4.String()})
		}
		cfg.Election.SecretKeyFile = c.gossipKey
		// A withdrawn member serves its connections for drain + busyDrain + 1 s: long enough for
		// a test's quiesce and return.
		cfg.Quiesce.BusyDrain = agentv1.Duration{Duration: 10 * time.Second}
	}
	if c.opts.Configure != nil {
		c.opts.Configure(m.Index, &cfg)
	}
	return cfg
}

func (m *BGPMember) writeConfig() error {
	b, err := yaml.Marshal(m.AgentConfig())
	if err != nil {
		return fmt.Errorf("%s: agent config: %w", m.Name, err)
	}
	if err := os.WriteFile(m.ConfigPath, b, 0o600); err != nil {
		return fmt.Errorf("%s: agent config: %w", m.Name, err)
	}
	return nil
}

// StartStandin (re)starts the member's stand-in API server.
func (m *BGPMember) StartStandin() error {
	c := m.cluster
	args := []string{c.opts.StandinBinary,
		"-name", m.Name, "-service-listen", ":" + strconv.Itoa(c.Port), "-readyz-listen", "127.0.0.1:6444",
		"-cert", c.pki.CertFile, "-key", c.pki.KeyFile, "-fail-file", m.FailFile}
	if c.opts.EchoPort != 0 {
		args = append(args, "-echo-listen", ":"+strconv.Itoa(c.opts.EchoPort))
	}
	p, err := m.NS.Start(m.Name+"-standin", args, nil)
	if err != nil {
		return err
	}
	m.Standin = p
	return nil
}

// StopStandin kills the stand-in API server: the member's API port refuses connections.
func (m *BGPMember) StopStandin() error {
	if err := m.Standin.Signal(syscall.SIGKILL); err != nil {
		return err
	}
	select {
	case <-m.Standin.Done():
		return nil
	case <-time.After(5 * time.Second):
		return fmt.Errorf("%s: stand-in still running 5s after SIGKILL", m.Name)
	}
}

// StartAgent (re)starts the member's agent; its log is Dir()/<node>-agent.log.
func (m *BGPMember) StartAgent() error {
	if m.Agent != nil {
		if exited, _ := m.Agent.Exited(); !exited {
			return fmt.Errorf("%s: agent still running", m.Name)
		}
	}
	m.agentRuns++
	// With the capabilities the shipped DaemonSet and static pod grant, and nothing more.
	p, err := m.NS.Start(m.Name+"-agent", []string{"setpriv", "--bounding-set=-all,+net_admin,+net_raw", "--",
		m.cluster.opts.AgentBinary, "agent", "--config", m.ConfigPath, "-v", "1"}, nil)
	if err != nil {
		return err
	}
	m.Agent = p
	return nil
}

// KillAgent SIGKILLs the agent (no withdrawal; the kernel still closes its TCP sessions).
func (m *BGPMember) KillAgent() error {
	if err := m.Agent.Signal(syscall.SIGKILL); err != nil {
		return err
	}
	select {
	case <-m.Agent.Done():
		return nil
	case <-time.After(5 * time.Second):
		return fmt.Errorf("%s: agent still running 5s after SIGKILL", m.Name)
	}
}

// FailHealth makes the member's /readyz fail (true) or pass (false).
func (m *BGPMember) FailHealth(fail bool) error {
	if fail {
		return os.WriteFile(m.FailFile, nil, 0o600)
	}
	if err := os.Remove(m.FailFile); err != nil && !os.IsNotExist(err) {
		return err
	}
	return nil
}

// Quiesce asks the agent to quiesce (POST /quiesce) or to return (DELETE /quiesce).
func (m *BGPMember) Quiesce(ctx context.Context, on bool) error {
	method := http.MethodPost
	if !on {
		method = http.MethodDelete
	}
	_, err := m.admin(ctx, method, "/quiesce")
	return err
}

// Status is the agent's /status document, decoded loosely (the agent owns its schema).
func (m *BGPMember) Status(ctx context.Context) (map[string]any, error) {
	b, err := m.admin(ctx, http.MethodGet, "/status")
	if err != nil {
		return nil, err
	}
	var s map[string]any
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("%s: /status: %w", m.Name, err)
	}
	return s, nil
}

// Metrics is the agent's /metrics text.
func (m *BGPMember) Metrics(ctx context.Context) (string, error) {
	b, err := m.admin(ctx, http.MethodGet, "/metrics")
	return string(b), err
}

// Log is the agent's log so far (every run of it).
func (m *BGPMember) Log() string {
	b, _ := os.ReadFile(m.cluster.Lab.LogPath(m.Name + "-agent"))
	return string(b)
}

func (m *BGPMember) controlSocket() string {
	return filepath.Join(m.cluster.Lab.Dir(), m.Name+"-control.sock")
}

// admin: GET to the read-only listener, anything else to the control socket.
func (m *BGPMember) admin(ctx context.Context, method, path string) ([]byte, error) {
	client, base := m.NS.HTTPClient(2*time.Second), "http://"+adminListen
	if method != http.MethodGet {
		client, base = lab.UnixHTTPClient(m.controlSocket(), 2*time.Second), "http://agent"
	}
	req, err := http.NewRequestWithContext(ctx, method, base+path, nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s: %s %s: %w", m.Name, method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode >= 300 {
		return b, fmt.Errorf("%s: %s %s: %s: %s", m.Name, method, path, resp.Status, strings.TrimSpace(string(b)))
	}
	return b, nil
}

// Dial connects from the client namespace to the VIP v and returns the name of the node that
// answered.
func (c *BGPCluster) Dial(ctx context.Context, v netip.Addr) (string, error) {
	conn, err := c.Client.DialContext(ctx, "tcp", netip.AddrPortFrom(v, uint16(c.Port)).String())
	if err != nil {
		return "", err
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	b, err := io.ReadAll(io.LimitReader(conn, 64))
	if err != nil {
		return "", err
	}
	name := strings.TrimSpace(string(b))
	if name == "" {
		return "", fmt.Errorf("dial %s: empty answer", v)
	}
	return name, nil
}

// HostPrefix is the /32 or /128 of v.
func HostPrefix(v netip.Addr) netip.Prefix { return netip.PrefixFrom(v, v.BitLen()) }
