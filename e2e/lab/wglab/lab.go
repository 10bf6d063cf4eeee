//go:build linux

// Package wglab is the WireGuard network lab: two gateways on a public segment, three members
// behind an nftables NAT router, a client on the public side (see Start). Linux and root.
package wglab

import (
	"cmp"
	"context"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	wgapi "github.com/caplb/caplb/api/wireguard/v1alpha1"

	"github.com/caplb/caplb/e2e/lab"
	"github.com/caplb/caplb/e2e/testpki"
	"github.com/caplb/caplb/modes/wireguard"
)

// Topology (every box a network namespace "<lab>-<name>"):
//
//	client 10.60.0.2 ─┐                      public segment 10.60.0.0/24 (bridge pub0 in sw)
//	gw1 10.60.0.11  ──┼── pub0 ──┬── wan 10.60.0.1  nat  (nftables masquerade out of wan)
//	gw2 10.60.0.12  ──┘          │   lan 10.61.0.1
//	                        prv0 ┴── m1 10.61.0.11, m2 .12, m3 .13  (default route via nat)
//
// Members reach the gateways only through the NAT; the gateways cannot reach the members except
// through the mappings the members' WireGuard keepalives hold open.
const (
	PublicNet  = "10.60.0."
	PrivateNet = "10.61.0."
	APIPort    = 6443
	WGPort     = 51820
	RegPort    = 51821
	GWAdmin    = "127.0.0.1:7475"
	MemAdmin   = "127.0.0.1:7476"
)

// Binaries are the programs the lab runs.
type Binaries struct{ Agent, Standin string }

// BuildBinaries builds caplb-agent (it carries `gateway` and `wireguard`) and the stand-in into
// a fresh directory; cleanup removes it.
func BuildBinaries() (Binaries, func(), error) {
	dir, err := os.MkdirTemp("", "caplb-wglab-bin-")
	if err != nil {
		return Binaries{}, func() {}, err
	}
	cleanup := func() { os.RemoveAll(dir) }
	b := Binaries{Agent: filepath.Join(dir, "caplb-agent"), Standin: filepath.Join(dir, "standin")}
	for pkg, out := range map[string]string{"./cmd/caplb-agent": b.Agent, "./e2e/lab/standin": b.Standin} {
		if err := lab.BuildBinary(pkg, out); err != nil {
			cleanup()
			return Binaries{}, func() {}, err
		}
	}
	return b, cleanup, nil
}

// Options tune the lab.
type Options struct {
	Members int // default 3
	// GatewayExtra / MemberExtra are appended to the generated YAML configs (overrides).
	GatewayExtra, MemberExtra string
	// Device "tun" puts every gateway's and member's tunnel on a TUN interface; the members'
	// API servers then listen on all addresses, as kubeadm's do. Default netstack.
	Device string
}

// Lab is the running WireGuard lab.
type Lab struct {
	L        *lab.Lab
	Bins     Binaries
	CA       *testpki.CA
	Client   *lab.Netns
	NAT      *lab.Netns
	Gateways []*Gateway
	Members  []*Member
	roots    *x509.CertPool
}

// Gateway is one gateway host.
type Gateway struct {
	Name string
	Addr netip.Addr
	NS   *lab.Netns
	Proc *lab.Process
	cfg  string
}

// Member is one control-plane node behind the NAT.
type Member struct {
	Name     string
	Addr     netip.Addr
	NS       *lab.Netns
	Standin  *lab.Process
	Agent    *lab.Process
	cfg      string
	FailFile string
}

// Start builds the topology and starts both gateways and every member; it waits until every
// member is healthy on both gateways.
func Start(l *lab.Lab, bins Binaries, o Options) (*Lab, error) {
	if o.Members == 0 {
		o.Members = 3
	}
	w := &Lab{L: l, Bins: bins}
	ca, err := testpki.NewCA(l.Dir())
	if err != nil {
		return nil, err
	}
	w.CA = ca
	pem, _ := os.ReadFile(ca.CertFile)
	w.roots = x509.NewCertPool()
	w.roots.AppendCertsFromPEM(pem)
	token := filepath.Join(l.Dir(), "join-token")
	if err := os.WriteFile(token, []byte("wglab-join-token-6d1b2c3a4f5e6d7c\n"), 0o600); err != nil {
		return nil, err
	}
	if err := w.network(o.Members); err != nil {
		return nil, err
	}
	for _, g := range w.Gateways {
		dir := filepath.Join(l.Dir(), g.Name)
		g.cfg = filepath.Join(dir, "gateway.yaml")
		y := fmt.Sprintf(`name: %s
listen: "%s:%d"
wireguard:
  listenPort: %d
  privateKeyFile: %s/gateway.key
  device: %s
registration:
  listen: "%s:%d"
  tokenFile: %s
stateFile: %s/state.json
health:
  caFile: %s
admin:
  listen: "%s"
`, g.Name, g.Addr, APIPort, WGPort, dir, cmp.Or(o.Device, "netstack"), g.Addr, RegPort, token, dir, ca.CertFile, GWAdmin) + o.GatewayExtra
		if err := writeFile(g.cfg, y); err != nil {
			return nil, err
		}
		if err := w.StartGateway(g); err != nil {
			return nil, err
		}
	}
	for _, m := range w.Members {
		dir := filepath.Join(l.Dir(), m.Name)
		m.cfg = filepath.Join(dir, "wireguard.yaml")
		m.FailFile = filepath.Join(dir, "fail")
		var gws strings.Builder
		for _, g := range w.Gateways {
			fmt.Fprintf(&gws, "  - endpoint: \"%s:%d\"\n", g.Addr, WGPort)
		}
		y := fmt.Sprintf(`nodeName: %s
privateKeyFile: %s/member.key
tokenFile: %s
gateways:
%sdrainTimeout: 5s
device: %s
admin:
  listen: "%s"
`, m.Name, dir, token, gws.String(), cmp.Or(o.Device, "netstack"), MemAdmin) + o.MemberExtra
		if err := writeFile(m.cfg, y); err != nil {
			return nil, err
		}
		cert, key, err := ca.IssueServing(dir, m.Name, m.Name, m.Addr.String())
		if err != nil {
			return nil, err
		}
		listen := fmt.Sprintf("127.0.0.1:%d", APIPort)
		if o.Device == "tun" {
			listen = fmt.Sprintf(":%d", APIPort) // all addresses: the tunnel's connections come straight in
		}
		m.Standin, err = m.NS.Start(m.Name+"-apiserver", []string{bins.Standin, "-name", m.Name, "-api-listen",
			listen, "-cert", cert, "-key", key, "-fail-file", m.FailFile}, nil)
		if err != nil {
			return nil, err
		}
		if err := w.StartMember(m); err != nil {
			return nil, err
		}
	}
	if err := w.WaitHealthy(30*time.Second, w.memberNames()...); err != nil {
		return nil, err
	}
	return w, nil
}

func (w *Lab) memberNames() []string {
	var out []string
	for _, m := range w.Members {
		out = append(out, m.Name)
	}
	return out
}

func (w *Lab) network(members int) error {
	l := w.L
	ctx := context.Background()
	sw, err := l.AddNamespace("sw")
	if err != nil {
		return err
	}
	nat, err := l.AddNamespace("nat")
	if err != nil {
		return err
	}
	w.NAT = nat
	pubPorts := []string{"natw"}
	prvPorts := []string{"natl"}
	if err := l.AddLink(nat, "wan", sw, "natw"); err != nil {
		return err
	}
	if err := l.AddLink(nat, "lan", sw, "natl"); err != nil {
		return err
	}
	if err := nat.AddAddr("wan", netip.MustParsePrefix(PublicNet+"1/24")); err != nil {
		return err
	}
	if err := nat.AddAddr("lan", netip.MustParsePrefix(PrivateNet+"1/24")); err != nil {
		return err
	}
	if _, err := nat.Run(ctx, "sysctl", "-qw", "net.ipv4.ip_forward=1"); err != nil {
		return err
	}
	rules := filepath.Join(l.Dir(), "nat.nft")
	if err := writeFile(rules, "table ip caplbnat {\n chain post {\n  type nat hook postrouting priority 100; policy accept;\n  oifname \"wan\" masquerade\n }\n}\n"); err != nil {
		return err
	}
	if _, err := nat.Run(ctx, nftBinary(), "-f", rules); err != nil {
		return err
	}
	attach := func(name, addr string, gw string) (*lab.Netns, error) {
		ns, err := l.AddNamespace(name)
		if err != nil {
			return nil, err
		}
		if err := l.AddLink(ns, "eth0", sw, name); err != nil {
			return nil, err
		}
		if err := ns.AddAddr("eth0", netip.MustParsePrefix(addr+"/24")); err != nil {
			return nil, err
		}
		if gw != "" {
			if _, err := ns.Run(ctx, "ip", "route", "add", "default", "via", gw); err != nil {
				return nil, err
			}
		}
		return ns, nil
	}
	if w.Client, err = attach("client", PublicNet+"2", ""); err != nil {
		return err
	}
	pubPorts = append(pubPorts, "client")
	for i := 1; i <= 2; i++ {
		name := fmt.Sprintf("gw%d", i)
		addr := fmt.Sprintf("%s%d", PublicNet, 10+i)
		ns, err := attach(name, addr, "")
		if err != nil {
			return err
		}
		pubPorts = append(pubPorts, name)
		w.Gateways = append(w.Gateways, &Gateway{Name: name, Addr: netip.MustParseAddr(addr), NS: ns})
	}
	for i := 1; i <= members; i++ {
		name := fmt.Sprintf("m%d", i)
		addr := fmt.Sprintf("%s%d", PrivateNet, 10+i)
		ns, err := attach(name, addr, PrivateNet+"1")
		if err != nil {
			return err
		}
		prvPorts = append(prvPorts, name)
		w.Members = append(w.Members, &Member{Name: name, Addr: netip.MustParseAddr(addr), NS: ns})
	}
	if err := l.AddBridge(sw, "pub0", pubPorts...); err != nil {
		return err
	}
	return l.AddBridge(sw, "prv0", prvPorts...)
}

func nftBinary() string {
	if p, err := exec.LookPath("nft"); err == nil {
		return p
	}
	return "/usr/sbin/nft"
}

func writeFile(path, s string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(s), 0o600)
}

// StartGateway (re)starts a gateway process and waits for its admin endpoint.
func (w *Lab) StartGateway(g *Gateway) error {
	p, err := g.NS.Start(g.Name, []string{w.Bins.Agent, "gateway", "--config", g.cfg}, nil)
	if err != nil {
		return err
	}
	g.Proc = p
	return poll(10*time.Second, func() error { _, err := w.GatewayStatus(g); return err })
}

// StartMember (re)starts a member's agent.
func (w *Lab) StartMember(m *Member) error {
	p, err := m.NS.Start(m.Name+"-wireguard", []string{w.Bins.Agent, "wireguard", "--config", m.cfg}, nil)
	if err != nil {
		return err
	}
	m.Agent = p
	return nil
}

// KillGateway SIGKILLs a gateway's process.
func (w *Lab) KillGateway(g *Gateway) error {
	if err := g.Proc.Signal(syscall.SIGKILL); err != nil {
		return err
	}
	select {
	case <-g.Proc.Done():
		return nil
	case <-time.After(5 * time.Second):
		return fmt.Errorf("%s still running 5s after SIGKILL", g.Proc.Name())
	}
}

// KillMember SIGKILLs a member's agent (its tunnel dies; the stand-in API server keeps running).
func (w *Lab) KillMember(m *Member) error {
	if err := m.Agent.Signal(syscall.SIGKILL); err != nil {
		return err
	}
	select {
	case <-m.Agent.Done():
		return nil
	case <-time.After(5 * time.Second):
		return fmt.Errorf("%s still running 5s after SIGKILL", m.Agent.Name())
	}
}

// FlushNAT deletes every connection-tracking entry on the NAT router: the members' UDP mappings
// are gone until their next packet creates new ones (possibly on other ports).
func (w *Lab) FlushNAT(ctx context.Context) error {
	_, err := w.NAT.Run(ctx, "conntrack", "-F")
	return err
}

// GatewayStatus reads a gateway's /status.
func (w *Lab) GatewayStatus(g *Gateway) (wgapi.Status, error) {
	var st wgapi.Status
	err := adminJSON(g.NS, http.MethodGet, "http://"+GWAdmin+"/status", &st)
	return st, err
}

// GatewayMetrics reads a gateway's /metrics: the Prometheus text the real binary serves.
func (w *Lab) GatewayMetrics(g *Gateway) (string, error) {
	resp, err := g.NS.HTTPClient(40 * time.Second).Get("http://" + GWAdmin + "/metrics")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET /metrics on %s: %s: %s", g.Name, resp.Status, strings.TrimSpace(string(b)))
	}
	return string(b), nil
}

// Quiesce sets or clears a node's quiesce on every gateway (what the controller would do).
func (w *Lab) Quiesce(node string, on bool) error {
	method := http.MethodPost
	if !on {
		method = http.MethodDelete
	}
	for _, g := range w.Gateways {
		if err := adminJSON(g.NS, method, "http://"+GWAdmin+"/v1/nodes/"+node+"/quiesce", nil); err != nil {
			return fmt.Errorf("%s: %w", g.Name, err)
		}
	}
	return nil
}

// Rotate asks a member to rotate its key (make-before-break); it returns when the new key serves.
func (w *Lab) Rotate(m *Member) error {
	var out map[string]string
	return adminJSON(m.NS, http.MethodPost, "http://"+MemAdmin+"/rotate", &out)
}

// MemberStatus reads a member's /status.
func (w *Lab) MemberStatus(m *Member) (wireguard.MemberState, error) {
	var st wireguard.MemberState
	err := adminJSON(m.NS, http.MethodGet, "http://"+MemAdmin+"/status", &st)
	return st, err
}

func adminJSON(ns *lab.Netns, method, url string, out any) error {
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		return err
	}
	resp, err := ns.HTTPClient(40 * time.Second).Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s %s: %s: %s", method, url, resp.Status, strings.TrimSpace(string(b)))
	}
	if out != nil {
		return json.Unmarshal(b, out)
	}
	return nil
}

// HealthyOn lists the active, healthy members of gateway g by node.
func (w *Lab) HealthyOn(g *Gateway) (map[string]bool, error) {
	st, err := w.GatewayStatus(g)
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, m := range st.Members {
		if m.Healthy && m.State == "active" {
			out[m.Node] = true
		}
	}
	return out, nil
}

// WaitHealthy waits until every named node is healthy and active on every running gateway.
func (w *Lab) WaitHealthy(timeout time.Duration, nodes ...string) error {
	return poll(timeout, func() error {
		for _, g := range w.Gateways {
			if done, _ := g.Proc.Exited(); done {
				continue
			}
			h, err := w.HealthyOn(g)
			if err != nil {
				return err
			}
			for _, n := range nodes {
				if !h[n] {
					return fmt.Errorf("%s not healthy on %s", n, g.Name)
				}
			}
		}
		return nil
	})
}

func poll(timeout time.Duration, f func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := f()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("after %v: %w", timeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
