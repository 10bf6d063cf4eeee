package arp

import (
	"errors"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	. "github.com/onsi/gomega"
)

// fakeTables records the calls it is given.
type fakeTables struct {
	mu    sync.Mutex
	calls []string
	err   error
}

func (f *fakeTables) record(c string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, c)
	return f.err
}

func (f *fakeTables) installHandover(iface string, _ []netip.Addr, prev netip.Addr) error {
	return f.record("install " + iface + " " + prev.String())
}
func (f *fakeTables) removeHandover() error { return f.record("remove") }
func (f *fakeTables) installQuiet(vips []netip.Addr) error {
	return f.record("quiet")
}
func (f *fakeTables) removeQuiet() error { return f.record("unquiet") }

func (f *fakeTables) all() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls...)
}

// TestHandoverWindow: start installs the table, it is removed when the
// window ends; stop removes it at once; a refused table is not fatal.
func TestHandoverWindow(t *testing.T) {
	vips := []netip.Addr{netip.MustParseAddr("10.0.0.100")}
	prev := netip.MustParseAddr("10.0.0.2")

	t.Run("removed when the window ends", func(t *testing.T) {
		g := NewWithT(t)
		f := &fakeTables{}
		h := newHandover("eth0", logr.Discard(), f)
		h.start(vips, prev, 50*time.Millisecond)
		g.Expect(f.all()).To(Equal([]string{"install eth0 10.0.0.2"}))
		g.Eventually(f.all, 2*time.Second, 10*time.Millisecond).Should(HaveLen(2))
		g.Expect(f.all()[1]).To(Equal("remove"))
		g.Consistently(f.all, 150*time.Millisecond, 10*time.Millisecond).Should(HaveLen(2))
	})
	t.Run("stop removes at once and cancels the timer", func(t *testing.T) {
		g := NewWithT(t)
		f := &fakeTables{}
		h := newHandover("eth0", logr.Discard(), f)
		h.start(vips, prev, 50*time.Millisecond)
		h.stop("test")
		g.Expect(f.all()).To(Equal([]string{"install eth0 10.0.0.2", "remove"}))
		g.Consistently(f.all, 150*time.Millisecond, 10*time.Millisecond).Should(HaveLen(2))
	})
	t.Run("release only acts on an installed redirect", func(t *testing.T) {
		g := NewWithT(t)
		f := &fakeTables{}
		h := newHandover("eth0", logr.Discard(), f)
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
		f := &fakeTables{}
		h := newHandover("eth0", logr.Discard(), f)
		h.start(vips, netip.MustParseAddr("fd00::2"), time.Second)
		g.Expect(f.all()).To(BeEmpty())
	})
	t.Run("a refused table leaves the redirect inactive", func(t *testing.T) {
		g := NewWithT(t)
		f := &fakeTables{err: errors.New("refused")}
		h := newHandover("eth0", logr.Discard(), f)
		h.start(vips, prev, time.Second)
		g.Expect(h.active).To(BeFalse())
		h.release("test")
		g.Expect(f.all()).To(HaveLen(1))
	})
}
