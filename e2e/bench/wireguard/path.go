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

	"github.com/caplb/caplb/e2e/wireguard/wglab"
)

// measurePath compares the gateway path with a direct one: the same stand-in API server run on
// the gateway host itself (port 7443), so the difference is what the gateway, the tunnel and the
// NAT hop add. The top-level figures are gw1's; with every, each gateway is measured too (its
// requests interleaved with the others', so load on the machine hits all alike) into
// res.Gateways.
func measurePath(w *wglab.Lab, res *Result, every bool, devices map[string]string) error {
	gws := w.Gateways[:1]
	if every {
		gws = w.Gateways
	}
	var direct, via []string
	for _, gw := range gws {
		d, err := startDirect(w, gw)
		if err != nil {
			return err
		}
		direct = append(direct, d)
		via = append(via, net.JoinHostPort(gw.Addr.String(), fmt.Sprint(wglab.APIPort)))
	}
	paths := make([]*GatewayPath, len(gws))
	for i, gw := range gws {
		paths[i] = &GatewayPath{Device: devices[gw.Name]}
		if paths[i].Device == "" {
			paths[i].Device = "netstack"
		}
	}
	for _, ka := range []bool{false, true} {
		var clients []*http.Client
		for i := range gws {
			clients = append(clients, w.HTTPSClient(direct[i], ka, 5*time.Second), w.HTTPSClient(via[i], ka, 5*time.Second))
		}
		lat, err := latency(clients, 400)
		if err != nil {
			return err
		}
		for i, p := range paths {
			d, g := lat[2*i], lat[2*i+1]
			if ka {
				p.AddedUsP50KeepAlive = g.total - d.total
			} else {
				p.DirectUsP50, p.GatewayUsP50, p.AddedUsP50 = d.total, g.total, g.total-d.total
				p.DirectPhases, p.GatewayPhases = d.phases, g.phases
			}
		}
	}
	// Memory after steady API-like traffic (the latency runs), then the peak after bulk transfers.
	var err error
	for i, gw := range gws {
		p := paths[i]
		if _, p.RSSMiB, err = rss(gw.Proc.Pid()); err != nil {
			return err
		}
		if p.DirectThroughputMiBs, err = throughput(w.HTTPSClient(direct[i], false, time.Minute)); err != nil {
			return err
		}
		if p.ThroughputMiBs, err = throughput(w.HTTPSClient(via[i], false, time.Minute)); err != nil {
			return err
		}
		if p.PeakRSSMiB, p.RSSAfterBulkMiB, err = rss(gw.Proc.Pid()); err != nil {
			return err
		}
	}
	for _, m := range w.Members {
		peak, _, err := rss(m.Agent.Pid())
		if err != nil {
			return err
		}
		res.MemberPeakRSSMiB = max(res.MemberPeakRSSMiB, peak)
	}
	p := paths[0]
	res.DirectLatencyUsP50, res.GatewayLatencyUsP50, res.ProxyAddedLatencyUsP50 = p.DirectUsP50, p.GatewayUsP50, p.AddedUsP50
	res.DirectPhasesUsP50, res.GatewayPhasesUsP50 = p.DirectPhases, p.GatewayPhases
	res.ProxyAddedLatencyUsP50KeepAlive = p.AddedUsP50KeepAlive
	res.ThroughputMiBs, res.DirectThroughputMiBs = p.ThroughputMiBs, p.DirectThroughputMiBs
	res.GatewayRSSMiB, res.GatewayRSSAfterBulkMiB, res.GatewayPeakRSSMiB = p.RSSMiB, p.RSSAfterBulkMiB, p.PeakRSSMiB
	if every {
		res.Gateways = map[string]*GatewayPath{}
	}
	for i, gw := range gws {
		p := paths[i]
		if every {
			res.Gateways[gw.Name] = p
		}
		fmt.Fprintf(os.Stderr, "%s (%s) fresh connection p50 (us): connect/TLS/request direct %.0f/%.0f/%.0f, via gateway %.0f/%.0f/%.0f\n",
			gw.Name, p.Device, p.DirectPhases.ConnectUs, p.DirectPhases.TLSUs, p.DirectPhases.RequestUs,
			p.GatewayPhases.ConnectUs, p.GatewayPhases.TLSUs, p.GatewayPhases.RequestUs)
		fmt.Fprintf(os.Stderr, "%s (%s) latency p50: direct %.0f us, via gateway %.0f us (+%.0f us; keep-alive +%.0f us); throughput %.1f MiB/s (direct %.1f); gateway RSS %.1f MiB (after bulk %.1f, peak %.1f)\n",
			gw.Name, p.Device, p.DirectUsP50, p.GatewayUsP50, p.AddedUsP50, p.AddedUsP50KeepAlive,
			p.ThroughputMiBs, p.DirectThroughputMiBs, p.RSSMiB, p.RSSAfterBulkMiB, p.PeakRSSMiB)
	}
	fmt.Fprintf(os.Stderr, "member peak RSS %.1f MiB\n", res.MemberPeakRSSMiB)
	return nil
}

// startDirect runs the stand-in on gw's host (port 7443) and returns its address once it answers.
func startDirect(w *wglab.Lab, gw *wglab.Gateway) (string, error) {
	dir := filepath.Join(w.L.Dir(), "direct-"+gw.Name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	cert, key, err := w.CA.APIServerCert(dir, "direct", gw.Addr.AsSlice())
	if err != nil {
		return "", err
	}
	direct := net.JoinHostPort(gw.Addr.String(), "7443")
	if _, err := gw.NS.Start("direct-apiserver-"+gw.Name, []string{w.Bins.Standin, "-name", "direct", "-listen", direct,
		"-cert", cert, "-key", key}, nil); err != nil {
		return "", err
	}
	probe := w.HTTPSClient(direct, false, time.Second)
	for deadline := time.Now().Add(10 * time.Second); get(probe, "https://api/name") != nil; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			return "", fmt.Errorf("direct stand-in on %s did not answer", direct)
		}
	}
	return direct, nil
}

// GatewayPath is one gateway's figures (microseconds, MiB/s, MiB), as the top-level ones.
type GatewayPath struct {
	Device               string  `json:"device"`
	AddedUsP50           float64 `json:"proxy_added_latency_us_p50"`
	AddedUsP50KeepAlive  float64 `json:"proxy_added_latency_us_p50_keepalive"`
	DirectUsP50          float64 `json:"direct_latency_us_p50"`
	GatewayUsP50         float64 `json:"gateway_latency_us_p50"`
	DirectPhases         Phases  `json:"direct_phases_us_p50"`
	GatewayPhases        Phases  `json:"gateway_phases_us_p50"`
	ThroughputMiBs       float64 `json:"throughput_mib_s"`
	DirectThroughputMiBs float64 `json:"direct_throughput_mib_s"`
	RSSMiB               float64 `json:"gateway_rss_mib"`
	RSSAfterBulkMiB      float64 `json:"gateway_rss_after_bulk_mib"`
	PeakRSSMiB           float64 `json:"gateway_peak_rss_mib"`
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

// latency alternates requests on the paths (so load on the machine hits all alike) and returns
// each path's p50 in microseconds, with its phases.
func latency(clients []*http.Client, n int) ([]pathLatency, error) {
	ts := make([][]float64, len(clients))
	ph := make([][3][]float64, len(clients))
	us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1000 }
	for i := range n + 20 {
		for j, c := range clients {
			var s sample
			t := time.Now()
			if err := getTraced(c, "https://api/name", &s); err != nil {
				return nil, err
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
	out := make([]pathLatency, len(clients))
	for j := range out {
		out[j] = pathLatency{total: pct(ts[j], 50), phases: Phases{ConnectUs: pct(ph[j][0], 50), TLSUs: pct(ph[j][1], 50),
			RequestUs: pct(ph[j][2], 50), TotalUs: pct(ts[j], 50)}}
	}
	return out, nil
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
