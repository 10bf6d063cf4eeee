//go:build linux

package bfd_test

import (
	"context"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	. "github.com/onsi/gomega"
	"golang.org/x/net/ipv4"

	"github.com/caplb/caplb/e2e/lab"
	"github.com/caplb/caplb/modes/bfd"
)

// changes records a runner's changes of state.
type changes struct {
	mu  sync.Mutex
	all []bfd.Change
}

func (c *changes) add(ch bfd.Change) { c.mu.Lock(); c.all = append(c.all, ch); c.mu.Unlock() }
func (c *changes) last() bfd.Change {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.all) == 0 {
		return bfd.Change{}
	}
	return c.all[len(c.all)-1]
}

// TestRunnersOverRealPackets: two runners in two namespaces bring their
// session up once enabled; a packet that says "admin down" with a TTL below
// 255 is ignored (RFC 5881: it may come from off the link), so is one with
// TTL 255 that does not carry the session's discriminators, and one that
// does takes the session down; a runner that stops sending is
// declared down after the detection time.
func TestRunnersOverRealPackets(t *testing.T) {
	lab.SkipUnlessRoot(t)
	g := NewWithT(t)
	l := lab.NewT(t, "bfdpair")
	a, err := l.AddNamespace("a")
	g.Expect(err).NotTo(HaveOccurred())
	b, err := l.AddNamespace("b")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(l.AddLink(a, "eth0", b, "eth0")).To(Succeed())
	g.Expect(a.AddAddr("eth0", netip.MustParsePrefix("10.49.0.1/24"))).To(Succeed())
	g.Expect(b.AddAddr("eth0", netip.MustParsePrefix("10.49.0.2/24"))).To(Succeed())
	aAddr, bAddr := netip.MustParseAddr("10.49.0.1"), netip.MustParseAddr("10.49.0.2")
	p := bfd.Params{DesiredMinTx: 50 * time.Millisecond, RequiredMinRx: 50 * time.Millisecond, DetectMult: 3}

	var ra, rb *bfd.Runner
	var ca, cb changes
	actx, stopA := context.WithCancel(context.Background())
	defer stopA()
	bctx, stopB := context.WithCancel(context.Background())
	defer stopB()
	g.Expect(a.Do(func() (err error) {
		ra, err = bfd.Start(actx, []bfd.Peer{{Address: bAddr, Params: p}}, logr.Discard(), ca.add)
		return err
	})).To(Succeed())
	g.Expect(b.Do(func() (err error) {
		rb, err = bfd.Start(bctx, []bfd.Peer{{Address: aAddr, Params: p}}, logr.Discard(), cb.add)
		return err
	})).To(Succeed())
	state := func(r *bfd.Runner, peer netip.Addr) func() bfd.State {
		return func() bfd.State { return r.Status()[peer].State }
	}

	g.Consistently(state(ra, bAddr), 300*time.Millisecond, 20*time.Millisecond).Should(Equal(bfd.Down), "not enabled: stays down")
	ra.Enable(bAddr)
	rb.Enable(aAddr)
	g.Eventually(state(ra, bAddr), 5*time.Second, 20*time.Millisecond).Should(Equal(bfd.Up))
	g.Eventually(state(rb, aAddr), 5*time.Second, 20*time.Millisecond).Should(Equal(bfd.Up))

	// A forged "admin down" from b's address, sent from another socket.
	forge := func(ttl int, myDisc, yourDisc uint32) {
		g.Expect(b.Do(func() error {
			c, err := net.DialUDP("udp4", nil, &net.UDPAddr{IP: aAddr.AsSlice(), Port: bfd.Port})
			if err != nil {
				return err
			}
			defer c.Close()
			if err := ipv4.NewConn(c).SetTTL(ttl); err != nil {
				return err
			}
			_, err = c.Write(bfd.Control{State: bfd.AdminDown, DetectMult: 3, MyDisc: myDisc, YourDisc: yourDisc}.Marshal())
			return err
		})).To(Succeed())
	}
	st := ra.Status()[bAddr]
	forge(64, st.RemoteDisc, st.LocalDisc)
	g.Consistently(state(ra, bAddr), 300*time.Millisecond, 10*time.Millisecond).Should(Equal(bfd.Up), "TTL 64: dropped")
	forge(255, 4242, 0)
	g.Consistently(state(ra, bAddr), 300*time.Millisecond, 10*time.Millisecond).Should(Equal(bfd.Up),
		"TTL 255 without the session's discriminators: ignored by an up session")
	forge(255, st.RemoteDisc, st.LocalDisc)
	g.Eventually(func() bfd.Diag { return ca.last().Diag }, time.Second, 10*time.Millisecond).Should(Equal(bfd.DiagNeighborDown),
		"TTL 255 with the session's discriminators: the session goes down")
	g.Eventually(state(ra, bAddr), 5*time.Second, 20*time.Millisecond).Should(Equal(bfd.Up), "and comes back with the real peer")

	// b stops: a declares it down after 3 x 50 ms.
	stopB()
	<-rb.Done()
	g.Eventually(func() bfd.Change { return ca.last() }, time.Second, 10*time.Millisecond).Should(And(
		HaveField("To", bfd.Down), HaveField("Diag", bfd.DiagDetectionExpired)))
}
