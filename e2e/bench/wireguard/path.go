//go:build linux

package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/caplb/caplb/e2e/wireguard/wglab"
)

// measurePath compares the gateway path with a direct one: the same stand-in API server run on
// the gateway host itself (port 7443), so the difference is what the gateway, the tunnel and the
// NAT hop add.
func measurePath(w *wglab.Lab, res *Result) error {
	gw := w.Gateways[0]
	dir := filepath.Join(w.L.Dir(), "direct")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	cert, key, err := w.CA.APIServerCert(dir, "direct", gw.Addr.AsSlice())
	if err != nil {
		return err
	}
	direct := net.JoinHostPort(gw.Addr.String(), "7443")
	if _, err := gw.NS.Start("direct-apiserver", []string{w.Bins.Standin, "-name", "direct", "-listen", direct,
		"-cert", cert, "-key", key}, nil); err != nil {
		return err
	}
	probe := w.HTTPSClient(direct, false, time.Second)
	for deadline := time.Now().Add(10 * time.Second); get(probe, "https://api/name") != nil; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			return fmt.Errorf("direct stand-in on %s did not answer", direct)
		}
	}
	via := net.JoinHostPort(gw.Addr.String(), fmt.Sprint(wglab.APIPort))
	for _, ka := range []bool{false, true} {
		d, g, err := latency(w.HTTPSClient(direct, ka, 5*time.Second), w.HTTPSClient(via, ka, 5*time.Second), 400)
		if err != nil {
			return err
		}
		if ka {
			res.ProxyAddedLatencyUsP50KeepAlive = g - d
		} else {
			res.DirectLatencyUsP50, res.GatewayLatencyUsP50, res.ProxyAddedLatencyUsP50 = d, g, g-d
		}
	}
	// Memory after steady API-like traffic (the latency runs), then the peak after bulk transfers.
	if _, res.GatewayRSSMiB, err = rss(gw.Proc.Pid()); err != nil {
		return err
	}
	if res.DirectThroughputMiBs, err = throughput(w.HTTPSClient(direct, false, time.Minute)); err != nil {
		return err
	}
	if res.ThroughputMiBs, err = throughput(w.HTTPSClient(via, false, time.Minute)); err != nil {
		return err
	}
	if res.GatewayPeakRSSMiB, res.GatewayRSSAfterBulkMiB, err = rss(gw.Proc.Pid()); err != nil {
		return err
	}
	for _, m := range w.Members {
		peak, _, err := rss(m.Agent.Pid())
		if err != nil {
			return err
		}
		res.MemberPeakRSSMiB = max(res.MemberPeakRSSMiB, peak)
	}
	fmt.Fprintf(os.Stderr, "latency p50: direct %.0f us, via gateway %.0f us (+%.0f us; keep-alive +%.0f us); throughput %.1f MiB/s (direct %.1f); gateway RSS %.1f MiB (after bulk %.1f, peak %.1f); member peak RSS %.1f MiB\n",
		res.DirectLatencyUsP50, res.GatewayLatencyUsP50, res.ProxyAddedLatencyUsP50, res.ProxyAddedLatencyUsP50KeepAlive,
		res.ThroughputMiBs, res.DirectThroughputMiBs, res.GatewayRSSMiB, res.GatewayRSSAfterBulkMiB, res.GatewayPeakRSSMiB, res.MemberPeakRSSMiB)
	return nil
}

// latency alternates requests on the two paths (so load on the machine hits both alike) and
// returns each path's p50 in microseconds.
func latency(direct, via *http.Client, n int) (float64, float64, error) {
	var ds, gs []float64
	for i := range n + 20 {
		for j, c := range []*http.Client{direct, via} {
			t := time.Now()
			if err := get(c, "https://api/name"); err != nil {
				return 0, 0, err
			}
			if i < 20 {
				continue // warm-up
			}
			us := float64(time.Since(t).Nanoseconds()) / 1000
			if j == 0 {
				ds = append(ds, us)
			} else {
				gs = append(gs, us)
			}
		}
	}
	return pct(ds, 50), pct(gs, 50), nil
}

func get(c *http.Client, url string) error {
	resp, err := c.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	return nil
}

// throughput is the median of three 128 MiB downloads, in MiB/s.
func throughput(c *http.Client) (float64, error) {
	const size = 128 << 20
	var v []float64
	for range 3 {
		t := time.Now()
		if err := get(c, fmt.Sprintf("https://api/bytes?n=%d", size)); err != nil {
			return 0, err
		}
		v = append(v, float64(size>>20)/time.Since(t).Seconds())
	}
	return pct(v, 50), nil
}

// rss reads VmHWM (peak) and VmRSS (now) of pid in MiB.
func rss(pid int) (peak, cur float64, err error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var kb float64
		switch {
		case strings.HasPrefix(sc.Text(), "VmHWM:"):
			fmt.Sscanf(strings.TrimPrefix(sc.Text(), "VmHWM:"), "%f", &kb)
			peak = kb / 1024
		case strings.HasPrefix(sc.Text(), "VmRSS:"):
			fmt.Sscanf(strings.TrimPrefix(sc.Text(), "VmRSS:"), "%f", &kb)
			cur = kb / 1024
		}
	}
	return peak, cur, sc.Err()
}

func numCPU() int { return runtime.NumCPU() }
