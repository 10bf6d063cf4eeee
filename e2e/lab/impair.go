//go:build linux

package lab

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// Impairment is a userspace relay inserted between a bridge port and its
// bridge that delays and drops frames, for kernels without sch_netem. It
// carries every frame of the port (ARP, IPv4, IPv6) in both directions.
type Impairment struct {
	sw       *Netns
	br, port string
	inner    string // relay end towards the bridge
	fds      [2]int
	params   atomic.Pointer[Netem]
	stop     chan struct{}
	wg       sync.WaitGroup
	once     sync.Once
	dropped  atomic.Int64
	relayed  atomic.Int64
	closeErr error
}

// Impair detaches port from the bridge br in the switch namespace sw and
// relays its frames through this process with the impairment e: port <->
// relay <-> veth "<port>i"/"<port>j" <-> br. Set changes it, Close restores
// the direct attachment.
func (l *Lab) Impair(sw *Netns, br, port string, e Netem) (*Impairment, error) {
	im := &Impairment{sw: sw, br: br, port: port, inner: port + "i", stop: make(chan struct{}), fds: [2]int{-1, -1}}
	im.params.Store(&e)
	ctx := context.Background()
	steps := [][]string{
		{"ip", "link", "set", port, "nomaster"},
		{"ip", "link", "add", port + "i", "type", "veth", "peer", "name", port + "j"},
		{"ip", "link", "set", port + "j", "master", br, "up"},
		{"ip", "link", "set", port + "i", "up", "promisc", "on"},
		{"ip", "link", "set", port, "up", "promisc", "on"},
	}
	for _, s := range steps {
		if _, err := sw.Run(ctx, s...); err != nil {
			_ = im.Close()
			return nil, err
		}
	}
	err := sw.Do(func() error {
		for i, name := range []string{port, im.inner} {
			fd, err := rawSocket(name)
			if err != nil {
				return err
			}
			im.fds[i] = fd
		}
		return nil
	})
	if err != nil {
		_ = im.Close()
		return nil, err
	}
	im.wg.Add(2)
	go im.relay(im.fds[0], im.fds[1])
	go im.relay(im.fds[1], im.fds[0])
	return im, nil
}

// Set replaces the impairment.
func (im *Impairment) Set(e Netem) { im.params.Store(&e) }

// Stats: frames relayed and dropped so far.
func (im *Impairment) Stats() (relayed, dropped int64) { return im.relayed.Load(), im.dropped.Load() }

// Close stops the relay and attaches the port to the bridge directly again.
func (im *Impairment) Close() error {
	im.once.Do(func() {
		close(im.stop)
		im.wg.Wait()
		for _, fd := range im.fds {
			if fd >= 0 {
				_ = unix.Close(fd)
			}
		}
		ctx := context.Background()
		var errs []error
		if _, err := im.sw.Run(ctx, "ip", "link", "del", im.inner); err != nil && !isNoDevice(err) {
			errs = append(errs, err)
		}
		if _, err := im.sw.Run(ctx, "ip", "link", "set", im.port, "master", im.br, "up"); err != nil {
			errs = append(errs, err)
		}
		im.closeErr = errors.Join(errs...)
	})
	return im.closeErr
}

func isNoDevice(err error) bool {
	return err != nil && (strings.Contains(err.Error(), "Cannot find device") || strings.Contains(err.Error(), "does not exist"))
}

type frame struct {
	due  time.Time
	data []byte
}

// relay reads frames arriving on from and writes them to to after the delay.
func (im *Impairment) relay(from, to int) {
	defer im.wg.Done()
	q := make(chan frame, 4096)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for f := range q {
			if d := time.Until(f.due); d > 0 {
				select {
				case <-time.After(d):
				case <-im.stop:
					return
				}
			}
			if _, err := unix.Write(to, f.data); err != nil {
				im.dropped.Add(1)
				continue
			}
			im.relayed.Add(1)
		}
	}()
	defer func() { close(q); <-done }()
	buf := make([]byte, 65536)
	for {
		select {
		case <-im.stop:
			return
		default:
		}
		n, sa, err := unix.Recvfrom(from, buf, 0)
		if err != nil {
			continue // timeout (SO_RCVTIMEO) or EINTR: check stop
		}
		if ll, ok := sa.(*unix.SockaddrLinklayer); ok && ll.Pkttype == unix.PACKET_OUTGOING {
			continue // our own writes, seen on the way out
		}
		p := im.params.Load()
		if p.LossPercent > 0 && rand.Float64()*100 < p.LossPercent {
			im.dropped.Add(1)
			continue
		}
		delay := p.Delay
		if p.Jitter > 0 {
			delay += time.Duration(rand.Int64N(int64(2*p.Jitter))) - p.Jitter
		}
		data := append([]byte(nil), buf[:n]...)
		fixChecksum(data)
		select {
		case q <- frame{due: time.Now().Add(delay), data: data}:
		default:
			im.dropped.Add(1) // queue full: tail drop
		}
	}
}

// rawSocket opens an AF_PACKET socket bound to ifName for every protocol,
// with a receive timeout so the relay notices Close.
func rawSocket(ifName string) (int, error) {
	ifi, err := net.InterfaceByName(ifName)
	if err != nil {
		return -1, err
	}
	proto := htons(unix.ETH_P_ALL)
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, int(proto))
	if err != nil {
		return -1, fmt.Errorf("packet socket on %s: %w", ifName, err)
	}
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: proto, Ifindex: ifi.Index}); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("bind packet socket to %s: %w", ifName, err)
	}
	tv := unix.NsecToTimeval((100 * time.Millisecond).Nanoseconds())
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// fixChecksum recomputes the TCP, UDP or ICMPv6 checksum of an Ethernet
// frame in place. Frames that the kernel sent over veth often carry a
// partial checksum (offloaded to a "device" that never computes it); written
// raw into another interface they would be dropped as corrupt.
func fixChecksum(f []byte) {
	if len(f) < 14 {
		return
	}
	switch binary.BigEndian.Uint16(f[12:14]) {
	case 0x0800:
		ip := f[14:]
		if len(ip) < 20 {
			return
		}
		ihl := int(ip[0]&0x0f) * 4
		total := int(binary.BigEndian.Uint16(ip[2:4]))
		if ihl < 20 || total > len(ip) || total < ihl || binary.BigEndian.Uint16(ip[6:8])&0x3fff != 0 {
			return // malformed or fragmented: leave alone
		}
		seg := ip[ihl:total]
		var pseudo uint32
		pseudo += sum16(ip[12:20])
		pseudo += uint32(ip[9]) + uint32(len(seg))
		setL4Checksum(ip[9], seg, pseudo, false)
	case 0x86dd:
		ip := f[14:]
		if len(ip) < 40 {
			return
		}
		plen := int(binary.BigEndian.Uint16(ip[4:6]))
		if 40+plen > len(ip) {
			return
		}
		seg := ip[40 : 40+plen]
		var pseudo uint32
		pseudo += sum16(ip[8:40])
		pseudo += uint32(plen) + uint32(ip[6])
		setL4Checksum(ip[6], seg, pseudo, true)
	}
}

func setL4Checksum(proto byte, seg []byte, pseudo uint32, v6 bool) {
	var off int
	switch proto {
	case 6:
		off = 16
	case 17:
		off = 6
		if !v6 && len(seg) >= 8 && binary.BigEndian.Uint16(seg[6:8]) == 0 {
			return // IPv4 UDP without checksum
		}
	case 58:
		off = 2
	default:
		return
	}
	if len(seg) < off+2 {
		return
	}
	seg[off], seg[off+1] = 0, 0
	s := pseudo + sum16(seg)
	for s>>16 != 0 {
		s = s&0xffff + s>>16
	}
	c := ^uint16(s)
	if c == 0 && proto == 17 {
		c = 0xffff
	}
	binary.BigEndian.PutUint16(seg[off:], c)
}

func sum16(b []byte) uint32 {
	var s uint32
	for i := 0; i+1 < len(b); i += 2 {
		s += uint32(b[i])<<8 | uint32(b[i+1])
	}
	if len(b)%2 == 1 {
		s += uint32(b[len(b)-1]) << 8
	}
	return s
}
