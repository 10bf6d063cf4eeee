package election

import (
	"bufio"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

// handshakeHelperEnv names the listener the helper process connects to.
const handshakeHelperEnv = "CAPLB_HANDSHAKE_HELPER_ADDR"

// TestHandshakeSeenByAStarvedObserver: the observing member's process is stopped (SIGSTOP)
// for three times the handshake's deadline right after it sent the SYN, as a member booting
// beside it on the same cores starves it of CPU. A handshake the listener's kernel completed
// meanwhile still counts (the holder is starved, not gone: no claim beside it), and a SYN
// nobody answered still fails (the holder's machine went).
func TestHandshakeSeenByAStarvedObserver(t *testing.T) {
	for _, tc := range []struct {
		name     string
		listener func(*testing.T) netip.AddrPort
		want     string
	}{
		{"a listener that never accepts: completed", acceptingNone, "true"},
		{"a SYN the listener's kernel drops: failed", filledListener, "false"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			cmd := exec.Command(os.Args[0], "-test.run=^TestHandshakeHelperProcess$", "-test.count=1")
			cmd.Env = append(os.Environ(), handshakeHelperEnv+"="+tc.listener(t).String())
			out, err := cmd.StdoutPipe()
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(cmd.Start()).To(Succeed())
			defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
			lines := bufio.NewScanner(out)
			g.Expect(lines.Scan()).To(BeTrue())
			g.Expect(lines.Text()).To(Equal("sent"))
			g.Expect(cmd.Process.Signal(syscall.SIGSTOP)).To(Succeed())
			time.Sleep(3 * helperDeadline) // the starvation under test, not a wait for a result
			g.Expect(cmd.Process.Signal(syscall.SIGCONT)).To(Succeed())
			g.Expect(lines.Scan()).To(BeTrue())
			g.Expect(lines.Text()).To(Equal("result " + tc.want))
		})
	}
}

// helperDeadline is the helper's handshake deadline: the agent's default (handshakeTimeout).
const helperDeadline = 100 * time.Millisecond

// TestHandshakeHelperProcess is the observer of TestHandshakeSeenByAStarvedObserver, run as
// a process of its own so that it can be stopped.
func TestHandshakeHelperProcess(t *testing.T) {
	addr := os.Getenv(handshakeHelperEnv)
	if addr == "" {
		t.Skip("the helper process of TestHandshakeSeenByAStarvedObserver")
	}
	deadline := time.Now().Add(helperDeadline)
	fd, err := connectStart(netip.MustParseAddrPort(addr))
	if err != nil {
		t.Fatal(err)
	}
	fmt.Println("sent")
	fmt.Printf("result %v\n", connectWait(fd, deadline))
}

// acceptingNone listens on loopback and never accepts: the kernel completes handshakes into
// its queue, as for a member whose agent is starved of CPU.
func acceptingNone(t *testing.T) netip.AddrPort {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return netip.MustParseAddrPort(ln.Addr().String())
}

// filledListener is fullListener with its one queued connection made: the kernel drops every
// later SYN, as on a path that went.
func filledListener(t *testing.T) netip.AddrPort {
	t.Helper()
	addr := fullListener(t)
	if !kernelHandshake(addr, time.Now().Add(time.Second), "") {
		t.Fatal("the first handshake, which fills the queue, failed")
	}
	return addr
}
