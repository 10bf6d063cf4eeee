//go:build linux

package wireguard_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/caplb/caplb/e2e/lab/wglab"
)

// device: tun on both ends. Through the whole path (members behind the NAT, both gateways), a
// key rotation under load loses nothing: two generations share the member's interface, the
// gateways' checks are counted from the packets, and the drain reads the kernel's sockets.
func TestTUNDeviceKeyRotationUnderLoadLosesNothing(t *testing.T) {
	rotateUnderLoad(t, startLab(t, wglab.Options{Device: "tun"}))
}

// On a member's TUN interface only TCP to its tunnel address and the API server's port gets
// in: another listener of the node on all addresses (a kubelet's 10250 here) is not reachable
// from a gateway through the tunnel, and the member's kernel never sees the attempt.
func TestTUNDeviceLetsInOnlyTheAPIServerPort(t *testing.T) {
	g := NewWithT(t)
	w := startLab(t, wglab.Options{Device: "tun"})
	m, gw := w.Members[0], w.Gateways[0]
	cert, key := w.L.Dir()+"/"+m.Name+"/"+m.Name+".crt", w.L.Dir()+"/"+m.Name+"/"+m.Name+".key"
	kubelet, err := m.NS.Start(m.Name+"-kubelet", []string{w.Bins.Standin, "-name", "kubelet", "-api-listen", ":10250",
		"-cert", cert, "-key", key}, nil)
	g.Expect(err).NotTo(HaveOccurred())
	defer kubelet.Stop(time.Second)
	st, err := w.MemberStatus(m)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(st.APIServerListening).To(HaveValue(BeTrue()), "the stand-in listens on all addresses, as kubeadm's API server")
	g.Eventually(func() (string, error) {
		return m.NS.Run(context.Background(), "ss", "-Htln", "sport = :10250")
	}, 5*time.Second, 50*time.Millisecond).Should(ContainSubstring("LISTEN"), "the kubelet stand-in listens on all addresses")

	dial := func(port string) error {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		c, err := gw.NS.DialContext(ctx, "tcp", net.JoinHostPort(st.TunnelAddress, port))
		if err == nil {
			c.Close()
		}
		return err
	}
	g.Expect(dial("6443")).To(Succeed(), "the API server's port is reachable through the tunnel")
	g.Expect(dial("10250")).NotTo(Succeed(), "the kubelet's port is not")
	out, err := m.NS.Run(context.Background(), "ss", "-Htan", "sport = :10250")
	g.Expect(err).NotTo(HaveOccurred())
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		g.Expect(line).To(HavePrefix("LISTEN"), "no connection to 10250 reached the member's kernel: %s", out)
	}

	// An API server bound to loopback only takes none of the tunnel's connections: the member
	// says so in its status (and logs it).
	_ = m.Standin.Stop(time.Second) // exits on SIGTERM: "signal: terminated"
	loopback, err := m.NS.Start(m.Name+"-apiserver-loopback", []string{w.Bins.Standin, "-name", m.Name, "-api-listen", "127.0.0.1:6443",
		"-cert", cert, "-key", key}, nil)
	g.Expect(err).NotTo(HaveOccurred())
	defer loopback.Stop(time.Second)
	g.Eventually(func() (*bool, error) {
		st, err := w.MemberStatus(m)
		return st.APIServerListening, err
	}, 5*time.Second, 50*time.Millisecond).Should(HaveValue(BeFalse()))
	g.Expect(dial("6443")).NotTo(Succeed(), "refused: nothing listens on the tunnel address")
}
