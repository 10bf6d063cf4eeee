package wireguard

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"

	"github.com/go-logr/logr"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	"golang.zx2c4.com/wireguard/tun"
)

// hostTUN is one TUN interface shared by a process's WireGuard devices (a member's key
// generations: two during a rotation). Each device owns one host address on it (/32 or /128);
// the interface carries one route, the tunnel prefix. A packet the kernel sends out of the
// interface goes to the device whose address is its source, so two generations can talk to the
// same gateway addresses with no policy routing; a packet a device receives enters the kernel
// only if its filter admits it. The interface is not persistent: it goes away with the process.
type hostTUN struct {
	name string
	mtu  int
	dev  tun.Device
	link netlink.Link
	log  logr.Logger
	pool sync.Pool

	mu   sync.RWMutex
	ends map[netip.Addr]*tunEnd
}

// tunEnd is one device's view of the shared interface: a tun.Device for wireguard-go.
type tunEnd struct {
	h      *hostTUN
	addr   netip.Addr
	admit  func([]byte) bool
	in     chan *[]byte
	events chan tun.Event
	closed chan struct{}
	once   sync.Once
}

var _ tun.Device = &tunEnd{}

// maxTUNPacket bounds one packet read from the interface (the largest MTU we accept, and room
// for an administrator raising it).
const maxTUNPacket = 9216

// openHostTUN creates the interface name with mtu, brings it up and routes prefix to it. Needs
// CAP_NET_ADMIN and /dev/net/tun.
func openHostTUN(name string, prefix netip.Prefix, mtu int, log logr.Logger) (*hostTUN, error) {
	dev, err := tun.CreateTUN(name, mtu)
	if err != nil {
		return nil, fmt.Errorf("create TUN interface %s (needs CAP_NET_ADMIN and /dev/net/tun): %w", name, err)
	}
	h := &hostTUN{name: name, mtu: mtu, dev: dev, log: log, ends: map[netip.Addr]*tunEnd{}}
	h.pool.New = func() any { b := make([]byte, maxTUNPacket); return &b }
	if err := h.setUp(prefix); err != nil {
		dev.Close()
		return nil, err
	}
	go func() { // the interface's own up/down events: nobody needs them, but they must not block
		for range dev.Events() {
		}
	}()
	go h.readLoop()
	return h, nil
}

func (h *hostTUN) setUp(prefix netip.Prefix) error {
	link, err := netlink.LinkByName(h.name)
	if err != nil {
		return fmt.Errorf("TUN interface %s: %w", h.name, err)
	}
	h.link = link
	if err := netlink.LinkSetUp(link); err != nil {
		return fmt.Errorf("bring %s up: %w", h.name, err)
	}
	route := &netlink.Route{LinkIndex: link.Attrs().Index, Dst: ipNet(prefix), Scope: netlink.SCOPE_LINK}
	if err := netlink.RouteReplace(route); err != nil {
		return fmt.Errorf("route %s via %s: %w", prefix, h.name, err)
	}
	return nil
}

func ipNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}

// attach puts addr on the interface and returns the device end for it; admit decides which
// packets from the tunnel reach the kernel.
func (h *hostTUN) attach(addr netip.Addr, admit func([]byte) bool) (*tunEnd, error) {
	a := &netlink.Addr{IPNet: ipNet(netip.PrefixFrom(addr, addr.BitLen()))}
	if addr.Is6() {
		// No duplicate address detection: the address is derived from our own key, and a
		// tentative address could not be used for a second or two.
		a.Flags = unix.IFA_F_NODAD
	}
	if err := netlink.AddrReplace(h.link, a); err != nil {
		return nil, fmt.Errorf("address %s on %s: %w", addr, h.name, err)
	}
	e := &tunEnd{h: h, addr: addr, admit: admit, in: make(chan *[]byte, 256),
		events: make(chan tun.Event, 1), closed: make(chan struct{})}
	e.events <- tun.EventUp
	h.mu.Lock()
	h.ends[addr] = e
	h.mu.Unlock()
	return e, nil
}

// readLoop hands every packet the kernel sends to the device that owns its source address.
func (h *hostTUN) readLoop() {
	batch := h.dev.BatchSize()
	bufs, sizes := make([][]byte, batch), make([]int, batch)
	for i := range bufs {
		bufs[i] = make([]byte, maxTUNPacket)
	}
	for {
		n, err := h.dev.Read(bufs, sizes, 0)
		if errors.Is(err, os.ErrClosed) {
			return
		}
		if err != nil {
			h.log.V(1).Info("TUN read", "interface", h.name, "error", err.Error())
			if n == 0 {
				continue
			}
		}
		h.mu.RLock()
		for i := range n {
			p := bufs[i][:sizes[i]]
			e := h.ends[sourceAddr(p)]
			if e == nil {
				continue // e.g. the kernel's own IPv6 link-local chatter
			}
			b := h.pool.Get().(*[]byte)
			*b = (*b)[:copy((*b)[:cap(*b)], p)]
			select {
			case e.in <- b:
			default: // the device is behind: drop, as a full NIC queue would
				h.pool.Put(b)
			}
		}
		h.mu.RUnlock()
	}
}

// sourceAddr reads an IP packet's source address (invalid if it is not IPv4 or IPv6).
func sourceAddr(p []byte) netip.Addr {
	switch {
	case len(p) >= 20 && p[0]>>4 == 4:
		return netip.AddrFrom4([4]byte(p[12:16]))
	case len(p) >= 40 && p[0]>>4 == 6:
		return netip.AddrFrom16([16]byte(p[8:24]))
	}
	return netip.Addr{}
}

// Close removes the interface (and with it its addresses and route).
func (h *hostTUN) Close() { _ = h.dev.Close() }

// Read blocks for one packet, then takes what else is queued, up to len(bufs).
func (e *tunEnd) Read(bufs [][]byte, sizes []int, offset int) (int, error) {
	var b *[]byte
	select {
	case b = <-e.in:
	case <-e.closed:
		return 0, os.ErrClosed
	}
	n := 0
	for {
		sizes[n] = copy(bufs[n][offset:], *b)
		e.h.pool.Put(b)
		n++
		if n == len(bufs) {
			return n, nil
		}
		select {
		case b = <-e.in:
		default:
			return n, nil
		}
	}
}

// Write passes the packets the filter admits to the kernel.
func (e *tunEnd) Write(bufs [][]byte, offset int) (int, error) {
	keep := make([][]byte, 0, len(bufs))
	for _, b := range bufs {
		if e.admit(b[offset:]) {
			keep = append(keep, b)
		}
	}
	if len(keep) > 0 {
		if _, err := e.h.dev.Write(keep, offset); err != nil {
			return 0, err
		}
	}
	return len(bufs), nil
}

func (e *tunEnd) File() *os.File           { return nil }
func (e *tunEnd) MTU() (int, error)        { return e.h.mtu, nil }
func (e *tunEnd) Name() (string, error)    { return e.h.name, nil }
func (e *tunEnd) Events() <-chan tun.Event { return e.events }
func (e *tunEnd) BatchSize() int           { return e.h.dev.BatchSize() }

// Close detaches the end and removes its address: connections still using it end.
func (e *tunEnd) Close() error {
	var err error
	e.once.Do(func() {
		e.h.mu.Lock()
		delete(e.h.ends, e.addr)
		e.h.mu.Unlock()
		close(e.closed)
		close(e.events)
		a := &netlink.Addr{IPNet: ipNet(netip.PrefixFrom(e.addr, e.addr.BitLen()))}
		if derr := netlink.AddrDel(e.h.link, a); derr != nil && !errors.Is(derr, unix.EADDRNOTAVAIL) {
			err = fmt.Errorf("remove %s from %s: %w", e.addr, e.h.name, derr)
		}
	})
	return err
}
