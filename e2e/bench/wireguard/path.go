//go:build linux

package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/caplb/caplb/e2e/lab/wglab"
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
	cert, key, err := w.CA.IssueServing(dir, "direct", "direct", gw.Addr.String())
	if err != nil {
		return err
	}
	direct := net.JoinHostPort(gw.Addr.String(), "7443")
	if _, err := gw.NS.Start("direct-apiserver", []string{w.Bins.Standin, "-name", "direct", "-api-listen", direct,
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
			res.ProxyAddedLatencyUsP50KeepAlive = g.total - d.total
		} else {
			res.DirectLatencyUsP50, res.GatewayLatencyUsP50, res.ProxyAddedLatencyUsP50 = d.total, g.total, g.total-d.total
			res.DirectPhasesUsP50, res.GatewayPhasesUsP50 = d.phases, g.phases
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
	fmt.Fprintf(os.Stderr, "fresh connection p50 (us): connect/TLS/request direct %.0f/%.0f/%.0f, via gateway %.0f/%.0f/%.0f\n",
		res.DirectPhasesUsP50.ConnectUs, res.DirectPhasesUsP50.TLSUs, res.DirectPhasesUsP50.RequestUs,
		res.GatewayPhasesUsP50.ConnectUs, res.GatewayPhasesUsP50.TLSUs, res.GatewayPhasesUsP50.RequestUs)
	fmt.Fprintf(os.Stderr, "latency p50: direct %.0f us, via gateway %.0f us (+%.0f us; keep-alive +%.0f us); throughput %.1f MiB/s (direct %.1f); gateway RSS %.1f MiB (after bulk %.1f, peak %.1f); member peak RSS %.1f MiB\n",
		res.DirectLatencyUsP50, res.GatewayLatencyUsP50, res.ProxyAddedLatencyUsP50, res.ProxyAddedLatencyUsP50KeepAlive,
		res.ThroughputMiBs, res.DirectThroughputMiBs, res.GatewayRSSMiB, res.GatewayRSSAfterBulkMiB, res.GatewayPeakRSSMiB, res.MemberPeakRSSMiB)
	return nil
}

// Phases splits a request on a fresh connection (p50 of each, microseconds): the TCP connect
// as the client sees it, the TLS handshake, and the request after it (written to first byte of
// the response).
type Phases struct {
	ConnectUs float64 `json:"connect_us"`
	TLSUs     float64 `json:"tls_handshake_us"`
	RequestUs float64 `json:"request_us"`
	TotalUs   float64 `json:"total_us"`
}

type sample struct{ connect, tls, request time.Duration }

type pathLatency struct {
	total  float64
	phases Phases
}

// latency alternates requests on the two paths (so load on the machine hits both alike) and
// returns each path's p50 in microseconds, with its phases.
func latency(direct, via *http.Client, n int) (d, g pathLatency, err error) {
	var ts [2][]float64
	var ph [2][3][]float64
	us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1000 }
	for i := range n + 20 {
		for j, c := range []*http.Client{direct, via} {
			var s sample
			t := time.Now()
			if err := getTraced(c, "https://api/name", &s); err != nil {
				return d, g, err
			}
			if i < 20 {
				continue // warm-up
			}
			ts[j] = append(ts[j], us(time.Since(t)))
			for k, v := range []time.Duration{s.connect, s.tls, s.request} {
				if v > 0 {
					ph[j][k] = append(ph[j][k], us(v))
				}
			}
		}
	}
	out := [2]pathLatency{}
	for j := range out {
		out[j] = pathLatency{total: pct(ts[j], 50), phases: Phases{ConnectUs: pct(ph[j][0], 50), TLSUs: pct(ph[j][1], 50),
			RequestUs: pct(ph[j][2], 50), TotalUs: pct(ts[j], 50)}}
	}
	return out[0], out[1], nil
}

// getTraced is get, noting the phases of the request in s.
func getTraced(c *http.Client, url string, s *sample) error {
	var connStart, tlsStart, wrote time.Time
	tr := &httptrace.ClientTrace{
		ConnectStart:         func(string, string) { connStart = time.Now() },
		ConnectDone:          func(string, string, error) { s.connect = time.Since(connStart) },
		TLSHandshakeStart:    func() { tlsStart = time.Now() },
		TLSHandshakeDone:     func(tls.ConnectionState, error) { s.tls = time.Since(tlsStart) },
		WroteRequest:         func(httptrace.WroteRequestInfo) { wrote = time.Now() },
		GotFirstResponseByte: func() { s.request = time.Since(wrote) },
	}
	req, err := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), tr), http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	return do(c, req)
}

func get(c *http.Client, url string) error {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	return do(c, req)
}

func do(c *http.Client, req *http.Request) error {
	url := req.URL.String()
	resp, err := c.Do(req)
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
