package clients

import (
	"context"
	"io"
	"net"
	"net/url"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/caplb/caplb/e2e/envtest"
)

// cutProxy forwards TCP to the API server until cut: then it drops every connection and resets
// new ones, as an endpoint with nobody behind it does.
type cutProxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	cut    bool
	frozen bool
	conns  []net.Conn
}

func newCutProxy(t *testing.T, target string) *cutProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln, target: target}
	t.Cleanup(func() { _ = ln.Close() })
	go p.serve()
	return p
}

func (p *cutProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.cut {
			p.mu.Unlock()
			_ = c.(*net.TCPConn).SetLinger(0)
			_ = c.Close()
			continue
		}
		p.conns = append(p.conns, c)
		p.mu.Unlock()
		go func() {
			u, err := net.Dial("tcp", p.target)
			if err != nil {
				_ = c.Close()
				return
			}
			p.mu.Lock()
			p.conns = append(p.conns, u)
			p.mu.Unlock()
			go func() { _, _ = io.Copy(p.gate(u), c); _ = u.Close() }()
			_, _ = io.Copy(p.gate(c), u)
			_ = c.Close()
		}()
	}
}

// gate writes to w unless the proxy is frozen: then the bytes are swallowed and the connection
// stays open, as a path that black-holes packets (no reset, no FIN) leaves it.
func (p *cutProxy) gate(w io.Writer) io.Writer {
	return writerFunc(func(b []byte) (int, error) {
		p.mu.Lock()
		frozen := p.frozen
		p.mu.Unlock()
		if frozen {
			return len(b), nil
		}
		return w.Write(b)
	})
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(b []byte) (int, error) { return f(b) }

func (p *cutProxy) setFrozen(frozen bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.frozen = frozen
}

func (p *cutProxy) setCut(cut bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = cut
	if cut {
		for _, c := range p.conns {
			_ = c.Close()
		}
		p.conns = nil
	}
}

func startAPI(t *testing.T) (*rest.Config, *cutProxy) {
	cfg, p, _ := startAPIDirect(t)
	return cfg, p
}

// startAPIDirect is startAPI that also returns a config that reaches the API server directly.
func startAPIDirect(t *testing.T) (*rest.Config, *cutProxy, *rest.Config) {
	t.Helper()
	env, err := envtest.Start(envtest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	u, err := url.Parse(env.Config.Host)
	if err != nil {
		t.Fatal(err)
	}
	p := newCutProxy(t, u.Host)
	cfg := rest.CopyConfig(env.Config)
	cfg.Host = "https://" + p.ln.Addr().String()
	cfg.TLSClientConfig.ServerName = u.Hostname() // the serving certificate's name, as through a VIP
	cfg.Timeout = 5 * time.Second
	return cfg, p, rest.CopyConfig(env.Config)
}

func namespace(t *testing.T, cfg *rest.Config) string {
	cs := kubernetes.NewForConfigOrDie(cfg)
	ns, err := cs.CoreV1().Namespaces().Create(context.Background(),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "clients-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

// With nothing going wrong the clients see nothing wrong: every write succeeds and reaches the
// informer, one leader term, one connection.
func TestSteadyState(t *testing.T) {
	g := NewWithT(t)
	cfg, _ := startAPI(t)
	started := time.Now()
	r, err := Start(context.Background(), Config{REST: cfg, Namespace: namespace(t, cfg)})
	g.Expect(err).NotTo(HaveOccurred())
	g.Eventually(func() int { a, _ := r.ld.counts(); return len(a) }, 20*time.Second, 50*time.Millisecond).Should(Equal(1))
	g.Eventually(func() int { w, _ := r.w.snapshot(); return len(w) }, 20*time.Second, 50*time.Millisecond).Should(BeNumerically(">=", 100))
	stopping := time.Now()
	res := r.Stop(10 * time.Second)
	t.Logf("%+v", res)
	g.Expect(res.FirstWriteAt).To(BeTemporally(">", started), "the first write returned after the start")
	// 100 writes a tick (20 ms) apart at the least span well over a second.
	g.Expect(res.LastWriteAt).To(BeTemporally(">", res.FirstWriteAt.Add(time.Second)), "the writes span the run")
	g.Expect(res.LastWriteAt).To(BeTemporally("<", stopping.Add(time.Second)))
	g.Expect(res.FailedWrites).To(BeZero())
	g.Expect(res.LostEvents).To(BeZero())
	g.Expect(res.RelistSkipped).To(BeZero())
	g.Expect(res.StoreMatches).To(BeTrue())
	g.Expect(res.LeaderAcquired).To(Equal(1))
	g.Expect(res.LeaderLosses).To(BeZero())
	g.Expect(res.StreamsReset).To(BeZero(), "HTTP/2: every client shares one connection")
}

// An endpoint with nobody behind it for longer than the renew deadline is seen by every client:
// failed writes, a lost leadership, connections reset; once it is back the informer catches up
// and no successful write is lost.
func TestOutageIsSeen(t *testing.T) {
	g := NewWithT(t)
	cfg, p := startAPI(t)
	r, err := Start(context.Background(), Config{REST: cfg, Namespace: namespace(t, cfg)})
	g.Expect(err).NotTo(HaveOccurred())
	g.Eventually(func() int { a, _ := r.ld.counts(); return len(a) }, 20*time.Second, 50*time.Millisecond).Should(Equal(1))
	p.setCut(true)
	g.Eventually(func() int { _, l := r.ld.counts(); return len(l) }, 30*time.Second, 100*time.Millisecond).Should(Equal(1),
		"the leader cannot renew within the renew deadline")
	p.setCut(false)
	g.Eventually(func() int { a, _ := r.ld.counts(); return len(a) }, 30*time.Second, 100*time.Millisecond).Should(Equal(2),
		"it campaigns again and wins once the endpoint is back")
	g.Eventually(func() int { w, _ := r.w.snapshot(); return len(lastSuccess(w[len(w)-10:])) }, 20*time.Second, 50*time.Millisecond).Should(BeNumerically(">", 0),
		"writes succeed again")
	res := r.Stop(20 * time.Second)
	t.Logf("%+v", res)
	g.Expect(res.FailedWrites).To(BeNumerically(">", 0))
	g.Expect(res.LeaderLosses).To(Equal(1))
	g.Expect(res.StreamsReset).To(BeNumerically(">", 0))
	g.Expect(res.LostEvents).To(BeZero(), "the informer resumes its watch: nothing that succeeded is lost")
	g.Expect(res.StoreMatches).To(BeTrue())
}

// The positive control of the lost-event figure: the informer's connection is black-holed (no
// reset, no FIN) while the writer's own succeeds, and with no client timeout to cut the watch
// nothing relists it: every write from then on is counted lost, none hidden by a relist.
func TestHungWatchLosesEvents(t *testing.T) {
	g := NewWithT(t)
	watchCfg, p, direct := startAPIDirect(t)
	watchCfg.Timeout = 0 // as the lifecycle lab's clients: a timeout would end the watch
	r, err := Start(context.Background(), Config{REST: direct, WatchREST: watchCfg, Namespace: namespace(t, direct)})
	g.Expect(err).NotTo(HaveOccurred())
	g.Eventually(func() int { w, _ := r.w.snapshot(); return len(w) }, 20*time.Second, 50*time.Millisecond).Should(BeNumerically(">=", 20))
	p.setFrozen(true)
	frozenAt := time.Now()
	g.Eventually(func() int {
		w, _ := r.w.snapshot()
		n := 0
		for _, x := range w {
			if x.err == nil && x.at.After(frozenAt) {
				n++
			}
		}
		return n
	}, 20*time.Second, 50*time.Millisecond).Should(BeNumerically(">=", 21), "writes succeed on their own connection")
	res := r.Stop(2 * time.Second)
	t.Logf("%+v", res)
	g.Expect(res.FailedWrites).To(BeZero())
	// A write is stamped when its response arrives: the first one stamped after the freeze may
	// have been sent, and its event delivered, before it. Every later one started after it.
	g.Expect(res.LostEvents).To(BeNumerically(">=", 20), "every write since the freeze is lost to the informer")
	g.Expect(res.Relists).To(BeZero(), "nothing relisted: the loss is not coalesced away")
	g.Expect(res.StoreMatches).To(BeFalse())
}
