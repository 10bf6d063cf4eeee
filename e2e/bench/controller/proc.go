package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// managerProc is the real `caplb manager` binary running as a child process, so that its
// memory and CPU are its own and can be read from /proc.
type managerProc struct {
	cmd         *exec.Cmd
	metricsAddr string
	done        chan error
}

// freeAddr returns a loopback address with a port that was free a moment ago.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

func startManager(bin, kubeconfig string, extra []string, log io.Writer) (*managerProc, error) {
	if _, err := os.Stat(bin); err != nil {
		return nil, fmt.Errorf("caplb binary %s: %w (build it with `make build`)", bin, err)
	}
	metrics, err := freeAddr()
	if err != nil {
		return nil, err
	}
	args := append([]string{"manager",
		"--kubeconfig", kubeconfig,
		// Plain HTTP, unauthenticated: the bench scrapes its own loopback manager.
		"--diagnostics-address", metrics, "--insecure-diagnostics",
		"--health-probe-bind-address", "0",
		// The bench measures the controller; it registers no webhook and has no certificate.
		"--webhook-port=0",
	}, extra...)
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", bin, err)
	}
	p := &managerProc{cmd: cmd, metricsAddr: metrics, done: make(chan error, 1)}
	go func() { p.done <- cmd.Wait() }()
	return p, nil
}

// exited reports the process's exit, if it has exited.
func (p *managerProc) exited() (bool, error) {
	select {
	case err := <-p.done:
		p.done <- err
		return true, err
	default:
		return false, nil
	}
}

// stop sends SIGTERM (the manager shuts down gracefully) and waits, then kills.
func (p *managerProc) stop() error {
	if done, err := p.exited(); done {
		return fmt.Errorf("manager had already exited: %v", err)
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-p.done:
		return err
	case <-time.After(45 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
		return errors.New("manager did not stop within 45s of SIGTERM; killed")
	}
}

// memory reads the peak (VmHWM) and current (VmRSS) resident set size, in MiB.
func (p *managerProc) memory() (peak, current float64, err error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		return 0, 0, fmt.Errorf("reading manager memory: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 2 {
			continue
		}
		kib, perr := strconv.ParseFloat(fields[1], 64)
		if perr != nil {
			continue
		}
		switch fields[0] {
		case "VmHWM:":
			peak = kib / 1024
		case "VmRSS:":
			current = kib / 1024
		}
	}
	return peak, current, sc.Err()
}

// cpuSeconds reads the user+system CPU time the manager has used (clock ticks are 100 Hz on
// Linux).
func (p *managerProc) cpuSeconds() (float64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.cmd.Process.Pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces; fields after the closing paren are fixed.
	s := string(data)
	rest := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(rest) < 13 {
		return 0, fmt.Errorf("unexpected /proc stat format")
	}
	utime, _ := strconv.ParseFloat(rest[11], 64)
	stime, _ := strconv.ParseFloat(rest[12], 64)
	return (utime + stime) / 100, nil
}

// scrape fetches the manager's Prometheus metrics and returns every series of the named
// metrics, keyed by the series as exposed (name{labels}), plus for each name its sum over all
// label sets (keyed by the bare name).
func (p *managerProc) scrape(ctx context.Context, names ...string) (map[string]float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.metricsAddr+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scraping manager metrics: %w", err)
	}
	defer resp.Body.Close()
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		name := line
		if i := strings.IndexAny(line, "{ "); i >= 0 {
			name = line[:i]
		}
		if !want[name] {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		out[name] += v
		if series := line[:i]; series != name {
			out[series] = v
		}
	}
	return out, sc.Err()
}

// childCPUSeconds returns the CPU time used so far by this process's children with the given
// command name (the envtest kube-apiserver and etcd), read from /proc.
func childCPUSeconds(comm string) float64 {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	self := os.Getpid()
	total := 0.0
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		s := string(data)
		open, closing := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if open < 0 || closing < open || s[open+1:closing] != comm {
			continue
		}
		rest := strings.Fields(s[closing+1:])
		if len(rest) < 13 {
			continue
		}
		if ppid, _ := strconv.Atoi(rest[1]); ppid != self {
			continue
		}
		utime, _ := strconv.ParseFloat(rest[11], 64)
		stime, _ := strconv.ParseFloat(rest[12], 64)
		total += (utime + stime) / 100
	}
	return total
}
