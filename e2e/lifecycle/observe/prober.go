// Package observe watches a control plane's rollout from the outside: a real
// HTTPS client on the VIP (Prober), a record of who held the VIP and of what
// CAPI did (Recorder), and what came of it (Summarize, Print, RenderSVG).
// It needs no root: the lifecycle lab hands it a dialer into its client
// namespace and a function that reads the VIP's holders.
package observe

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strings"
	"sync"
	"syscall"
	"time"
)

// NodeHeader is the header the stand-in API server names its node with.
const NodeHeader = "X-Caplb-Lab-Node"

// Kind is what a sample measured.
type Kind string

const (
	// Fresh is GET /version on a new connection (keep-alives off).
	Fresh Kind = "fresh"
	// Kept is GET /version on a kept-alive connection.
	Kept Kind = "kept"
	// Stream is the long-lived GET /stream: its opening, each line it
	// delivers (Event), and each break or stall.
	Stream Kind = "stream"
)

// Kinds in display order.
var Kinds = []Kind{Fresh, Kept, Stream}

// Sample is one observation of the API through the VIP. At is when the
// request was sent (for a stream line: when it arrived).
type Sample struct {
	At      time.Time     `json:"at"`
	Kind    Kind          `json:"kind"`
	OK      bool          `json:"ok"`
	Node    string        `json:"node,omitempty"`
	Err     string        `json:"err,omitempty"`
	Latency time.Duration `json:"latency_ns"`
	// Event marks a line delivered on an open stream: proof the API is
	// alive, not a request of its own (Summarize counts them apart).
	Event bool `json:"event,omitempty"`
	// Reused: the request rode a connection an earlier request opened.
	Reused bool `json:"reused,omitempty"`
	// Interrupted marks a stream the server's side reset (a node that gave up the VIP resets
	// the connections it still had): the client saw it at once and reopened, as client-go
	// reopens a watch. Counted apart from failed requests; a stream that stalls is a failure.
	Interrupted bool `json:"interrupted,omitempty"`
	// Retried: the GET's connection was reset and the client sent it again, as client-go does
	// (only with ProberOptions.RetryIdempotent).
	Retried bool `json:"retried,omitempty"`
}

// ProberOptions configure a Prober.
type ProberOptions struct {
	// URL is the API's base URL, e.g. https://10.44.0.100:6443.
	URL string
	// CAPEM is the cluster CA (PEM); the server's certificate is verified
	// against it as any client would.
	CAPEM []byte
	// ServerName to verify instead of the URL's host (e.g. "kubernetes" on
	// loopback, which kubeadm-shaped certificates do not name). Optional.
	ServerName string
	// Dial makes connections (the lab's namespace dialer). Default: net.Dialer.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// Interval between requests of each loop. Default 10 ms.
	Interval time.Duration
	// Timeout of each request. Default 1 s.
	Timeout time.Duration
	// StallAfter is how long the stream may go without a line before it
	// counts as broken. Default 1 s (the stand-in writes every 50 ms).
	StallAfter time.Duration
	// RetryIdempotent lets net/http resend a GET whose kept-alive
	// connection turned out dead, as client-go's GETs are. Off by default:
	// a broken connection is then a failure, as it is for any request that
	// cannot be resent (a POST), which is what the kept loop is there to see.
	RetryIdempotent bool
	// NoStream leaves out the /stream loop (only the stand-in serves it; against a real API
	// server client-go's informer watches instead).
	NoStream bool
}

// Prober requests the API through the VIP from three loops: a fresh
// connection per request, a kept-alive connection, and one long-lived
// stream. It is safe for concurrent use.
type Prober struct {
	opts             ProberOptions
	fresh, kept      *http.Client
	stream           *http.Client
	mu               sync.Mutex
	samples          []Sample
	failures         []Sample
	ok, failed       int
	cancel           context.CancelFunc
	wg               sync.WaitGroup
	versionURL, strm string
}

// NewProber checks the options and builds the clients; Start starts probing.
func NewProber(o ProberOptions) (*Prober, error) {
	u, err := url.Parse(o.URL)
	if err != nil || u.Scheme != "https" || u.Host == "" {
		return nil, fmt.Errorf("prober: URL %q: want https://<VIP>:<port>", o.URL)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(o.CAPEM) {
		return nil, fmt.Errorf("prober: CAPEM holds no PEM certificate: pass the cluster CA")
	}
	if o.Dial == nil {
		o.Dial = (&net.Dialer{}).DialContext
	}
	if o.Interval <= 0 {
		o.Interval = 10 * time.Millisecond
	}
	if o.Timeout <= 0 {
		o.Timeout = time.Second
	}
	if o.StallAfter <= 0 {
		o.StallAfter = time.Second
	}
	transport := func(keepAlive bool) *http.Transport {
		return &http.Transport{
			DialContext:         o.Dial,
			TLSClientConfig:     &tls.Config{RootCAs: pool, ServerName: o.ServerName, MinVersion: tls.VersionTLS12},
			DisableKeepAlives:   !keepAlive,
			MaxIdleConnsPerHost: 1,
			TLSHandshakeTimeout: o.Timeout,
			// The kept-alive client speaks HTTP/2 where the server offers it, as client-go does
			// (a custom dialer or TLS config turns net/http's HTTP/2 off unless forced): it then
			// takes kube-apiserver's GOAWAYs like every Kubernetes client.
			ForceAttemptHTTP2: keepAlive,
		}
	}
	base := strings.TrimSuffix(o.URL, "/")
	return &Prober{
		opts:       o,
		fresh:      &http.Client{Transport: transport(false), Timeout: o.Timeout},
		kept:       &http.Client{Transport: transport(true), Timeout: o.Timeout},
		stream:     &http.Client{Transport: transport(false)}, // no overall timeout: the stream is long-lived
		versionURL: base + "/version",
		strm:       base + "/stream",
	}, nil
}

// Start starts the three loops; they run until ctx ends or Stop.
func (p *Prober) Start(ctx context.Context) {
	ctx, p.cancel = context.WithCancel(ctx)
	p.wg.Add(2)
	go p.loop(ctx, Fresh, p.fresh)
	go p.loop(ctx, Kept, p.kept)
	if !p.opts.NoStream {
		p.wg.Add(1)
		go p.streamLoop(ctx)
	}
}

// Stop stops the loops and waits for them. Requests cut short by Stop are
// not recorded.
func (p *Prober) Stop() {
	if p.cancel != nil {
		p.cancel()
	}
	p.wg.Wait()
	p.fresh.CloseIdleConnections()
	p.kept.CloseIdleConnections()
}

// Samples returns a copy of every sample so far, in the order recorded.
func (p *Prober) Samples() []Sample {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Sample(nil), p.samples...)
}

// Failures returns a copy of the failed samples so far: cheaper than
// Samples for asserting that a stretch of the scenario had none.
func (p *Prober) Failures() []Sample {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Sample(nil), p.failures...)
}

// Counts returns the successful and failed requests so far (stream lines
// not included), cheaply, for polling.
func (p *Prober) Counts() (ok, failed int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ok, p.failed
}

func (p *Prober) record(ctx context.Context, s Sample) {
	if !s.OK && ctx.Err() != nil {
		return // cut short by Stop, not by the API
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.samples = append(p.samples, s)
	switch {
	case s.Event:
	case s.OK:
		p.ok++
	default:
		p.failed++
		p.failures = append(p.failures, s)
	}
}

func (p *Prober) loop(ctx context.Context, kind Kind, c *http.Client) {
	defer p.wg.Done()
	t := time.NewTicker(p.opts.Interval)
	defer t.Stop()
	for {
		p.record(ctx, p.version(ctx, kind, c))
		// A request slower than the interval is followed at once by the next.
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (p *Prober) version(ctx context.Context, kind Kind, c *http.Client) Sample {
	s := Sample{At: time.Now(), Kind: kind}
	fail := func(err error) Sample {
		s.Latency, s.Err = time.Since(s.At), err.Error()
		return s
	}
	trace := &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) { s.Reused = i.Reused }}
	req, err := http.NewRequestWithContext(httptrace.WithClientTrace(ctx, trace), http.MethodGet, p.versionURL, nil)
	if err != nil {
		return fail(err)
	}
	if !p.opts.RetryIdempotent {
		// net/http resends only requests it can replay; an (empty) body it
		// cannot rewind makes this GET one it cannot, and it still goes out
		// without a body.
		req.Body = io.NopCloser(strings.NewReader(""))
	}
	resp, err := c.Do(req)
	if err != nil && p.opts.RetryIdempotent && errors.Is(err, syscall.ECONNRESET) && ctx.Err() == nil {
		// client-go retries a GET whose connection was reset (rest.Request, IsConnectionReset);
		// so does this client, once, and says so.
		s.Retried = true
		req, _ = http.NewRequestWithContext(httptrace.WithClientTrace(ctx, trace), http.MethodGet, p.versionURL, nil)
		resp, err = c.Do(req)
	}
	if err != nil {
		return fail(err)
	}
	defer resp.Body.Close()
	s.Node = resp.Header.Get(NodeHeader)
	var v struct {
		Node string `json:"node"`
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	if err != nil {
		return fail(fmt.Errorf("reading /version: %w", err))
	}
	if resp.StatusCode != http.StatusOK {
		return fail(fmt.Errorf("/version: HTTP %d: %.80s", resp.StatusCode, body))
	}
	if err := json.Unmarshal(body, &v); err != nil {
		return fail(fmt.Errorf("/version: %w", err))
	}
	if s.Node == "" {
		s.Node = v.Node
	}
	s.OK, s.Latency = true, time.Since(s.At)
	return s
}

// streamLoop keeps one /stream open: a break or a stall is a failure, a
// clean end (the server shutting down gracefully, as an apiserver ends its
// watches) is not; either way it opens the stream again.
func (p *Prober) streamLoop(ctx context.Context) {
	defer p.wg.Done()
	t := time.NewTicker(p.opts.Interval)
	defer t.Stop()
	for ctx.Err() == nil {
		p.openStream(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (p *Prober) openStream(ctx context.Context) {
	s := Sample{At: time.Now(), Kind: Stream}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// The open and every line must come within StallAfter (the open: within
	// Timeout); the watchdog cancels the request otherwise.
	var (
		mu      sync.Mutex
		waiting = fmt.Sprintf("no response within %v", p.opts.Timeout)
		stalled bool
	)
	watch := func(what string) {
		mu.Lock()
		waiting = what
		mu.Unlock()
	}
	dog := time.AfterFunc(p.opts.Timeout, func() {
		mu.Lock()
		stalled = true
		mu.Unlock()
		cancel()
	})
	defer dog.Stop()
	fail := func(at time.Time, err error) {
		mu.Lock()
		if stalled && ctx.Err() == nil {
			err = fmt.Errorf("stream stalled: %s (%v)", waiting, err)
		}
		mu.Unlock()
		p.record(ctx, Sample{At: at, Kind: Stream, Node: s.Node, Latency: time.Since(at), Err: err.Error()})
	}
	req, err := http.NewRequestWithContext(sctx, http.MethodGet, p.strm, nil)
	if err != nil {
		fail(s.At, err)
		return
	}
	resp, err := p.stream.Do(req)
	if err != nil {
		fail(s.At, err)
		return
	}
	defer resp.Body.Close()
	s.Node = resp.Header.Get(NodeHeader)
	if resp.StatusCode != http.StatusOK {
		fail(s.At, fmt.Errorf("/stream: HTTP %d", resp.StatusCode))
		return
	}
	s.OK, s.Latency = true, time.Since(s.At)
	p.record(ctx, s)
	watch(fmt.Sprintf("no line for %v", p.opts.StallAfter))
	dog.Reset(p.opts.StallAfter)
	last := time.Now()
	r := bufio.NewReader(resp.Body)
	for {
		line, err := r.ReadString('\n')
		now := time.Now()
		if err != nil {
			if errors.Is(err, io.EOF) && line == "" {
				return // ended cleanly by the server
			}
			if errors.Is(err, syscall.ECONNRESET) && ctx.Err() == nil {
				p.record(ctx, Sample{At: now, Kind: Stream, Node: s.Node, Interrupted: true,
					Err: fmt.Sprintf("stream reset after %v: %v", now.Sub(s.At).Round(time.Millisecond), err)})
				return
			}
			fail(last, fmt.Errorf("stream broke after %v: %w", now.Sub(s.At).Round(time.Millisecond), err))
			return
		}
		dog.Reset(p.opts.StallAfter)
		node, _, _ := strings.Cut(strings.TrimSpace(line), " ")
		p.record(ctx, Sample{At: now, Kind: Stream, OK: true, Node: node, Latency: now.Sub(last), Event: true})
		last = now
	}
}
