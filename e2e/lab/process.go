//go:build linux

package lab

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Process is a long-running command started in a namespace by Netns.Start.
type Process struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
	err  error // valid after done is closed
	log  *os.File
}

// Start runs argv in the namespace as a long-running process whose stdout and
// stderr are appended to Dir()/<name>.log (so a restarted process keeps one
// log). env is added to the test's environment. The lab kills it on Close.
func (n *Netns) Start(name string, argv []string, env []string) (*Process, error) {
	if len(argv) == 0 {
		return nil, errors.New("start: empty argv")
	}
	l := n.lab
	f, err := os.OpenFile(l.LogPath(name), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("start %s: log: %w", name, err)
	}
	fmt.Fprintf(f, "=== %s start in %s: %s\n", time.Now().Format(time.RFC3339Nano), n.name, strings.Join(argv, " "))
	// `ip netns exec` execs argv after setns, so the pid is argv's own and
	// signals reach it directly.
	cmd := exec.Command("ip", append([]string{"netns", "exec", n.name}, argv...)...)
	if wrapped := n.inCPUGroup(cmd.Args); len(wrapped) != len(cmd.Args) {
		cmd = exec.Command(wrapped[0], wrapped[1:]...)
	}
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = f, f
	// Die with the test process even when it is killed before Close runs.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s in %s: %w", name, n.name, err)
	}
	p := &Process{name: name, cmd: cmd, done: make(chan struct{}), log: f}
	go func() {
		p.err = cmd.Wait()
		fmt.Fprintf(f, "=== %s exit: %v\n", time.Now().Format(time.RFC3339Nano), p.err)
		f.Close()
		close(p.done)
	}()
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		p.kill()
		return nil, errors.New("lab is closed")
	}
	l.procs = append(l.procs, p)
	l.mu.Unlock()
	return p, nil
}

// Name is the name given to Start.
func (p *Process) Name() string { return p.name }

// Pid is the process id (in the root pid namespace).
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Signal sends sig to the process.
func (p *Process) Signal(sig syscall.Signal) error {
	if err := p.cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("signal %v to %s: %w", sig, p.name, err)
	}
	return nil
}

// Done is closed when the process has exited.
func (p *Process) Done() <-chan struct{} { return p.done }

// Exited reports whether the process has exited, and its wait error.
func (p *Process) Exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.err
	default:
		return false, nil
	}
}

// Wait waits up to timeout for the process to exit and returns its wait error.
func (p *Process) Wait(timeout time.Duration) error {
	select {
	case <-p.done:
		return p.err
	case <-time.After(timeout):
		return fmt.Errorf("%s still running after %v", p.name, timeout)
	}
}

// Stop sends SIGTERM and, after grace, SIGKILL; it returns the wait error.
func (p *Process) Stop(grace time.Duration) error {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return p.err
	case <-time.After(grace):
		p.kill()
		return fmt.Errorf("%s ignored SIGTERM for %v, killed", p.name, grace)
	}
}

// VmHWM is the process's peak resident set size in bytes (from /proc).
func (p *Process) VmHWM() (int64, error) {
	return procStatusKB(p.Pid(), "VmHWM:")
}

// RssAnon is the process's current anonymous resident memory in bytes (heap,
// stacks: what it allocated, as opposed to pages of its binary).
func (p *Process) RssAnon() (int64, error) {
	return procStatusKB(p.Pid(), "RssAnon:")
}

func (p *Process) kill() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Kill()
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
	}
}

func procStatusKB(pid int, key string) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), key) {
			var kb int64
			if _, err := fmt.Sscanf(strings.TrimSpace(strings.TrimPrefix(sc.Text(), key)), "%d kB", &kb); err != nil {
				return 0, fmt.Errorf("parse %q: %w", sc.Text(), err)
			}
			return kb * 1024, nil
		}
	}
	return 0, fmt.Errorf("pid %d: no %s in /proc status", pid, key)
}

// DumpLogs logs the last lines of every process log of the lab to t.
func (l *Lab) DumpLogs(t testing.TB, lines int) {
	t.Helper()
	for _, lg := range l.logTails(lines) {
		t.Logf("----- %s (last %d lines) -----\n%s", lg.name, len(lg.lines), strings.Join(lg.lines, "\n"))
	}
}

// LogTail is the last lines of every process log of the lab, for a failure report outside a
// test.
func (l *Lab) LogTail(lines int) string {
	var b strings.Builder
	for _, lg := range l.logTails(lines) {
		fmt.Fprintf(&b, "==> %s <==\n%s\n", lg.name, strings.Join(lg.lines, "\n"))
	}
	return b.String()
}

type logTail struct {
	name  string
	lines []string
}

func (l *Lab) logTails(lines int) []logTail {
	entries, err := os.ReadDir(l.dir)
	if err != nil {
		return nil
	}
	var out []logTail
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".log") {
			continue
		}
		b, err := os.ReadFile(l.dir + "/" + e.Name())
		if err != nil {
			continue
		}
		all := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
		if len(all) > lines {
			all = all[len(all)-lines:]
		}
		out = append(out, logTail{name: e.Name(), lines: all})
	}
	return out
}
