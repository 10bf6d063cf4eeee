package observe

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/caplb/caplb/e2e/lab"
	"github.com/caplb/caplb/e2e/testpki"
)

// The Prober against the real stand-in API server on loopback, with a
// kubeadm-shaped certificate (no loopback SAN: it verifies "kubernetes").
// Root-free: no namespaces, the default dialer.
func TestProberAgainstStandin(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	bin := filepath.Join(dir, "standin")
	g.Expect(lab.BuildBinary("./e2e/lab/standin", bin)).To(Succeed())
	pki, err := testpki.WriteTestPKI(dir, "10.44.0.100")
	g.Expect(err).NotTo(HaveOccurred())
	ca, err := os.ReadFile(pki.CAFile)
	g.Expect(err).NotTo(HaveOccurred())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	g.Expect(err).NotTo(HaveOccurred())
	addr := ln.Addr().String()
	ln.Close()

	start := func(name string) *exec.Cmd {
		cmd := exec.Command(bin, "-name", name, "-api-listen", addr, "-cert", pki.CertFile, "-key", pki.KeyFile)
		cmd.Stderr = os.Stderr
		g.Expect(cmd.Start()).To(Succeed())
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		return cmd
	}
	p, err := NewProber(ProberOptions{URL: "https://" + addr, CAPEM: ca, ServerName: "kubernetes"})
	g.Expect(err).NotTo(HaveOccurred())

	// Wait for the server before probing: failures before it listens are
	// not what this test counts.
	cmd := start("n1")
	g.Eventually(func() error {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
		}
		return err
	}).
		WithTimeout(10 * time.Second).WithPolling(10 * time.Millisecond).Should(Succeed())
	p.Start(t.Context())
	defer p.Stop()

	// About a second of answers from n1, on every kind of request.
	okFrom := func(since time.Time, node string) func() map[Kind]int {
		return func() map[Kind]int {
			n := map[Kind]int{}
			for _, s := range p.Samples() {
				if s.OK && s.Node == node && !s.At.Before(since) {
					n[s.Kind]++
				}
			}
			return n
		}
	}
	t1 := time.Now()
	g.Eventually(okFrom(t1, "n1")).WithTimeout(10 * time.Second).Should(SatisfyAll(
		HaveKeyWithValue(Fresh, BeNumerically(">=", 80)), HaveKeyWithValue(Kept, BeNumerically(">=", 80)),
		HaveKeyWithValue(Stream, BeNumerically(">=", 18))))
	_, failed := p.Counts()
	g.Expect(failed).To(BeZero(), "no failure while the server is up: %v", Summarize(Input{Samples: p.Samples()}).FirstErrors)
	reused := map[Kind]int{}
	for _, s := range p.Samples() {
		if s.Reused {
			reused[s.Kind]++
		}
	}
	g.Expect(reused[Fresh]).To(BeZero(), "a new connection for every request")
	g.Expect(reused[Kept]).To(BeNumerically(">=", 70), "one connection kept alive")

	// The server dies: every loop counts failures.
	g.Expect(cmd.Process.Signal(syscall.SIGKILL)).To(Succeed())
	_ = cmd.Wait()
	killed := time.Now()
	failedFrom := func(since time.Time) func() map[Kind]int {
		return func() map[Kind]int {
			n := map[Kind]int{}
			for _, s := range p.Samples() {
				if !s.OK && !s.At.Before(since.Add(-time.Second)) {
					n[s.Kind]++
				}
			}
			return n
		}
	}
	g.Eventually(failedFrom(killed)).WithTimeout(10 * time.Second).Should(SatisfyAll(
		HaveKeyWithValue(Fresh, BeNumerically(">=", 5)), HaveKeyWithValue(Kept, BeNumerically(">=", 5)),
		HaveKeyWithValue(Stream, BeNumerically(">=", 2))))

	// Another node comes up on the address: every loop recovers, the stream too.
	restarted := time.Now()
	start("n2")
	g.Eventually(okFrom(restarted, "n2")).WithTimeout(10 * time.Second).Should(SatisfyAll(
		HaveKeyWithValue(Fresh, BeNumerically(">=", 10)), HaveKeyWithValue(Kept, BeNumerically(">=", 10)),
		HaveKeyWithValue(Stream, BeNumerically(">=", 5))))
	p.Stop()

	r := Summarize(Input{Backend: "loopback", Samples: p.Samples()})
	t.Logf("%+v", r)
	g.Expect(r.FailedRequests).To(BeNumerically(">=", 12))
	g.Expect(p.Failures()).To(HaveLen(r.FailedRequests))
	g.Expect(p.Failures()).To(HaveEach(HaveField("OK", BeFalse())))
	g.Expect(r.AnsweredBy).To(SatisfyAll(HaveKey("n1"), HaveKey("n2")))
	g.Expect(r.MaxGapMS).To(BeNumerically(">=", float64(restarted.Sub(killed).Milliseconds())), "the outage is the longest gap")
	var streamErrs []string
	for _, s := range p.Samples() {
		if s.Kind == Stream && !s.OK {
			streamErrs = append(streamErrs, s.Err)
		}
	}
	g.Expect(strings.Join(streamErrs, "\n")).To(ContainSubstring("stream broke"), "the killed server broke the open stream")
}

func TestNewProberRejectsBadOptions(t *testing.T) {
	g := NewWithT(t)
	_, err := NewProber(ProberOptions{URL: "http://10.0.0.1:6443", CAPEM: []byte("x")})
	g.Expect(err).To(MatchError(ContainSubstring("want https://")))
	_, err = NewProber(ProberOptions{URL: "https://10.0.0.1:6443", CAPEM: []byte("not pem")})
	g.Expect(err).To(MatchError(ContainSubstring("CAPEM")))
}
