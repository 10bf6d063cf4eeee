package arp

import (
	"context"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	. "github.com/onsi/gomega"
)

// fakeNFT records the scripts it is given.
type fakeNFT struct {
	mu      sync.Mutex
	scripts []string
	err     error
}

func (f *fakeNFT) run(_ context.Context, script string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.scripts = append(f.scripts, script)
	return f.err
}

func (f *fakeNFT) all() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.scripts...)
}

func TestHandoverRuleset(t *testing.T) {
	vips := []netip.Addr{netip.MustParseAddr("10.0.0.100"), netip.MustParseAddr("fd00::100")}
	for _, tc := range []struct {
		name     string
		prev     netip.Addr
		want     []string
		wantNone []string
	}{{
		name: "ipv4 previous owner redirects the ipv4 VIP",
		prev: netip.MustParseAddr("10.0.0.2"),
		want: []string{
			"delete table netdev caplb_handover",
			`type filter hook ingress device "eth0"`,
			"type ipv4_addr . inet_service",
			"ip daddr { 10.0.0.100 } meta l4proto tcp tcp flags & (syn | ack) == syn update @flows { ip saddr . tcp sport timeout 10s } accept",
			`ip daddr { 10.0.0.100 } meta l4proto tcp ip saddr . tcp sport != @flows fwd ip to 10.0.0.2 device "eth0"`,
		},
		wantNone: []string{"fd00::100"},
	}, {
		name: "ipv6 previous owner redirects the ipv6 VIP",
		prev: netip.MustParseAddr("fd00::2"),
		want: []string{
			"type ipv6_addr . inet_service",
			`ip6 daddr { fd00::100 } meta l4proto tcp ip6 saddr . tcp sport != @flows fwd ip6 to fd00::2 device "eth0"`,
		},
		wantNone: []string{"10.0.0.100"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			s := handoverRuleset("eth0", vips, tc.prev)
			for _, w := range tc.want {
				g.Expect(s).To(ContainSubstring(w))
			}
			for _, w := range tc.wantNone {
				g.Expect(s).NotTo(ContainSubstring(w))
			}
		})
	}
}

// TestHandoverWindow: start installs the table, it is removed when the
// window ends; stop removes it at once; a missing nft is not fatal.
func TestHandoverWindow(t *testing.T) {
	vips := []netip.Addr{netip.MustParseAddr("10.0.0.100")}
	prev := netip.MustParseAddr("10.0.0.2")

	t.Run("removed when the window ends", func(t *testing.T) {
		g := NewWithT(t)
		f := &fakeNFT{}
		h := newHandover("eth0", logr.Discard(), f.run)
		h.start(vips, prev, 50*time.Millisecond)
		g.Expect(f.all()).To(HaveLen(1))
		g.Expect(f.all()[0]).To(ContainSubstring("fwd ip to 10.0.0.2"))
		g.Eventually(f.all, 2*time.Second, 10*time.Millisecond).Should(HaveLen(2))
		g.Expect(f.all()[1]).To(Equal("table netdev caplb_handover\ndelete table netdev caplb_handover\n"))
		g.Consistently(f.all, 150*time.Millisecond, 10*time.Millisecond).Should(HaveLen(2))
	})
	t.Run("stop removes at once and cancels the timer", func(t *testing.T) {
		g := NewWithT(t)
		f := &fakeNFT{}
		h := newHandover("eth0", logr.Discard(), f.run)
		h.start(vips, prev, 50*time.Millisecond)
		h.stop("test")
		g.Expect(f.all()).To(HaveLen(2))
		g.Expect(strings.HasPrefix(f.all()[1], "table netdev caplb_handover\ndelete")).To(BeTrue())
		g.Consistently(f.all, 150*time.Millisecond, 10*time.Millisecond).Should(HaveLen(2))
	})
	t.Run("release only acts on an installed redirect", func(t *testing.T) {
		g := NewWithT(t)
		f := &fakeNFT{}
		h := newHandover("eth0", logr.Discard(), f.run)
		h.release("test")
		g.Expect(f.all()).To(BeEmpty())
		h.start(vips, prev, time.Minute)
		h.release("test")
		g.Expect(f.all()).To(HaveLen(2))
		h.release("test")
		g.Expect(f.all()).To(HaveLen(2))
	})
	t.Run("no VIP of the previous owner's family installs nothing", func(t *testing.T) {
		g := NewWithT(t)
		f := &fakeNFT{}
		h := newHandover("eth0", logr.Discard(), f.run)
		h.start(vips, netip.MustParseAddr("fd00::2"), time.Second)
		g.Expect(f.all()).To(BeEmpty())
	})
	t.Run("missing nft is tolerated and warned once", func(t *testing.T) {
		g := NewWithT(t)
		f := &fakeNFT{err: errNFTMissing}
		h := newHandover("eth0", logr.Discard(), f.run)
		h.start(vips, prev, time.Second)
		h.start(vips, prev, time.Second)
		g.Expect(h.warnedNoNFT).To(BeTrue())
		g.Expect(h.active).To(BeFalse())
		h.stop("test")
	})
}
