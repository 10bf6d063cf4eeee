//go:build linux

package flows

import (
	"context"
	"net"
	"net/netip"
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

// TestSampleBusySkipsClientsOnTheNode: a client on another host counts; a client on the node
// itself reaching the VIP (the kubelet and the agent do, through kubelet.conf) does not: no
// GOAWAY moves it, and it goes with the node, so a drain must not wait for it.
func TestSampleBusySkipsClientsOnTheNode(t *testing.T) {
	g := NewWithT(t)
	s := newSegment(t, g, "flw-busy", false)

	remote := s.dial(g)
	defer remote.Close()
	g.Expect(remote.ask("from the client")).To(Equal("A: from the client"))

	var onNode net.Conn
	g.Expect(s.a.Do(func() (err error) {
		var d net.Dialer
		onNode, err = d.DialContext(context.Background(), "tcp", s.service.String())
		return err
	})).To(Succeed())
	defer onNode.Close()
	_, err := onNode.Write([]byte("from the node\n"))
	g.Expect(err).NotTo(HaveOccurred())

	var b BusyTracker
	count := func() (n int) {
		g.Expect(s.a.Do(func() (err error) {
			n, err = SampleBusy(&b, time.Now(), []netip.Addr{s.vip})
			return err
		})).To(Succeed())
		return n
	}
	g.Expect(count()).To(Equal(1), "the remote client only")
}
