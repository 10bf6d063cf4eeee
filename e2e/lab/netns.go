//go:build linux

// Package lab builds throw-away network labs out of Linux network namespaces,
// veth pairs and bridges, runs real processes inside them and injects faults
// (link cuts, partitions, tc netem). It needs root; tests call SkipUnlessRoot
// (or NewT) first so that they skip with a reason elsewhere.
//
// Every namespace a Lab creates is named "<lab name>-<namespace name>", so a
// second run with the same lab name first removes what a crashed earlier run
// left behind. Two labs that run at the same time (e.g. the test binaries of
// two packages under `go test ./...`) must use different names.
package lab

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// netnsDir is where `ip netns` keeps its bind mounts.
const netnsDir = "/var/run/netns"

// Lab owns a set of namespaces and processes and removes them on Close.
type Lab struct {
	name string
	dir  string

	mu      sync.Mutex
	nss     []*Netns
	procs   []*Process
	cgroups []string // made by Netns.OwnCPU, removed on Close
	closed  bool
}

// Netns is a named network namespace created by a Lab.
type Netns struct {
	lab    *Lab
	name   string // full name as `ip netns` knows it
	short  string // name given to AddNamespace
	handle netns.NsHandle
	cgroup string // OwnCPU's group, guarded by lab.mu
	// route is the shared NETLINK_ROUTE handle of WithRouteNetlink, opened on first use;
	// routeMu serialises its requests and guards it.
	routeMu sync.Mutex
	route   *netlink.Handle
}

// Lab is the lab the namespace belongs to (topology packages reach its directory and logs).
func (n *Netns) Lab() *Lab { return n.lab }

// SkipUnlessRoot skips t when the process cannot create network namespaces.
func SkipUnlessRoot(t testing.TB) {
	t.Helper()
	// Under CI these fail instead: a lab suite that skips everywhere would
	// pass while proving nothing.
	if os.Geteuid() != 0 {
		SkipOrFailInCI(t, "needs root: the network lab creates network namespaces, veth pairs and bridges")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		SkipOrFailInCI(t, "needs the ip command (iproute2) for the network lab")
	}
}

// New creates an empty lab. name is a short prefix for every namespace
// (letters, digits and '-', at most 12 characters); leftovers of an earlier
// run with the same name are removed first.
func New(name string) (*Lab, error) {
	if name == "" || len(name) > 12 || strings.ContainsAny(name, " /\t") {
		return nil, fmt.Errorf("lab name %q: want 1-12 characters without spaces or slashes", name)
	}
	l := &Lab{name: name}
	if err := l.removeLeftovers(); err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "caplb-lab-"+name+"-")
	if err != nil {
		return nil, fmt.Errorf("lab %s: temp dir: %w", name, err)
	}
	l.dir = dir
	return l, nil
}

// NewT is New for tests: it skips unless root, fails t on error, prints the
// tail of every process log when t failed, and closes the lab in t.Cleanup so
// that it runs even when the test fails.
func NewT(t testing.TB, name string) *Lab {
	t.Helper()
	SkipUnlessRoot(t)
	l, err := New(name)
	if err != nil {
		t.Fatalf("lab: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			l.DumpLogs(t, 60)
		}
		if err := l.Close(); err != nil {
			t.Errorf("lab close: %v", err)
		}
	})
	return l
}

// Name is the lab's prefix.
func (l *Lab) Name() string { return l.name }

// Dir is the lab's temporary directory for configs and process logs.
func (l *Lab) Dir() string { return l.dir }

// Logf appends a timestamped line to <Dir>/<name>.log, beside the processes' logs (a failure
// report shows their tails).
func (l *Lab) Logf(name, format string, args ...any) {
	f, err := os.OpenFile(filepath.Join(l.dir, name+".log"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return
	}
	defer f.Close()
	fmt.Fprintf(f, "%s %s\n", time.Now().UTC().Format(time.RFC3339Nano), fmt.Sprintf(format, args...))
}

// AddNamespace creates the namespace "<lab>-<name>" with lo up.
func (l *Lab) AddNamespace(name string) (*Netns, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil, errors.New("lab is closed")
	}
	full := l.name + "-" + name
	if out, err := exec.Command("ip", "netns", "add", full).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("ip netns add %s: %w: %s", full, err, strings.TrimSpace(string(out)))
	}
	h, err := netns.GetFromName(full)
	if err != nil {
		_ = exec.Command("ip", "netns", "del", full).Run()
		return nil, fmt.Errorf("open netns %s: %w", full, err)
	}
	n := &Netns{lab: l, name: full, short: name, handle: h}
	l.nss = append(l.nss, n)
	if _, err := n.Run(context.Background(), "ip", "link", "set", "lo", "up"); err != nil {
		return nil, err
	}
	return n, nil
}

// AddLink creates a veth pair a:aIf <-> b:bIf and sets both ends up.
func (l *Lab) AddLink(a *Netns, aIf string, b *Netns, bIf string) error {
	ctx := context.Background()
	if _, err := a.Run(ctx, "ip", "link", "add", aIf, "type", "veth", "peer", "name", bIf, "netns", b.name); err != nil {
		return err
	}
	if _, err := a.Run(ctx, "ip", "link", "set", aIf, "up"); err != nil {
		return err
	}
	_, err := b.Run(ctx, "ip", "link", "set", bIf, "up")
	return err
}

// AddBridge creates a bridge in ns enslaving ports and sets everything up.
// The bridge forwards at once (STP off, forward delay 0).
func (l *Lab) AddBridge(ns *Netns, name string, ports ...string) error {
	ctx := context.Background()
	if _, err := ns.Run(ctx, "ip", "link", "add", name, "type", "bridge", "stp_state", "0", "forward_delay", "0"); err != nil {
		return err
	}
	for _, p := range ports {
		if _, err := ns.Run(ctx, "ip", "link", "set", p, "master", name, "up"); err != nil {
			return err
		}
	}
	_, err := ns.Run(ctx, "ip", "link", "set", name, "up")
	return err
}

// Close kills every process the lab started and deletes its namespaces
// (which removes their links). It is idempotent.
func (l *Lab) Close() error {
	l.mu.Lock()
	procs := l.procs
	nss := l.nss
	cgroups := l.cgroups
	l.procs, l.nss, l.cgroups = nil, nil, nil
	l.closed = true
	l.mu.Unlock()

	var errs []error
	for _, p := range procs {
		p.kill()
	}
	for _, n := range nss {
		killNamespacePids(n.name)
		n.closeHandles()
		if out, err := exec.Command("ip", "netns", "del", n.name).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("ip netns del %s: %w: %s", n.name, err, strings.TrimSpace(string(out))))
		}
	}
	if err := removeCPUGroups(cgroups); err != nil {
		errs = append(errs, err)
	}
	if l.dir != "" && os.Getenv("CAPLB_LAB_KEEP") == "" {
		_ = os.RemoveAll(l.dir)
	}
	return errors.Join(errs...)
}

// removeLeftovers deletes namespaces named "<lab>-*" that an earlier run left.
func (l *Lab) removeLeftovers() error {
	entries, err := os.ReadDir(netnsDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("list %s: %w", netnsDir, err)
	}
	var errs []error
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), l.name+"-") {
			continue
		}
		killNamespacePids(e.Name())
		if out, err := exec.Command("ip", "netns", "del", e.Name()).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("remove leftover netns %s: %w: %s", e.Name(), err, out))
		}
	}
	return errors.Join(errs...)
}

// killNamespacePids SIGKILLs every process still running in the namespace,
// except this one: `ip netns pids` goes by each process's main thread, and a
// goroutine in Do (or a poller's) may be running on this process's main
// thread, switched into the namespace, at that very moment. Killing it was
// the test binary SIGKILLing itself ("signal: killed", seen in the kubeadm
// lab when a machine was removed while a probe of it ran).
func killNamespacePids(name string) {
	out, err := exec.Command("ip", "netns", "pids", name).Output()
	if err != nil {
		return
	}
	self := strconv.Itoa(os.Getpid())
	for _, f := range strings.Fields(string(out)) {
		if f == self {
			continue
		}
		_ = exec.Command("kill", "-9", f).Run()
	}
}

// Name is the namespace's full name, as `ip netns exec` wants it.
func (n *Netns) Name() string { return n.name }

// Handle is an open handle on the namespace, valid until the lab closes.
func (n *Netns) Handle() netns.NsHandle { return n.handle }

// Netlink returns a netlink handle bound to the namespace (no thread
// switching needed); the caller closes it.
func (n *Netns) Netlink() (*netlink.Handle, error) {
	h, err := netlink.NewHandleAt(n.handle)
	if err != nil {
		return nil, fmt.Errorf("netlink handle in %s: %w", n.name, err)
	}
	return h, nil
}

// WithRouteNetlink runs fn with the namespace's one shared NETLINK_ROUTE handle, opened on first
// use and closed with the namespace, one caller at a time. For samplers that read addresses or
// routes every few milliseconds: Netlink opens a socket per netlink family, each by switching the
// thread into the namespace and back, which for a 10 ms holder sampler over six machines was
// thousands of namespace switches a second on the cores the lab measures.
func (n *Netns) WithRouteNetlink(fn func(*netlink.Handle) error) error {
	n.routeMu.Lock()
	defer n.routeMu.Unlock()
	if n.route == nil {
		h, err := netlink.NewHandleAt(n.handle, unix.NETLINK_ROUTE)
		if err != nil {
			return fmt.Errorf("netlink handle in %s: %w", n.name, err)
		}
		n.route = h
	}
	return fn(n.route)
}

// closeHandles closes the namespace's handles (its own and WithRouteNetlink's).
func (n *Netns) closeHandles() {
	n.routeMu.Lock()
	if n.route != nil {
		n.route.Close()
		n.route = nil
	}
	n.routeMu.Unlock()
	_ = n.handle.Close()
}

// Run runs argv in the namespace and returns its combined output; the error
// includes the output.
func (n *Netns) Run(ctx context.Context, argv ...string) (string, error) {
	args := append([]string{"netns", "exec", n.name}, argv...)
	out, err := exec.CommandContext(ctx, "ip", args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("in %s: %s: %w: %s", n.name, strings.Join(argv, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// Do runs fn on a locked OS thread switched into the namespace. Sockets
// created inside fn stay in the namespace after Do returns.
func (n *Netns) Do(fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("get current netns: %w", err)
			return
		}
		defer orig.Close()
		if err := netns.Set(n.handle); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("enter netns %s: %w", n.name, err)
			return
		}
		ferr := fn()
		if err := netns.Set(orig); err != nil {
			// Leave the thread locked: the runtime then discards it rather
			// than reusing a thread stuck in the wrong namespace.
			errc <- errors.Join(ferr, fmt.Errorf("return from netns %s: %w", n.name, err))
			return
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}

// LogPath is where Start writes the output of the process called name.
func (l *Lab) LogPath(name string) string { return filepath.Join(l.dir, name+".log") }

// RemoveNamespace kills what still runs in n and deletes it (its links go with it): a machine
// leaving the lab for good.
func (l *Lab) RemoveNamespace(n *Netns) error {
	l.mu.Lock()
	for i, x := range l.nss {
		if x == n {
			l.nss = append(l.nss[:i], l.nss[i+1:]...)
			break
		}
	}
	l.mu.Unlock()
	killNamespacePids(n.name)
	n.closeHandles()
	if out, err := exec.Command("ip", "netns", "del", n.name).CombinedOutput(); err != nil {
		return fmt.Errorf("ip netns del %s: %w: %s", n.name, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// SkipOrFailInCI skips t with the reason, except under CI (the CI environment variable set),
// where `make test` installs every prerequisite and a missing one must fail the run.
func SkipOrFailInCI(t testing.TB, format string, args ...any) {
	t.Helper()
	if os.Getenv("CI") != "" {
		t.Fatalf("CI: "+format, args...)
	}
	t.Skipf(format, args...)
}
