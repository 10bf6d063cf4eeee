//go:build linux

package arp

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"golang.org/x/net/http2"

	"github.com/caplb/caplb/modes/flows"
)

// TestBusyDrainMovesWritesWithoutFailing is the busy drain over real HTTP/2: a client keeps one
// connection for a writer (a PUT every 20 ms) and a watch, as client-go does, to the old holder
// (127.0.0.80); the server answers a request with a GOAWAY at a 2 % chance, as kube-apiserver's
// --goaway-chance does, and the client's next connections reach the successor (127.0.0.81). The
// writer's connection counts as busy until the GOAWAY moves its requests; the watch left on it
// does not; the reset that follows fails no write.
//
// The watch sends 500 bytes of events every 100 ms (5 KB/s). Go's HTTP/2 client returns flow
// control in one 48-byte TLS record per 4 KiB consumed, so the watch's connection carries
// ~120 bytes from the client in busyWindow, well under busyBytes. (At 20 ms a tick, 25 KB/s,
// it carried ~560 bytes: the tracker rightly counted it busy in some runs and the test failed.
// Such a busy watch only holds the VIP up to busyDrain; it fails no request.)
func TestBusyDrainMovesWritesWithoutFailing(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (SOCK_DESTROY, and sock_diag's tcp_info of every socket)")
	}
	g := NewWithT(t)
	old, successor := netip.MustParseAddr("127.0.0.80"), netip.MustParseAddr("127.0.0.81")
	var goaway atomic.Bool
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/watch" {
			flusher := w.(http.Flusher)
			for {
				if _, err := w.Write(bytes.Repeat([]byte("e"), 500)); err != nil {
					return
				}
				w.Write([]byte("\n"))
				flusher.Flush()
				select {
				case <-r.Context().Done():
					return
				case <-time.After(100 * time.Millisecond):
				}
			}
		}
		_, _ = io.Copy(io.Discard, r.Body)
		if goaway.Load() && rand.Float64() < 0.02 {
			w.Header().Set("Connection", "close") // the HTTP/2 server answers with a GOAWAY
		}
		_, _ = w.Write([]byte("ok"))
	})
	serve := func(addr netip.Addr) *httptest.Server {
		ln, err := net.Listen("tcp4", netip.AddrPortFrom(addr, 0).String())
		g.Expect(err).NotTo(HaveOccurred())
		s := httptest.NewUnstartedServer(handler)
		s.Listener, s.EnableHTTP2 = ln, true
		s.StartTLS()
		return s
	}
	oldSrv, newSrv := serve(old), serve(successor)
	// httptest.Server.Close waits for every handler, and the watch's never ends by itself: on
	// any exit (a failed assertion too) the client's streams are cancelled and the servers'
	// connections closed first, so no failure can hang the test.
	ctx, cancel := context.WithCancel(context.Background())
	defer func() {
		cancel()
		oldSrv.CloseClientConnections()
		newSrv.CloseClientConnections()
		oldSrv.Close()
		newSrv.Close()
	}()

	// The first connection reaches the old holder; every later one the successor, as new
	// connections to a VIP do once the neighbours' caches moved.
	var dials atomic.Int32
	tr := &http2.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true},
		DialTLSContext: func(ctx context.Context, network, _ string, cfg *tls.Config) (net.Conn, error) {
			target := newSrv.Listener.Addr().String()
			if dials.Add(1) == 1 {
				target = oldSrv.Listener.Addr().String()
			}
			d := tls.Dialer{Config: cfg}
			return d.DialContext(ctx, network, target)
		},
	}
	client := &http.Client{Transport: tr, Timeout: 5 * time.Second}
	const url = "https://vip.test"

	// The watch shares the transport (one connection, as client-go's) but has no overall
	// timeout: it is long-lived.
	watch, err := (&http.Client{Transport: tr}).Do(must(http.NewRequestWithContext(ctx, http.MethodGet, url+"/watch", nil)))
	g.Expect(err).NotTo(HaveOccurred())
	var events atomic.Int64
	watchEnded := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(watch.Body)
		for sc.Scan() {
			events.Add(1)
		}
		watchEnded <- sc.Err()
	}()

	var writes, failed atomic.Int64
	var firstFailure atomic.Value
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			resp, err := client.Do(must(http.NewRequestWithContext(ctx, http.MethodPut, url+"/cm", bytes.NewReader(bytes.Repeat([]byte("v"), 600)))))
			writes.Add(1)
			if err != nil {
				failed.Add(1)
				firstFailure.CompareAndSwap(nil, err.Error())
				continue
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}()
	defer func() { cancel(); close(stop); wg.Wait() }()

	var b flows.BusyTracker
	sample := func() int {
		n, err := flows.SampleBusy(&b, time.Now(), []netip.Addr{old})
		g.Expect(err).NotTo(HaveOccurred())
		return n
	}
	// The writer shares the watch's connection: busy, for as long as one cares to look.
	g.Consistently(sample, 1500*time.Millisecond, 100*time.Millisecond).Should(Equal(1), "the writer's connection carries requests")
	g.Expect(dials.Load()).To(Equal(int32(1)), "one connection so far")

	// The drain: GOAWAYs move the writer; the watch stays on the old connection and it stops
	// counting as busy.
	goaway.Store(true)
	// (A starved writer can pause for a second and count as idle before it moved: only the
	// state after the move is asserted.)
	moved := func() bool { return dials.Load() >= 2 }
	g.Eventually(moved, 30*time.Second, 50*time.Millisecond).Should(BeTrue(), "a GOAWAY moved the writer to the successor")
	g.Eventually(sample, 10*time.Second, 100*time.Millisecond).Should(BeZero(), "no connection carries requests once the writer moved")
	g.Expect(watchEnded).NotTo(Receive(), "the watch is still on the old holder's connection")
	seen := events.Load()
	g.Eventually(events.Load).Should(BeNumerically(">", seen), "and still delivers events")

	// The release resets what is left (the watch); no write fails.
	n, err := flows.ResetConnections(old, resetPatience)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(n).To(Equal(1), "the watch's connection is reset")
	g.Eventually(watchEnded, 2*time.Second).Should(Receive(HaveOccurred()), "the watch learns at once (client-go reopens it)")
	before := writes.Load()
	g.Eventually(writes.Load, 5*time.Second).Should(BeNumerically(">", before+20), "the writer goes on")
	g.Expect(failed.Load()).To(BeZero(), "no write failed: %v", firstFailure.Load())
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
