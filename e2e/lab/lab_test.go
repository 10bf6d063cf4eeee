//go:build linux

package lab_test

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/caplb/caplb/e2e/lab"
)

// TestLabPrimitives builds switch + two hosts, then checks reachability under
// each fault helper and that Close removes every namespace.
func TestLabPrimitives(t *testing.T) {
	lab.SkipUnlessRoot(t)
	g := NewWithT(t)
	l, err := lab.New("labprim")
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = l.Close() })

	sw, err := l.AddNamespace("sw")
	g.Expect(err).NotTo(HaveOccurred())
	a, err := l.AddNamespace("a")
	g.Expect(err).NotTo(HaveOccurred())
	b, err := l.AddNamespace("b")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(l.AddLink(a, "eth0", sw, "pa")).To(Succeed())
	g.Expect(l.AddLink(b, "eth0", sw, "pb")).To(Succeed())
	g.Expect(l.AddBridge(sw, "br0", "pa", "pb")).To(Succeed())
	g.Expect(a.AddAddr("eth0", netip.MustParsePrefix("10.99.0.1/24"))).To(Succeed())
	g.Expect(b.AddAddr("eth0", netip.MustParsePrefix("10.99.0.2/24"))).To(Succeed())
	g.Expect(a.AddAddr("eth0", netip.MustParsePrefix("fd99::1/64"))).To(Succeed())
	g.Expect(b.AddAddr("eth0", netip.MustParsePrefix("fd99::2/64"))).To(Succeed())

	// A listener in b (socket made inside b through Do) answers dials from a.
	var ln net.Listener
	g.Expect(b.Do(func() error {
		var err error
		ln, err = net.Listen("tcp", ":7000")
		return err
	})).To(Succeed())
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	ping := func(dst string) error {
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		defer cancel()
		c, err := a.DialContext(ctx, "tcp", net.JoinHostPort(dst, "7000"))
		if err == nil {
			c.Close()
		}
		return err
	}
	g.Eventually(func() error { return ping("10.99.0.2") }, 10*time.Second, 100*time.Millisecond).Should(Succeed())
	g.Eventually(func() error { return ping("fd99::2") }, 10*time.Second, 100*time.Millisecond).Should(Succeed())

	// A process in b is reachable from a through DialContext.
	p, err := b.Start("listener", []string{"sh", "-c", "echo hello-from-b; exec sleep 60"}, nil)
	g.Expect(err).NotTo(HaveOccurred())
	g.Eventually(func() (string, error) {
		out, err := os.ReadFile(l.LogPath("listener"))
		return string(out), err
	}, 5*time.Second, 50*time.Millisecond).Should(ContainSubstring("hello-from-b"))

	g.Expect(sw.CutLink("pb")).To(Succeed())
	g.Expect(ping("10.99.0.2")).NotTo(Succeed())
	g.Expect(sw.RestoreLink("pb")).To(Succeed())
	g.Eventually(func() error { return ping("10.99.0.2") }, 10*time.Second, 100*time.Millisecond).Should(Succeed())

	g.Expect(sw.Partition("br0", []string{"pa"}, []string{"pb"})).To(Succeed())
	g.Expect(ping("10.99.0.2")).NotTo(Succeed())
	g.Expect(sw.Heal("br0")).To(Succeed())
	g.Eventually(func() error { return ping("10.99.0.2") }, 10*time.Second, 100*time.Millisecond).Should(Succeed())

	if err := sw.SetNetem("pb", lab.Netem{Delay: 150 * time.Millisecond}); errors.Is(err, lab.ErrNoNetem) {
		t.Log("kernel has no netem; Impair covers delay and loss")
	} else {
		g.Expect(err).NotTo(HaveOccurred())
		start := time.Now()
		g.Expect(ping("10.99.0.2")).To(Succeed())
		g.Expect(time.Since(start)).To(BeNumerically(">=", 150*time.Millisecond), "netem delays the SYN-ACK")
		g.Expect(sw.ClearNetem("pb")).To(Succeed())
	}

	// The userspace impairment delays and drops the port's frames.
	im, err := l.Impair(sw, "br0", "pb", lab.Netem{Delay: 100 * time.Millisecond})
	g.Expect(err).NotTo(HaveOccurred())
	start := time.Now()
	defer func() { r, d := im.Stats(); t.Logf("relayed %d dropped %d", r, d) }()
	g.Eventually(func() error { return ping("10.99.0.2") }, 5*time.Second, 100*time.Millisecond).Should(Succeed())
	start = time.Now()
	g.Expect(ping("10.99.0.2")).To(Succeed())
	g.Expect(time.Since(start)).To(BeNumerically(">=", 100*time.Millisecond), "the relay delays frames")
	im.Set(lab.Netem{LossPercent: 100})
	g.Expect(ping("10.99.0.2")).NotTo(Succeed(), "100% loss")
	g.Expect(im.Close()).To(Succeed())
	start = time.Now()
	g.Eventually(func() error { return ping("10.99.0.2") }, 5*time.Second, 100*time.Millisecond).Should(Succeed())
	g.Expect(time.Since(start)).To(BeNumerically("<", 100*time.Millisecond), "direct again after Close")

	// Do switches the thread: the namespace sees its own eth0 address.
	h, err := a.Netlink()
	g.Expect(err).NotTo(HaveOccurred())
	link, err := h.LinkByName("eth0")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(link.Attrs().Name).To(Equal("eth0"))
	h.Close()

	g.Expect(l.Close()).To(Succeed())
	g.Expect(l.Close()).To(Succeed(), "Close is idempotent")
	_, err = os.Stat("/proc/" + strconv.Itoa(p.Pid()))
	g.Expect(os.IsNotExist(err)).To(BeTrue(), "processes are killed")
	entries, _ := os.ReadDir("/var/run/netns")
	for _, e := range entries {
		g.Expect(strings.HasPrefix(e.Name(), "labprim-")).To(BeFalse(), "namespace %s left behind", e.Name())
	}
}
