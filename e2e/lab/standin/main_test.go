package main

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/caplb/caplb/e2e/lab"
	"github.com/caplb/caplb/e2e/lab/standin/server"
	"github.com/caplb/caplb/e2e/testpki"
)

// The stand-in as the labs run it: built, started, spoken to over TLS with
// a kubeadm-shaped certificate (no loopback SAN: the client verifies the
// name "kubernetes", as the agents do).
type fixture struct {
	bin    string
	pki    testpki.PKI
	client *http.Client
}

func setup(t *testing.T) fixture {
	t.Helper()
	g := NewWithT(t)
	dir := t.TempDir()
	f := fixture{bin: filepath.Join(dir, "standin")}
	g.Expect(lab.BuildBinary("./e2e/lab/standin", f.bin)).To(Succeed())
	var err error
	f.pki, err = testpki.WriteTestPKI(dir, "10.44.0.100")
	g.Expect(err).NotTo(HaveOccurred())
	ca, err := os.ReadFile(f.pki.CAFile)
	g.Expect(err).NotTo(HaveOccurred())
	pool := x509.NewCertPool()
	g.Expect(pool.AppendCertsFromPEM(ca)).To(BeTrue())
	f.client = &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "kubernetes"}, DisableKeepAlives: true,
	}}
	return f
}

func freeAddr(g Gomega) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	g.Expect(err).NotTo(HaveOccurred())
	defer ln.Close()
	return ln.Addr().String()
}

func (f fixture) start(t *testing.T, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(f.bin, append([]string{"-cert", f.pki.CertFile, "-key", f.pki.KeyFile}, args...)...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	NewWithT(t).Expect(cmd.Start()).To(Succeed())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd
}

func (f fixture) status(url string) func() (int, error) {
	return func() (int, error) {
		resp, err := f.client.Get(url)
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
		return resp.StatusCode, nil
	}
}

func TestAPIServer(t *testing.T) {
	g := NewWithT(t)
	f := setup(t)
	addr, fail := freeAddr(g), filepath.Join(t.TempDir(), "fail")
	cmd := f.start(t, "-name", "n1", "-api-listen", addr, "-fail-file", fail)
	base := "https://" + addr
	g.Eventually(f.status(base + "/readyz")).WithTimeout(10 * time.Second).WithPolling(20 * time.Millisecond).Should(Equal(200))

	resp, err := f.client.Get(base + "/version")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(resp.Header.Get(server.NodeHeader)).To(Equal("n1"))
	var v map[string]string
	g.Expect(json.NewDecoder(resp.Body).Decode(&v)).To(Succeed())
	resp.Body.Close()
	g.Expect(v).To(HaveKeyWithValue("node", "n1"))
	g.Expect(v).To(HaveKey("gitVersion"))

	g.Expect(os.WriteFile(fail, nil, 0o600)).To(Succeed())
	g.Expect(f.status(base + "/readyz")()).To(Equal(500))
	g.Expect(os.Remove(fail)).To(Succeed())
	g.Expect(f.status(base + "/readyz")()).To(Equal(200))

	// The stream: a line every 50 ms, then a clean end on SIGTERM.
	sc := &http.Client{Transport: f.client.Transport}
	resp, err = sc.Get(base + "/stream")
	g.Expect(err).NotTo(HaveOccurred())
	defer resp.Body.Close()
	g.Expect(resp.Header.Get(server.NodeHeader)).To(Equal("n1"))
	r := bufio.NewReader(resp.Body)
	start := time.Now()
	for _, want := range []string{"n1 1\n", "n1 2\n", "n1 3\n"} {
		g.Expect(r.ReadString('\n')).To(Equal(want))
	}
	g.Expect(time.Since(start)).To(BeNumerically(">=", 90*time.Millisecond), "lines are paced, not a burst")

	g.Expect(cmd.Process.Signal(syscall.SIGTERM)).To(Succeed())
	var rest error
	for rest == nil {
		_, rest = r.ReadString('\n')
	}
	g.Expect(rest).To(MatchError(io.EOF), "a graceful shutdown ends the stream cleanly, as an apiserver ends its watches")
	g.Expect(cmd.Wait()).To(Succeed(), "exit status 0 after a graceful shutdown")
}

func TestLegacyListeners(t *testing.T) {
	g := NewWithT(t)
	f := setup(t)
	service, readyz, echo := freeAddr(g), freeAddr(g), freeAddr(g)
	f.start(t, "-name", "n2", "-service-listen", service, "-readyz-listen", readyz, "-echo-listen", echo)
	g.Eventually(f.status("https://" + readyz + "/readyz")).WithTimeout(10 * time.Second).WithPolling(20 * time.Millisecond).Should(Equal(200))

	c, err := net.Dial("tcp", service)
	g.Expect(err).NotTo(HaveOccurred())
	b, err := io.ReadAll(c)
	c.Close()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(b)).To(Equal("n2\n"))

	c, err = net.Dial("tcp", echo)
	g.Expect(err).NotTo(HaveOccurred())
	defer c.Close()
	r := bufio.NewReader(c)
	g.Expect(r.ReadString('\n')).To(Equal("n2\n"))
	_, err = c.Write([]byte("hi\n"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(r.ReadString('\n')).To(Equal("n2: hi\n"))
}
