package wireguard

import (
	"bufio"
	"context"
	"encoding/hex"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"golang.zx2c4.com/wireguard/conn"
	"golang.zx2c4.com/wireguard/device"
	"golang.zx2c4.com/wireguard/tun"
	"golang.zx2c4.com/wireguard/tun/netstack"
)

// Tunnel is a userspace WireGuard device. By default (OpenTunnel) its IP stack is gVisor's
// netstack inside this process: no kernel module, no TUN, no host routes, nothing the node's
// network plugin could clash with; sockets are made with Net. Opt-in (device: tun), it sits on
// an address of a TUN interface (openTUNTunnel) and the host's TCP stack carries the
// connections: Net is nil there. DialTCP works on both.
type Tunnel struct {
	Addr netip.Addr
	Net  *netstack.Net // nil on a TUN device
	dev  *device.Device
	dial func(ctx context.Context, ap netip.AddrPort) (net.Conn, error)

	mu sync.Mutex // serialises IpcSet: peers change one at a time
}

// PeerSpec is one WireGuard peer.
type PeerSpec struct {
	PublicKey Key
	// Endpoint is where to send to (empty: learn it from the peer's first packet).
	Endpoint string
	// AllowedIP is the peer's tunnel address (a /32 or /128).
	AllowedIP netip.Addr
	// Keepalive in whole seconds; 0 disables.
	Keepalive time.Duration
}

// OpenTunnel brings up a device with private key priv at tunnel address addr, listening on UDP
// port (0: any).
func OpenTunnel(priv Key, addr netip.Addr, port, mtu int, log logr.Logger) (*Tunnel, error) {
	tdev, tnet, err := netstack.CreateNetTUN([]netip.Addr{addr}, nil, mtu)
	if err != nil {
		return nil, fmt.Errorf("netstack: %w", err)
	}
	dev, err := startDevice(tdev, priv, port, log)
	if err != nil {
		return nil, err
	}
	dial := func(ctx context.Context, ap netip.AddrPort) (net.Conn, error) {
		c, err := tnet.DialContextTCPAddrPort(ctx, ap)
		if err != nil {
			return nil, err // not a nil *gonet.TCPConn inside a non-nil net.Conn
		}
		return c, nil
	}
	return &Tunnel{Addr: addr, Net: tnet, dev: dev, dial: dial}, nil
}

// openTUNTunnel brings up a device like OpenTunnel on end, an address of a TUN interface: the
// host's TCP stack carries the connections, from the tunnel address.
func openTUNTunnel(end tun.Device, priv Key, addr netip.Addr, port int, log logr.Logger) (*Tunnel, error) {
	dev, err := startDevice(end, priv, port, log)
	if err != nil {
		return nil, err
	}
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: addr.AsSlice()}}
	dial := func(ctx context.Context, ap netip.AddrPort) (net.Conn, error) {
		return d.DialContext(ctx, "tcp", ap.String())
	}
	return &Tunnel{Addr: addr, dev: dev, dial: dial}, nil
}

// startDevice runs WireGuard on tdev with key priv and UDP port (0: any); on failure tdev is
// closed.
func startDevice(tdev tun.Device, priv Key, port int, log logr.Logger) (*device.Device, error) {
	wlog := &device.Logger{
		Verbosef: func(format string, args ...any) { log.V(3).Info(fmt.Sprintf(format, args...)) },
		Errorf:   func(format string, args ...any) { log.V(1).Info(fmt.Sprintf(format, args...)) },
	}
	dev := device.NewDevice(tdev, conn.NewDefaultBind(), wlog)
	if err := dev.IpcSet(fmt.Sprintf("private_key=%s\nlisten_port=%d\n", hexKey(priv), port)); err != nil {
		dev.Close()
		return nil, fmt.Errorf("configure device: %w", err)
	}
	if err := dev.Up(); err != nil {
		dev.Close()
		return nil, fmt.Errorf("device up (UDP port %d): %w", port, err)
	}
	return dev, nil
}

// DialTCP connects to ap through the tunnel.
func (t *Tunnel) DialTCP(ctx context.Context, ap netip.AddrPort) (net.Conn, error) {
	return t.dial(ctx, ap)
}

// SetPeer adds or updates one peer. Only that peer is touched: a full replace would drop every
// session on the device.
func (t *Tunnel) SetPeer(p PeerSpec) error {
	var b strings.Builder
	fmt.Fprintf(&b, "public_key=%s\n", hexKey(p.PublicKey))
	if p.Endpoint != "" {
		fmt.Fprintf(&b, "endpoint=%s\n", p.Endpoint)
	}
	fmt.Fprintf(&b, "persistent_keepalive_interval=%d\n", int(p.Keepalive/time.Second))
	fmt.Fprintf(&b, "replace_allowed_ips=true\nallowed_ip=%s\n", netip.PrefixFrom(p.AllowedIP, p.AllowedIP.BitLen()))
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.dev.IpcSet(b.String()); err != nil {
		return fmt.Errorf("set peer %s: %w", p.PublicKey, err)
	}
	return nil
}

// RemovePeer removes one peer.
func (t *Tunnel) RemovePeer(k Key) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.dev.IpcSet(fmt.Sprintf("public_key=%s\nremove=true\n", hexKey(k))); err != nil {
		return fmt.Errorf("remove peer %s: %w", k, err)
	}
	return nil
}

// PeerStats is what the device knows about one peer.
type PeerStats struct {
	Endpoint      string
	LastHandshake time.Time
	RxBytes       int64
	TxBytes       int64
}

// Peers reads every peer's endpoint, last handshake and counters.
func (t *Tunnel) Peers() (map[Key]PeerStats, error) {
	s, err := t.dev.IpcGet()
	if err != nil {
		return nil, fmt.Errorf("read device: %w", err)
	}
	out := map[Key]PeerStats{}
	var cur *Key
	var st PeerStats
	var sec, nsec int64
	flush := func() {
		if cur != nil {
			if sec != 0 || nsec != 0 {
				st.LastHandshake = time.Unix(sec, nsec)
			}
			out[*cur] = st
		}
	}
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), "=")
		if !ok {
			continue
		}
		switch k {
		case "public_key":
			flush()
			b, err := hex.DecodeString(v)
			if err != nil || len(b) != len(Key{}) {
				cur = nil
				continue
			}
			var key Key
			copy(key[:], b)
			cur, st, sec, nsec = &key, PeerStats{}, 0, 0
		case "endpoint":
			st.Endpoint = v
		case "last_handshake_time_sec":
			sec, _ = strconv.ParseInt(v, 10, 64)
		case "last_handshake_time_nsec":
			nsec, _ = strconv.ParseInt(v, 10, 64)
		case "rx_bytes":
			st.RxBytes, _ = strconv.ParseInt(v, 10, 64)
		case "tx_bytes":
			st.TxBytes, _ = strconv.ParseInt(v, 10, 64)
		}
	}
	flush()
	return out, nil
}

// Close tears the device down.
func (t *Tunnel) Close() { t.dev.Close() }
