//go:build linux

package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/caplb/caplb/e2e/lab"
	"github.com/caplb/caplb/e2e/lab/arplab"
)

// daemon is the VIP daemon under test on every node of a lab: caplb's agent
// or the peer, keepalived.
type daemon interface {
	name() string
	// kill: SIGKILL, no cleanup; term: the graceful stop (SIGTERM).
	kill(n *arplab.Node) error
	term(n *arplab.Node) error
	// waitExit waits for the node's daemon to exit after kill or term.
	waitExit(n *arplab.Node, timeout time.Duration) error
	// restart starts the node's daemon again (after kill or term).
	restart(n *arplab.Node) error
	// setHealthy makes the node's API server healthy or not, as this
	// daemon learns it.
	setHealthy(n *arplab.Node, ok bool) error
	// stable: exactly one node holds the VIP and every daemon is ready for
	// the next fault; it returns the owner.
	stable() (*arplab.Node, error)
}

// caplbDaemon is the caplb agent as arplab.StartCluster runs it.
type caplbDaemon struct{ b *bench }

func (d caplbDaemon) name() string                             { return "caplb" }
func (d caplbDaemon) kill(n *arplab.Node) error                { return n.Agent.Signal(syscall.SIGKILL) }
func (d caplbDaemon) term(n *arplab.Node) error                { return n.Agent.Signal(syscall.SIGTERM) }
func (d caplbDaemon) restart(n *arplab.Node) error             { return d.b.c.StartAgent(n) }
func (d caplbDaemon) stable() (*arplab.Node, error)            { return d.b.checkStable() }
func (d caplbDaemon) setHealthy(n *arplab.Node, ok bool) error { return n.SetHealthy(ok) }
func (d caplbDaemon) waitExit(n *arplab.Node, timeout time.Duration) error {
	return n.Agent.Wait(timeout)
}

// spreadDaemon is caplb in spread mode (named apart in the output).
type spreadDaemon struct{ caplbDaemon }

func (spreadDaemon) name() string { return "caplb-spr" }

// keepalivedDaemon runs Debian's keepalived on every node, tuned as the
// brief's peer: VRRPv3, advert_int 0.1, nopreempt, every node BACKUP,
// priorities 100, 99, 98 in member order (distinct, as tuned deployments
// use: with equal priorities two backups time out together, both become
// master for a moment and the client can be left on the loser's MAC until
// keepalived's 5 s gratuitous-ARP repeat; seen in this lab). Health reaches it through a track_file (inotify: as fast
// as a health signal can be; caplb polls /readyz every 200 ms, fall 2).
type keepalivedDaemon struct {
	c       *arplab.Cluster
	bin     string
	procs   map[string]*lab.Process
	started map[string]time.Time
	// killed: the VRRP children of the last kill, reaped before a restart.
	killed []int
}

// keepalivedVersion is `keepalived --version`'s first line.
func keepalivedVersion(bin string) string {
	out, _ := exec.Command(bin, "--version").CombinedOutput()
	line, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	return strings.TrimSpace(line)
}

func findKeepalived() (string, error) {
	if p, err := exec.LookPath("keepalived"); err == nil {
		return p, nil
	}
	if _, err := os.Stat("/usr/sbin/keepalived"); err == nil {
		return "/usr/sbin/keepalived", nil
	}
	return "", fmt.Errorf("keepalived not installed (make keepalived)")
}

func newKeepalived(c *arplab.Cluster, bin string) (*keepalivedDaemon, error) {
	k := &keepalivedDaemon{c: c, bin: bin, procs: map[string]*lab.Process{}, started: map[string]time.Time{}}
	for i, n := range c.Nodes {
		if err := os.WriteFile(k.path(n, "conf"), []byte(k.config(n, 100-i)), 0o644); err != nil {
			return nil, err
		}
		if err := k.setHealthy(n, true); err != nil {
			return nil, err
		}
		if err := k.restart(n); err != nil {
			return nil, err
		}
	}
	return k, nil
}

func (k *keepalivedDaemon) path(n *arplab.Node, ext string) string {
	return filepath.Join(k.c.Lab.Dir(), n.Name+"-keepalived."+ext)
}

func (k *keepalivedDaemon) config(n *arplab.Node, priority int) string {
	return fmt.Sprintf(`global_defs {
	router_id %[1]s
	vrrp_version 3
}
track_file health {
	file %[2]s
}
vrrp_instance VIP {
	state BACKUP
	nopreempt
	interface eth0
	virtual_router_id 44
	priority %[4]d
	advert_int 0.1
	track_file {
		health weight 0
	}
	virtual_ipaddress {
		%[3]s/32 dev eth0
	}
}
`, n.Name, k.path(n, "health"), arplab.VIPv4, priority)
}

func (k *keepalivedDaemon) name() string { return "keepalived" }

// kill SIGKILLs the VRRP child first, then the parent (which would
// otherwise restart the child, or the child stop gracefully on its death).
func (k *keepalivedDaemon) kill(n *arplab.Node) error {
	p := k.procs[n.Name]
	k.killed = children(p.Pid())
	for _, child := range k.killed {
		_ = syscall.Kill(child, syscall.SIGKILL)
	}
	return p.Signal(syscall.SIGKILL)
}

func children(pid int) []int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	if err != nil {
		return nil
	}
	var out []int
	for _, f := range strings.Fields(string(b)) {
		if c, err := strconv.Atoi(f); err == nil {
			out = append(out, c)
		}
	}
	return out
}

func (k *keepalivedDaemon) term(n *arplab.Node) error { return k.procs[n.Name].Signal(syscall.SIGTERM) }

func (k *keepalivedDaemon) waitExit(n *arplab.Node, timeout time.Duration) error {
	err := k.procs[n.Name].Wait(timeout)
	if err != nil && isSignalled(err) {
		err = nil
	}
	// Its children (orphans now) go too; a live one would make the restart
	// think keepalived is still running.
	deadline := time.Now().Add(timeout)
	for _, c := range k.killed {
		for syscall.Kill(c, 0) == nil && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
	}
	k.killed = nil
	return err
}

// restart starts keepalived; a VIP left by a killed one is removed first,
// as caplb's agent does at start (a unit's ExecStartPre would).
func (k *keepalivedDaemon) restart(n *arplab.Node) error {
	_, _ = n.NS.Run(context.Background(), "ip", "addr", "del", arplab.VIPv4.String()+"/32", "dev", "eth0")
	// Stale pid files of a killed keepalived (pids may be reused).
	_ = os.Remove(k.path(n, "pid"))
	_ = os.Remove(k.path(n, "vrrp.pid"))
	p, err := n.NS.Start(n.Name+"-keepalived", []string{k.bin, "--dont-fork", "--log-console", "--log-detail",
		"--vrrp", "--use-file", k.path(n, "conf"), "--pid", k.path(n, "pid"), "--vrrp_pid", k.path(n, "vrrp.pid")}, nil)
	if err != nil {
		return err
	}
	k.procs[n.Name] = p
	k.started[n.Name] = time.Now()
	return nil
}

func (k *keepalivedDaemon) setHealthy(n *arplab.Node, ok bool) error {
	v := "1\n" // non-zero with weight 0: FAULT
	if ok {
		v = "0\n"
	}
	return os.WriteFile(k.path(n, "health"), []byte(v), 0o644)
}

// stable: one holder, every keepalived running and up for a while (a
// restarted one listens as BACKUP before the next fault).
func (k *keepalivedDaemon) stable() (*arplab.Node, error) {
	h, err := k.c.Holders(arplab.VIPv4)
	if err != nil {
		return nil, err
	}
	if len(h) != 1 {
		return nil, fmt.Errorf("holders %v", h)
	}
	for _, n := range k.c.Nodes {
		if exited, err := k.procs[n.Name].Exited(); exited {
			return nil, fmt.Errorf("%s: keepalived exited: %v", n.Name, err)
		}
		if time.Since(k.started[n.Name]) < 1500*time.Millisecond {
			return nil, fmt.Errorf("%s: keepalived started just now", n.Name)
		}
	}
	return k.c.Node(h[0]), nil
}
